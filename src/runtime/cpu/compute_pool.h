#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sinkgraph::cpu_device {

// Note [Compute threads]
// The CPU device owns one pool of compute threads, shared by its streams. A
// kernel splits its work into parts (static partitioning: part p always
// covers the same rows, whatever the thread count) and calls run(); the
// calling thread, a stream's worker, takes part 0 and helpers take the rest,
// one part each, so a replay stays one queue entry and the worker is one of
// the compute threads. A job is published by one store of `word_` (a
// sequence number and the part count), so a helper reads nothing but that
// word and, when it has a part, the job's function; the caller waits for
// `pending_` to reach zero before it writes the next job.
//
// Waiting never competes with the work: an idle helper spins for `spin_us`
// (yielding every 64 spins, so an oversubscribed machine does not lose a time
// slice to it) and then parks in a futex wait on `word_`; the caller waiting
// for the last part does the same on `pending_`. Helpers not parked are
// counted in runtime::g_awake_helpers, which shortens the host's spin while
// they may need its core (Note [Spin, yield, park]). Only one job runs at a time:
// a kernel that finds the pool busy (another stream's kernel holds it, or a
// kernel nested in a part) runs every part itself, in order, which gives the
// same result because the parts do not depend on who runs them. Nothing on
// this path allocates.
class ComputePool {
 public:
  using PartFn = void (*)(void* arg, int part);

  explicit ComputePool(std::int64_t spin_us);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Runs fn(arg, p) for every p in [0, parts) and returns when all are done.
  // The pool first follows the process's intra-op setting (num_threads()),
  // starting or stopping helpers when it changed. An exception from a part is
  // rethrown here, after every part has finished.
  void run(int parts, PartFn fn, void* arg);

 private:
  // Threads a job can use now (helpers and the caller); under mutex_.
  [[nodiscard]] int threads_locked() const { return static_cast<int>(helpers_.size()) + 1; }

  static constexpr int kPartBits = 16;
  static constexpr std::uint64_t kPartMask = (std::uint64_t{1} << kPartBits) - 1;

  void resize_locked(int threads);
  void stop_helpers_locked();
  void helper_loop(int index, std::uint64_t seen);
  void run_part(int part) noexcept;

  const std::int64_t spin_ns_;
  std::mutex mutex_;  // held by the thread running a job or resizing
  std::vector<std::thread> helpers_;
  std::uint64_t sequence_ = 0;  // written under mutex_

  // The job; written under mutex_ before `word_` publishes it.
  PartFn fn_ = nullptr;
  void* arg_ = nullptr;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};

  std::atomic<std::uint64_t> word_{0};  // (sequence << kPartBits) | parts
  std::atomic<int> pending_{0};         // helper parts not yet finished
  std::atomic<int> sleepers_{0};        // helpers parked on word_
  std::atomic<bool> caller_parked_{false};
  // The fork generation the helpers were started in (Note [Threads after
  // fork], runtime/fork.h); under mutex_.
  std::uint64_t generation_ = 0;
};

}  // namespace sinkgraph::cpu_device

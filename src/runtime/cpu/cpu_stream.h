#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/fork.h"
#include "sinkgraph/event.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::cpu_device {
class ComputePool;
}

namespace sinkgraph::cpu_device {

// Note [CPU stream worker]
// Each CPU stream owns a ring of queue entries and one worker thread that runs
// them in order. Producers (any host thread) append under a mutex and publish
// with a release store of `tail_`; the worker consumes from `head_`. An idle
// worker spins for StreamOptions::spin_us and then parks in a futex wait on
// `tail_`; a producer only pays the wake-up system call when `sleeping_` is
// set (the seq_cst store/load pair on both sides rules out a lost wake-up).
// synchronize() waits on `completed_` the same way, so the worker only calls
// notify when a host thread is actually waiting; with a compute thread on
// every core it spins at most 50 µs before it parks. A producer that finds the ring full
// parks on `head_` until half of it is free (`room_at_`).
class CpuStream final : public Stream {
 public:
  // Kernels split their work across `pool`, which outlives the stream.
  CpuStream(Device& device, const StreamOptions& options, ComputePool& pool);
  ~CpuStream() override;

  void launch(KernelFn fn, const ArgBlock& args, const char* name) override;
  void record(Event& event) override;
  void wait(const Event& event) override;
  void wait(const ReplayFence& fence) override;
  void synchronize() override;
  void run_on_caller(KernelFn fn, const ArgBlock& args, const char* name) override;
  [[nodiscard]] bool query() const override;
  [[nodiscard]] std::uint64_t submitted() const override;
  [[nodiscard]] std::uint64_t completed() const override;
  [[nodiscard]] StreamCounters counters() const override;
  void reset_counters() override;
  void set_tracing(bool on) override;
  std::vector<KernelSpan> take_spans() override;

 private:
  enum class Kind : std::uint8_t { kernel, record, wait, stop };
  struct Entry {
    Kind kind = Kind::kernel;
    KernelFn fn = nullptr;
    const char* name = nullptr;
    std::shared_ptr<EventState> event;
    std::uint64_t generation = 0;
    ArgBlock args;
  };
  class Context;

  // Appends one entry; `fill` writes it in place while the slot is owned.
  template <typename Fill>
  void enqueue(Fill&& fill);
  void wait_for_room(std::uint64_t tail);
  void worker_loop();
  void run(Entry& entry, Context& ctx);
  void wait_completed(std::uint64_t target) const;
  // Note [Threads after fork] (runtime/fork.h): called on every use.
  void check_fork() {
    if (generation_.load(std::memory_order_relaxed) != runtime::fork_generation()) [[unlikely]]
      adopt_after_fork();
  }
  void adopt_after_fork();

  static constexpr std::uint64_t kCapacity = 1024;
  const std::int64_t spin_ns_;
  ComputePool& pool_;
  std::vector<Entry> ring_;
  std::mutex producer_mutex_;
  std::atomic<std::uint64_t> tail_{0};     // entries published
  std::atomic<std::uint64_t> head_{0};     // entries taken by the worker
  std::atomic<std::uint64_t> room_at_{0};  // a producer parks until head_ reaches it (0: none)
  mutable std::atomic<std::uint64_t> completed_{0};
  std::atomic<bool> sleeping_{false};
  mutable std::atomic<int> host_waiting_{0};

  // Counters (relaxed atomics: read from any thread, written by one side).
  std::atomic<std::uint64_t> launches_{0};
  std::atomic<std::uint64_t> kernels_{0};
  std::atomic<std::int64_t> host_launch_ns_{0};
  std::atomic<std::int64_t> busy_ns_{0};
  std::atomic<std::int64_t> first_launch_ns_{0};
  std::atomic<std::int64_t> last_completion_ns_{0};

  std::atomic<bool> tracing_{false};
  std::mutex spans_mutex_;
  std::vector<KernelSpan> spans_;

  std::mutex fork_mutex_;                  // adopt_after_fork()
  std::atomic<std::uint64_t> generation_;  // the fork generation the worker was started in
  std::thread worker_;
};

}  // namespace sinkgraph::cpu_device

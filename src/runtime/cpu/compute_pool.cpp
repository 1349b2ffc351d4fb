#include "compute_pool.h"

#include <algorithm>

#include "runtime/fork.h"
#include "runtime/spin.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::cpu_device {

ComputePool::ComputePool(std::int64_t spin_us) : spin_ns_(spin_us * 1000) {}

ComputePool::~ComputePool() {
  const std::lock_guard lock(mutex_);
  stop_helpers_locked();
}

void ComputePool::stop_helpers_locked() {
  if (helpers_.empty()) return;
  if (generation_ != runtime::fork_generation()) {
    // Note [Threads after fork]: the parent's helpers are not in this
    // process; let go of their handles. Nothing of theirs is pending: a
    // job's caller waits for every part before it returns.
    for (std::thread& t : helpers_) runtime::abandon(t);
    helpers_.clear();
    pending_.store(0, std::memory_order_relaxed);
    sleepers_.store(0, std::memory_order_relaxed);
    caller_parked_.store(false, std::memory_order_relaxed);
    return;
  }
  stop_.store(true, std::memory_order_relaxed);
  ++sequence_;
  word_.store(sequence_ << kPartBits, std::memory_order_seq_cst);
  word_.notify_all();  // parked helpers; spinning ones see the word change
  for (std::thread& t : helpers_) t.join();
  helpers_.clear();
  stop_.store(false, std::memory_order_relaxed);
}

void ComputePool::resize_locked(int threads) {
  stop_helpers_locked();
  const auto max_threads = static_cast<int>(kPartMask);
  SG_ASSERT(threads >= 1 && threads <= max_threads, "compute pool size ", threads);
  helpers_.reserve(static_cast<std::size_t>(threads - 1));
  generation_ = runtime::fork_generation_watched();
  const std::uint64_t seen = word_.load(std::memory_order_relaxed);
  for (int i = 1; i < threads; ++i)
    helpers_.emplace_back([this, i, seen] { helper_loop(i, seen); });
}

void ComputePool::run_part(int part) noexcept {
  try {
    fn_(arg_, part);
  } catch (...) {
    if (!failed_.exchange(true, std::memory_order_relaxed)) error_ = std::current_exception();
  }
}

void ComputePool::helper_loop(int index, std::uint64_t seen) {
  // Awake until parked, for the host's spin (Note [Spin, yield, park]); a hint,
  // so relaxed.
  runtime::g_awake_helpers.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    std::uint64_t word = seen;
    const auto changed = [&] {
      word = word_.load(std::memory_order_acquire);
      return word != seen;
    };
    if (!runtime::spin_until(runtime::spin_for(spin_ns_), changed)) {
      runtime::g_awake_helpers.fetch_sub(1, std::memory_order_relaxed);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (!changed()) word_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      runtime::g_awake_helpers.fetch_add(1, std::memory_order_relaxed);
    }
    seen = word;
    if (stop_.load(std::memory_order_relaxed)) {
      runtime::g_awake_helpers.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    if (index >= static_cast<int>(word & kPartMask)) continue;  // not in this job
    run_part(index);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_parked_.load(std::memory_order_seq_cst)) {
      pending_.notify_one();
    }
  }
}

void ComputePool::run(int parts, PartFn fn, void* arg) {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || parts <= 1) {
    // Busy (another stream's kernel, or a kernel nested in a part): the
    // caller runs every part, in order.
    for (int p = 0; p < parts; ++p) fn(arg, p);
    return;
  }
  // Note [Threads after fork]: in a child, the parent's helpers are gone.
  if (generation_ != runtime::fork_generation()) [[unlikely]]
    stop_helpers_locked();
  const int wanted = std::clamp(num_threads(), 1, static_cast<int>(kPartMask));
  if (wanted != threads_locked()) resize_locked(wanted);
  const int shared = std::min(parts, threads_locked());
  if (shared <= 1) {
    for (int p = 0; p < parts; ++p) fn(arg, p);
    return;
  }
  fn_ = fn;
  arg_ = arg;
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  pending_.store(shared - 1, std::memory_order_relaxed);
  ++sequence_;
  word_.store((sequence_ << kPartBits) | static_cast<std::uint64_t>(shared),
              std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) word_.notify_all();

  run_part(0);
  for (int p = shared; p < parts; ++p) run_part(p);  // more parts than threads

  const auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!runtime::spin_until(runtime::spin_for(spin_ns_), done)) {
    caller_parked_.store(true, std::memory_order_seq_cst);
    for (int left = pending_.load(std::memory_order_seq_cst); left != 0;
         left = pending_.load(std::memory_order_seq_cst)) {
      pending_.wait(left, std::memory_order_seq_cst);
    }
    caller_parked_.store(false, std::memory_order_relaxed);
  }
  if (failed_.load(std::memory_order_relaxed)) std::rethrow_exception(error_);
}

}  // namespace sinkgraph::cpu_device

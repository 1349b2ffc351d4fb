#include "cpu_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute_pool.h"
#include "runtime/spin.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"

namespace sinkgraph::cpu_device {

class CpuStream::Context final : public KernelContext {
 public:
  explicit Context(CpuStream& stream) : stream_(stream) {}
  void fail(const std::string& message) override {
    stream_.set_sticky_error(std::string(current_name) + ": " + message);
  }
  [[nodiscard]] int num_threads() const override { return sinkgraph::num_threads(); }
  void parallel_run(int parts, void (*fn)(void*, int), void* arg) override {
    stream_.pool_.run(parts, fn, arg);
  }
  const char* current_name = "";

 private:
  CpuStream& stream_;
};

CpuStream::CpuStream(Device& device, const StreamOptions& options, ComputePool& pool)
    : Stream(device, options.name),
      spin_ns_(options.spin_us * 1000),
      pool_(pool),
      ring_(kCapacity),
      generation_(runtime::fork_generation_watched()) {
  SG_CHECK(options.spin_us >= 0, "StreamOptions::spin_us must be >= 0, got ", options.spin_us);
  worker_ = std::thread([this] { worker_loop(); });
}

CpuStream::~CpuStream() {
  if (generation_.load(std::memory_order_relaxed) != runtime::fork_generation()) {
    runtime::abandon(worker_);  // the parent's worker: not in this process, nothing to stop
  } else {
    enqueue([](Entry& e) { e.kind = Kind::stop; });
    worker_.join();
  }
  device().allocator().forget_stream(*this);
}

// Note [Threads after fork] (runtime/fork.h).
void CpuStream::adopt_after_fork() {
  const std::lock_guard lock(fork_mutex_);
  const std::uint64_t now = runtime::fork_generation();
  if (generation_.load(std::memory_order_relaxed) == now) return;  // another thread did
  const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
  SG_CHECK(completed_.load(std::memory_order_relaxed) == tail, "stream '", name(),
           "': this process was forked while work was queued on the stream (",
           tail - completed_.load(std::memory_order_relaxed),
           " entries unfinished); that work cannot go on here. Fork between calls, after "
           "synchronize(), or start the child with the 'spawn' or 'forkserver' method");
  runtime::abandon(worker_);
  sleeping_.store(false, std::memory_order_relaxed);
  room_at_.store(0, std::memory_order_relaxed);
  host_waiting_.store(0, std::memory_order_relaxed);
  worker_ = std::thread([this] { worker_loop(); });
  generation_.store(now, std::memory_order_relaxed);
}

template <typename Fill>
void CpuStream::enqueue(Fill&& fill) {
  check_fork();
  {
    std::lock_guard lock(producer_mutex_);
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= kCapacity) wait_for_room(t);
    Entry& entry = ring_[t % kCapacity];
    fill(entry);
    tail_.store(t + 1, std::memory_order_seq_cst);
  }
  if (sleeping_.load(std::memory_order_seq_cst)) tail_.notify_one();
}

// Back-pressure: a full ring makes the producer wait for the worker. It
// parks until half the ring is free rather than spinning (a yielding spin
// still takes a core from the compute threads, Note [Compute threads]) and
// rather than waking at every entry taken.
void CpuStream::wait_for_room(std::uint64_t tail) {
  const std::uint64_t room_at = tail - kCapacity / 2 + 1;  // head that frees half the ring
  room_at_.store(room_at, std::memory_order_seq_cst);
  for (std::uint64_t h = head_.load(std::memory_order_seq_cst); h < room_at;
       h = head_.load(std::memory_order_seq_cst)) {
    head_.wait(h, std::memory_order_seq_cst);
  }
  room_at_.store(0, std::memory_order_relaxed);
}

void CpuStream::launch(KernelFn fn, const ArgBlock& args, const char* name) {
  if (is_capturing()) [[unlikely]] {
    if (capture_launch(fn, args, name)) return;
  } else if (any_capture_active()) [[unlikely]] {
    check_uncaptured_launch(name);
  }
  const std::int64_t start = now_ns();
  std::int64_t expected = 0;
  first_launch_ns_.compare_exchange_strong(expected, start, std::memory_order_relaxed);
  enqueue([&](Entry& e) {
    e.kind = Kind::kernel;
    e.fn = fn;
    e.name = name;
    e.event.reset();
    std::memcpy(static_cast<void*>(&e.args), &args, args.used_bytes());
  });
  launches_.fetch_add(1, std::memory_order_relaxed);
  const std::int64_t end = now_ns();
  host_launch_ns_.fetch_add(end - start, std::memory_order_relaxed);
  if (tracing_.load(std::memory_order_relaxed)) [[unlikely]] {
    std::lock_guard lock(spans_mutex_);
    spans_.push_back(KernelSpan{name, start, end, true});
  }
}

// Note [Replays on the caller] (device_graph.h): when every entry enqueued so
// far has completed and the compute threads fill the cores, the calling
// thread runs `fn` itself, holding the producer lock so that nothing can be
// enqueued behind it until it is done: stream order is kept, the worker stays
// parked, and the call pays no hand-off. Counted, traced and failed (a sticky
// error) as on the worker. With a core to spare the worker runs it.
void CpuStream::run_on_caller(KernelFn fn, const ArgBlock& args, const char* name) {
  check_fork();
  if (is_capturing() || any_capture_active() || sinkgraph::num_threads() < available_cores()) {
    launch(fn, args, name);  // recorded, or refused, as any launch
    if (!is_capturing()) wait_completed(tail_.load(std::memory_order_acquire));
    return;
  }
  {
    std::unique_lock lock(producer_mutex_);
    if (completed_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_relaxed)) {
      Context ctx(*this);
      const std::int64_t start = now_ns();
      std::int64_t expected = 0;
      first_launch_ns_.compare_exchange_strong(expected, start, std::memory_order_relaxed);
      launches_.fetch_add(1, std::memory_order_relaxed);
      Entry entry;
      entry.kind = Kind::kernel;
      entry.fn = fn;
      entry.name = name;
      std::memcpy(static_cast<void*>(&entry.args), &args, args.used_bytes());
      run(entry, ctx);
      return;
    }
  }
  launch(fn, args, name);
  wait_completed(tail_.load(std::memory_order_acquire));
}

void CpuStream::record(Event& event) {
  if (is_capturing() && capture_record(event)) return;
  const auto& state = event.state();
  const std::uint64_t generation = state->recorded.fetch_add(1) + 1;
  enqueue([&](Entry& e) {
    e.kind = Kind::record;
    e.event = state;
    e.generation = generation;
  });
}

void CpuStream::wait(const Event& event) {
  if (any_capture_active() && capture_wait(event)) return;
  const auto& state = event.state();
  const std::uint64_t generation = state->recorded.load(std::memory_order_acquire);
  if (generation == 0) return;  // never recorded: nothing to wait for
  enqueue([&](Entry& e) {
    e.kind = Kind::wait;
    e.event = state;
    e.generation = generation;
  });
}

void CpuStream::wait(const ReplayFence& fence) {
  SG_ASSERT(!is_capturing(), "a fence wait cannot be captured");
  if (fence.reached()) return;
  enqueue([&](Entry& e) {
    e.kind = Kind::wait;
    e.event = fence.state;
    e.generation = fence.generation;
  });
}

void CpuStream::worker_loop() {
  Context ctx(*this);
  // 0 for a new stream; in a forked child, where the worker starts again
  // (Note [Threads after fork]), the entries taken before the fork.
  std::uint64_t head = head_.load(std::memory_order_relaxed);
  for (;;) {
    std::uint64_t tail = tail_.load(std::memory_order_acquire);
    if (tail == head) {
      const std::int64_t deadline = now_ns() + spin_ns_;
      for (int i = 0; tail == head; ++i) {
        runtime::cpu_relax();
        tail = tail_.load(std::memory_order_acquire);
        if ((i & 63) == 63) {
          if (now_ns() >= deadline) break;
          runtime::spin_yield();
        }
      }
      if (tail == head) {
        sleeping_.store(true, std::memory_order_seq_cst);
        tail = tail_.load(std::memory_order_seq_cst);
        if (tail == head) tail_.wait(head, std::memory_order_seq_cst);
        sleeping_.store(false, std::memory_order_relaxed);
        continue;
      }
    }
    Entry& entry = ring_[head % kCapacity];
    const bool stop = entry.kind == Kind::stop;
    run(entry, ctx);
    entry.event.reset();
    ++head;
    head_.store(head, std::memory_order_seq_cst);
    const std::uint64_t room_at = room_at_.load(std::memory_order_seq_cst);
    if (room_at != 0 && head >= room_at) head_.notify_all();
    runtime::advance(completed_, head, host_waiting_);
    if (stop) return;
  }
}

void CpuStream::run(Entry& entry, Context& ctx) {
  switch (entry.kind) {
    case Kind::kernel: {
      const std::int64_t start = now_ns();
      ctx.current_name = entry.name;
      try {
        entry.fn(entry.args, ctx);
      } catch (const std::exception& e) {  // kernels should not throw; never lose it
        ctx.fail(e.what());
      }
      const std::int64_t end = now_ns();
      busy_ns_.fetch_add(end - start, std::memory_order_relaxed);
      kernels_.fetch_add(1, std::memory_order_relaxed);
      last_completion_ns_.store(end, std::memory_order_relaxed);
      if (tracing_.load(std::memory_order_relaxed)) {
        std::lock_guard lock(spans_mutex_);
        spans_.push_back(KernelSpan{entry.name, start, end});
      }
      break;
    }
    case Kind::record: {
      const std::int64_t t = now_ns();
      entry.event->timestamp_ns.store(t, std::memory_order_relaxed);
      runtime::advance(entry.event->completed, entry.generation);
      last_completion_ns_.store(t, std::memory_order_relaxed);
      break;
    }
    case Kind::wait: {
      runtime::wait_at_least(entry.event->completed, entry.generation, runtime::spin_for(spin_ns_));
      break;
    }
    case Kind::stop:
      break;
  }
}

void CpuStream::wait_completed(std::uint64_t target) const {
  // Note [Spin, yield, park]; the worker notifies only a parked host thread.
  runtime::wait_at_least(completed_, target, runtime::waiter_spin(spin_ns_), host_waiting_);
}

void CpuStream::synchronize() {
  check_fork();
  if (any_capture_active()) check_capture_safe("synchronize");
  wait_completed(tail_.load(std::memory_order_acquire));
  check_error();
}

bool CpuStream::query() const {
  return completed_.load(std::memory_order_acquire) >= tail_.load(std::memory_order_acquire);
}

std::uint64_t CpuStream::submitted() const { return tail_.load(std::memory_order_acquire); }

std::uint64_t CpuStream::completed() const { return completed_.load(std::memory_order_acquire); }

StreamCounters CpuStream::counters() const {
  StreamCounters c;
  c.launches = launches_.load(std::memory_order_relaxed);
  c.kernels = kernels_.load(std::memory_order_relaxed);
  c.host_launch_ns = host_launch_ns_.load(std::memory_order_relaxed);
  c.device_busy_ns = busy_ns_.load(std::memory_order_relaxed);
  const std::int64_t first = first_launch_ns_.load(std::memory_order_relaxed);
  const std::int64_t last = last_completion_ns_.load(std::memory_order_relaxed);
  c.window_ns = (first > 0 && last > first) ? last - first : 0;
  return c;
}

void CpuStream::reset_counters() {
  launches_.store(0, std::memory_order_relaxed);
  kernels_.store(0, std::memory_order_relaxed);
  host_launch_ns_.store(0, std::memory_order_relaxed);
  busy_ns_.store(0, std::memory_order_relaxed);
  first_launch_ns_.store(0, std::memory_order_relaxed);
  last_completion_ns_.store(0, std::memory_order_relaxed);
}

void CpuStream::set_tracing(bool on) { tracing_.store(on, std::memory_order_relaxed); }

std::vector<KernelSpan> CpuStream::take_spans() {
  std::lock_guard lock(spans_mutex_);
  return std::exchange(spans_, {});
}

}  // namespace sinkgraph::cpu_device

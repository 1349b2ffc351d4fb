#pragma once
// Streams: in-order queues of device work. On the CPU device each stream is
// served by its own worker thread, so launch() returns at once exactly as on an
// accelerator and synchronize() waits (see Note [CPU stream worker]).
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sinkgraph/device.h"
#include "sinkgraph/export.h"
#include "sinkgraph/kernel_abi.h"

namespace sinkgraph {

class Event;
struct ReplayFence;
class DeviceGraph;
class MemPool;
struct CaptureState;

// What capture forbids (Note [Capture] in device_graph.h): host
// synchronization, host reads, allocations outside the capture's pool and
// launches on streams that have not joined the capture are errors from any
// thread under `global`, from the capturing thread under `thread_local_`, and
// allowed under `relaxed`.
enum class CaptureErrorMode : std::uint8_t { global, thread_local_, relaxed };
SG_API const char* capture_error_mode_name(CaptureErrorMode mode);

// How an idle worker waits for work: it spins for `spin_us` microseconds, then
// parks on a futex (a host thread waiting in synchronize() does the same).
// Parking saves a core; waking a parked thread costs a system call and, on a
// virtual machine whose idle vCPU halted, the hypervisor's wake-up: 200-330 us
// measured on this project's 2-vCPU VMs, longer than a whole decode step. The
// default, 2 ms, keeps a decode loop (host launches, device runs, host reads
// the logits) from ever parking between steps. spin_us = 0 parks at once.
inline constexpr std::int64_t kDefaultSpinUs = 2000;
struct StreamOptions {
  std::int64_t spin_us = kDefaultSpinUs;
  std::string name;
};

struct StreamCounters {
  std::uint64_t launches = 0;       // queue entries submitted
  std::uint64_t kernels = 0;        // kernels run by the device
  std::int64_t host_launch_ns = 0;  // host time spent inside launch()
  std::int64_t device_busy_ns = 0;  // time the worker spent running kernels
  std::int64_t window_ns = 0;       // first launch to last completion
  [[nodiscard]] std::int64_t device_idle_ns() const { return window_ns - device_busy_ns; }
};

// One kernel's execution on the device, or one launch() on the host,
// recorded only while tracing is on.
struct KernelSpan {
  const char* name = nullptr;
  std::int64_t start_ns = 0;  // steady clock
  std::int64_t end_ns = 0;
  bool host = false;  // a host launch, not device execution
};

class SG_API Stream {
 public:
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  virtual ~Stream();

  [[nodiscard]] Device& device() const { return device_; }
  [[nodiscard]] std::uint64_t id() const { return id_; }
  [[nodiscard]] const std::string& name() const { return name_; }

  // Enqueues `fn` over a copy of `args`; returns at once. `name` must outlive
  // the stream (operator names are static).
  virtual void launch(KernelFn fn, const ArgBlock& args, const char* name) = 0;
  // Enqueues a marker that completes `event` when the stream reaches it.
  virtual void record(Event& event) = 0;
  // Work enqueued after this waits for `event`'s last record to complete.
  virtual void wait(const Event& event) = 0;
  // Work enqueued after this waits until `fence` is reached (a graph replay's
  // completion: Note [Output uses] in allocator.h). Not recordable: a
  // capturing stream must not be given one.
  virtual void wait(const ReplayFence& fence) = 0;
  // Waits for all enqueued work; raises a sticky kernel error, if any.
  virtual void synchronize() = 0;
  // Runs `fn` in stream order and returns once it and all earlier work are
  // complete. As after launch(), a kernel error stays sticky until the next
  // synchronize(). A backend whose device is the host may run `fn` on the
  // calling thread when the stream is idle (Note [Replays on the caller] in
  // device_graph.h); the default launches and waits.
  virtual void run_on_caller(KernelFn fn, const ArgBlock& args, const char* name);
  // True when all enqueued work has completed.
  [[nodiscard]] virtual bool query() const = 0;
  // Raises (and clears) a sticky kernel error without waiting.
  void check_error();
  // Records a fresh event here and returns it as a fence: reached once this
  // stream has run everything enqueued so far.
  ReplayFence record_fence();
  // Throws the error launch() would throw for a kernel named `name` (this
  // stream is capturing, or a capture elsewhere forbids launches here),
  // without launching anything. A launch made of several entries (a graph
  // replay) checks first, so it is either refused whole or enqueued whole.
  void check_can_launch(const char* name) const;

  // Records launches instead of running them until end_capture(); every
  // allocation for this stream comes from `pool` meanwhile.
  void begin_capture(std::shared_ptr<MemPool> pool,
                     CaptureErrorMode mode = CaptureErrorMode::global);
  // Ends the capture this stream began; throws if a forked stream never joined back.
  DeviceGraph end_capture();
  [[nodiscard]] bool is_capturing() const { return capturing_.load(std::memory_order_acquire); }
  // Nodes recorded so far by the capture this stream takes part in.
  [[nodiscard]] std::size_t capture_size() const;

  // Progress in queue entries: the allocator's cross-stream reuse rule uses it.
  [[nodiscard]] virtual std::uint64_t submitted() const = 0;
  [[nodiscard]] virtual std::uint64_t completed() const = 0;

  [[nodiscard]] virtual StreamCounters counters() const = 0;
  virtual void reset_counters() = 0;
  virtual void set_tracing(bool on) = 0;
  virtual std::vector<KernelSpan> take_spans() = 0;

 protected:
  Stream(Device& device, std::string name);
  // Sticky error storage shared by backends.
  void set_sticky_error(const std::string& message);
  // Capture hooks for backends: each returns true when the call was recorded
  // into an active capture instead of being enqueued.
  bool capture_launch(KernelFn fn, const ArgBlock& args, const char* name);
  bool capture_record(Event& event);
  bool capture_wait(const Event& event);
  // Checks a launch on a stream outside any capture while captures are active.
  void check_uncaptured_launch(const char* name) const;

 private:
  Device& device_;
  std::uint64_t id_;
  std::string name_;
  std::atomic<bool> has_error_{false};
  std::mutex error_mutex_;
  std::string error_;
  friend struct CaptureState;
  std::atomic<bool> capturing_{false};
  std::shared_ptr<CaptureState> capture_;  // guarded by the capture registry's mutex
};

// The operator the dispatcher is running on this thread (for capture errors).
SG_API void set_current_op_name(const char* name);
SG_API const char* current_op_name();

// The stream this host thread launches on for `device` (its default stream
// until set). StreamGuard sets it for a scope.
SG_API Stream& current_stream(Device& device);
SG_API Stream& current_stream();                 // on the CPU device
SG_API void set_current_stream(Stream* stream);  // null restores the default

class SG_API StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceType type_;
  Stream* previous_;
};

// Steady-clock nanoseconds, the time base of counters, spans and events.
SG_API std::int64_t now_ns();

}  // namespace sinkgraph

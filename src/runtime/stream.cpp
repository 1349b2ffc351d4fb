#include "sinkgraph/stream.h"

#include <array>
#include <chrono>
#include <thread>

#include "runtime/spin.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"

namespace sinkgraph {

namespace {
std::atomic<std::uint64_t> g_next_stream_id{1};
// initial-exec: the library is linked, never dlopen'ed, so the current stream
// is one TLS load instead of a __tls_get_addr call on every launch.
__attribute__((tls_model("initial-exec"))) thread_local std::array<Stream*, kNumDeviceTypes>
    t_current_stream{};
}  // namespace

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Stream::Stream(Device& device, std::string name)
    : device_(device), id_(g_next_stream_id.fetch_add(1)), name_(std::move(name)) {
  if (name_.empty()) name_ = "stream" + std::to_string(id_);
}

Stream::~Stream() = default;

void Stream::run_on_caller(KernelFn fn, const ArgBlock& args, const char* name) {
  launch(fn, args, name);
  record_fence().wait();
}

void Stream::set_sticky_error(const std::string& message) {
  std::lock_guard lock(error_mutex_);
  if (!has_error_.load(std::memory_order_relaxed)) {
    error_ = message;
    has_error_.store(true, std::memory_order_release);
  }
}

void Stream::check_error() {
  if (!has_error_.load(std::memory_order_acquire)) return;
  std::string message;
  {
    std::lock_guard lock(error_mutex_);
    message = std::move(error_);
    error_.clear();
    has_error_.store(false, std::memory_order_release);
  }
  throw Error("asynchronous kernel error on " + device_.name() + " " + name_ + ": " + message);
}

Stream& current_stream(Device& device) {
  Stream* s = t_current_stream[static_cast<std::size_t>(device.type())];
  if (s != nullptr && &s->device() == &device) return *s;
  return device.default_stream();
}

Stream& current_stream() { return current_stream(cpu()); }

void set_current_stream(Stream* stream) {
  if (stream == nullptr) {
    t_current_stream.fill(nullptr);
    return;
  }
  t_current_stream[static_cast<std::size_t>(stream->device().type())] = stream;
}

StreamGuard::StreamGuard(Stream& stream)
    : type_(stream.device().type()), previous_(t_current_stream[static_cast<std::size_t>(type_)]) {
  t_current_stream[static_cast<std::size_t>(type_)] = &stream;
}

StreamGuard::~StreamGuard() { t_current_stream[static_cast<std::size_t>(type_)] = previous_; }

// ---- Event -------------------------------------------------------------------

Event::Event() : state_(std::make_shared<EventState>()) {}

void Event::record(Stream& stream) { stream.record(*this); }

bool Event::query() const {
  return state_->completed.load(std::memory_order_acquire) >=
         state_->recorded.load(std::memory_order_acquire);
}

void Event::synchronize() const {
  if (any_capture_active()) check_capture_safe("Event::synchronize");
  const std::uint64_t target = state_->recorded.load(std::memory_order_acquire);
  runtime::wait_at_least(state_->completed, target, runtime::spin_for(0));
}

void complete_fence(EventState& state, std::uint64_t generation) {
  std::uint64_t now = state.completed.load(std::memory_order_acquire);
  while (now < generation &&
         !state.completed.compare_exchange_weak(now, generation, std::memory_order_seq_cst)) {
  }
  runtime::wake(state.completed);
}

ReplayFence Stream::record_fence() {
  Event event;
  event.record(*this);
  return ReplayFence{id(), event.state(), event.state()->recorded.load(std::memory_order_acquire)};
}

double Event::elapsed_ms(const Event& end) const {
  SG_CHECK(state_->recorded.load() > 0 && end.state_->recorded.load() > 0,
           "elapsed_ms: both events must have been recorded");
  SG_CHECK(query() && end.query(),
           "elapsed_ms: both events must have completed (synchronize first)");
  return static_cast<double>(end.state_->timestamp_ns.load() - state_->timestamp_ns.load()) / 1e6;
}

}  // namespace sinkgraph

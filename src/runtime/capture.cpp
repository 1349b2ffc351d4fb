// Stream capture (Note [Capture] in device_graph.h): the registry of active
// captures, recording launches and events, fork/join, and capture-time checks.
#include <algorithm>
#include <thread>
#include <unordered_map>

#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"

namespace sinkgraph {

struct CaptureState {
  struct Member {
    Stream* stream;
    int last_node = -1;
    std::vector<int> pending;  // dependencies from events waited on
    bool joined_back = true;   // the origin waited on this stream's last node
  };
  struct Marker {
    int stream;
    int node;
  };
  DeviceGraph graph;
  CaptureErrorMode mode = CaptureErrorMode::global;
  std::thread::id thread;
  std::vector<Member> members;  // [0] is the origin
  std::unordered_map<const EventState*, Marker> events;

  static void set_capture(Stream& s, std::shared_ptr<CaptureState> state) {
    s.capturing_.store(state != nullptr, std::memory_order_release);
    s.capture_ = std::move(state);
  }
  static const std::shared_ptr<CaptureState>& of(const Stream& s) { return s.capture_; }
};

namespace {

std::mutex g_mutex;  // guards every CaptureState and Stream::capture_
std::vector<std::shared_ptr<CaptureState>> g_active;
std::atomic<int> g_num_active{0};
__attribute__((tls_model("initial-exec"))) thread_local const char* t_current_op = nullptr;

int member_index(const CaptureState& c, const Stream& s) {
  for (std::size_t i = 0; i < c.members.size(); ++i) {
    if (c.members[i].stream == &s) return static_cast<int>(i);
  }
  return -1;
}

std::string op_suffix() {
  return t_current_op != nullptr ? std::string(" (while running operator '") + t_current_op + "')"
                                 : "";
}

}  // namespace

const char* capture_error_mode_name(CaptureErrorMode mode) {
  switch (mode) {
    case CaptureErrorMode::global:
      return "global";
    case CaptureErrorMode::thread_local_:
      return "thread_local";
    case CaptureErrorMode::relaxed:
      return "relaxed";
  }
  return "?";
}

void set_current_op_name(const char* name) { t_current_op = name; }
const char* current_op_name() { return t_current_op; }

bool any_capture_active() { return g_num_active.load(std::memory_order_acquire) > 0; }

void check_capture_safe(const char* what) {
  if (!any_capture_active()) return;
  std::lock_guard lock(g_mutex);
  for (const auto& c : g_active) {
    const bool forbidden =
        c->mode == CaptureErrorMode::global ||
        (c->mode == CaptureErrorMode::thread_local_ && c->thread == std::this_thread::get_id());
    SG_CHECK(!forbidden, what, op_suffix(), " is not allowed while stream '",
             c->members[0].stream->name(),
             "' is capturing a graph (capture_error_mode=", capture_error_mode_name(c->mode),
             "): a captured graph cannot wait for or read device results. Move it out of the "
             "captured function, or use capture_error_mode=relaxed");
  }
}

void Stream::begin_capture(std::shared_ptr<MemPool> pool, CaptureErrorMode mode) {
  SG_CHECK(pool != nullptr, "begin_capture on stream '", name(), "': a capture needs a MemPool");
  auto state = std::make_shared<CaptureState>();
  state->mode = mode;
  state->thread = std::this_thread::get_id();
  state->graph.device = &device();
  state->graph.pool = pool;
  state->members.push_back({this, -1, {}, true});
  {
    std::lock_guard lock(g_mutex);
    SG_CHECK(capture_ == nullptr, "begin_capture: stream '", name(), "' is already capturing");
    CaptureState::set_capture(*this, state);
    g_active.push_back(state);
    g_num_active.fetch_add(1, std::memory_order_acq_rel);
  }
  device().allocator().route_stream(*this, std::move(pool));
}

DeviceGraph Stream::end_capture() {
  std::shared_ptr<CaptureState> state;
  {
    std::lock_guard lock(g_mutex);
    SG_CHECK(capture_ != nullptr, "end_capture: stream '", name(), "' is not capturing");
    SG_CHECK(capture_->members[0].stream == this, "end_capture: stream '", name(),
             "' joined a capture begun on stream '", capture_->members[0].stream->name(),
             "'; end it there");
    state = capture_;
    for (auto& m : state->members) {
      CaptureState::set_capture(*m.stream, nullptr);
      m.stream->device().allocator().route_stream(*m.stream, nullptr);
    }
    std::erase(g_active, state);
    g_num_active.fetch_sub(1, std::memory_order_acq_rel);
  }
  for (std::size_t i = 1; i < state->members.size(); ++i) {
    const auto& m = state->members[i];
    SG_CHECK(
        m.joined_back || m.last_node < 0, "end_capture: stream '", m.stream->name(),
        "' forked into the capture but its last work was never joined back (record an event on "
        "it and make stream '",
        name(), "' wait on that event before end_capture)");
  }
  state->graph.num_streams = static_cast<int>(state->members.size());
  return std::move(state->graph);
}

std::size_t Stream::capture_size() const {
  std::lock_guard lock(g_mutex);
  return capture_ == nullptr ? 0 : capture_->graph.nodes.size();
}

bool Stream::capture_launch(KernelFn fn, const ArgBlock& args, const char* kernel_name) {
  std::lock_guard lock(g_mutex);
  if (capture_ == nullptr) return false;
  CaptureState& c = *capture_;
  const int slot = member_index(c, *this);
  auto& m = c.members[static_cast<std::size_t>(slot)];
  if (c.graph.nodes.size() == c.graph.nodes.capacity()) {
    c.graph.nodes.reserve(std::max<std::size_t>(64, 2 * c.graph.nodes.size()));
  }
  GraphNode& node = c.graph.nodes.emplace_back();  // built in place: nodes are ~900 bytes
  node.fn = fn;
  node.name = kernel_name;
  std::memcpy(static_cast<void*>(&node.args), &args, args.used_bytes());
  node.stream = slot;
  if (m.last_node >= 0) node.deps.push_back(m.last_node);
  node.deps.insert(node.deps.end(), m.pending.begin(), m.pending.end());
  m.pending.clear();
  m.last_node = static_cast<int>(c.graph.nodes.size()) - 1;
  if (slot != 0) m.joined_back = false;
  return true;
}

bool Stream::capture_record(Event& event) {
  std::lock_guard lock(g_mutex);
  if (capture_ == nullptr) return false;
  CaptureState& c = *capture_;
  const int slot = member_index(c, *this);
  c.events[event.state().get()] = {slot, c.members[static_cast<std::size_t>(slot)].last_node};
  return true;
}

bool Stream::capture_wait(const Event& event) {
  std::lock_guard lock(g_mutex);
  std::shared_ptr<CaptureState> owner;
  CaptureState::Marker marker{};
  for (const auto& c : g_active) {
    if (const auto it = c->events.find(event.state().get()); it != c->events.end()) {
      owner = c;
      marker = it->second;
      break;
    }
  }
  if (owner == nullptr) {
    SG_CHECK(capture_ == nullptr, "stream '", name(),
             "' is capturing and waits on an event recorded "
             "outside the capture; record it inside the capture");
    return false;
  }
  if (capture_ == nullptr) {  // fork: this stream joins the capture
    owner->members.push_back({this, -1, {}, true});
    CaptureState::set_capture(*this, owner);
    device().allocator().route_stream(*this, owner->graph.pool);
  }
  SG_CHECK(capture_ == owner, "stream '", name(), "' waits on an event of another capture");
  const int slot = member_index(*owner, *this);
  auto& m = owner->members[static_cast<std::size_t>(slot)];
  if (marker.node >= 0) m.pending.push_back(marker.node);
  if (marker.stream != slot && marker.stream > 0) {
    auto& other = owner->members[static_cast<std::size_t>(marker.stream)];
    if (other.last_node == marker.node && slot == 0) other.joined_back = true;
  }
  return true;
}

void Stream::check_can_launch(const char* kernel_name) const {
  SG_CHECK(!is_capturing(), kernel_name, ": stream '", name(),
           "' is capturing a graph; a graph replay cannot be recorded into another capture "
           "(replay it outside the capture, or call the function on another stream)");
  check_uncaptured_launch(kernel_name);
}

void Stream::check_uncaptured_launch(const char* kernel_name) const {
  if (!any_capture_active()) return;
  std::lock_guard lock(g_mutex);
  for (const auto& c : g_active) {
    const bool forbidden =
        c->mode != CaptureErrorMode::relaxed && c->thread == std::this_thread::get_id();
    SG_CHECK(!forbidden, "operator '", kernel_name, "' launched on stream '", name(),
             "', which has not joined the capture of stream '", c->members[0].stream->name(),
             "' (capture_error_mode=", capture_error_mode_name(c->mode),
             "): make the stream wait on an event recorded in the capture first");
  }
}

}  // namespace sinkgraph

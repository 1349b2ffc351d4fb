// DeviceGraph (recorded nodes) and GraphExec (replay): Note [Replay].
#include "sinkgraph/device_graph.h"

#include <cstring>
#include <sstream>
#include <thread>

#include "runtime/spin.h"
#include "sinkgraph/error.h"

namespace sinkgraph {

namespace {

// Note [Spin, yield, park]: a replay waiting for the previous one or for a
// node on another stream, and a host thread waiting for a replay's output,
// wait as a host thread in synchronize() does.
void wait_for(const std::atomic<std::uint64_t>& value, std::uint64_t target) {
  runtime::wait_at_least(value, target, runtime::waiter_spin(runtime::kDefaultSpinNs));
}

}  // namespace

void ReplayFence::wait() const {
  if (state != nullptr) wait_for(state->completed, generation);
}

namespace {

std::string tensor_text(const TensorArg& t) {
  std::ostringstream out;
  out << dtype_name(t.dtype) << "[";
  for (int i = 0; i < t.ndim; ++i) out << (i > 0 ? "," : "") << t.sizes[i];
  out << "]@" << t.data << "+" << t.offset;
  bool contiguous = t.is_contiguous();
  if (!contiguous) {
    out << " strides(";
    for (int i = 0; i < t.ndim; ++i) out << (i > 0 ? "," : "") << t.strides[i];
    out << ")";
  }
  return out.str();
}

}  // namespace

std::string DeviceGraph::str() const {
  std::ostringstream out;
  out << "device graph: " << nodes.size() << " nodes on " << num_streams << " stream(s)";
  if (pool) out << ", pool '" << pool->name() << "'";
  out << "\n";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    out << "  #" << i << " [s" << n.stream << "] " << n.name << "(";
    for (int t = 0; t < n.args.num_tensors; ++t)
      out << (t > 0 ? ", " : "") << tensor_text(n.args.tensors[t]);
    out << ")";
    if (n.args.num_scalars > 0) {
      out << " scalars{";
      for (int s = 0; s < n.args.num_scalars; ++s) {
        // Slots are untyped: small integers print as integers, anything else
        // as the double whose bits it holds (eps, theta, scale).
        const std::int64_t v = n.args.scalars[s].i;
        constexpr std::int64_t kSmall = std::int64_t{1} << 40;
        out << (s > 0 ? ", " : "") << s << ": ";
        if (v > -kSmall && v < kSmall) {
          out << v;
        } else {
          out << n.args.scalars[s].f;
        }
        for (const auto& u : n.updates) {
          if (u.scalar_index == s) out << " <- updatable " << u.expr.str();
        }
      }
      out << "}";
    }
    if (!n.deps.empty()) {
      out << " after";
      for (const int d : n.deps) out << " #" << d;
    }
    out << "\n";
  }
  return out.str();
}

struct GraphExec::Replay {
  GraphExec* exec = nullptr;
  std::uint64_t generation = 0;
  std::vector<std::int64_t> values;  // one per update, in node order
  std::vector<ReplayCopy> copies;
  std::vector<ReplayCopy> copies_out;
  std::vector<ReplayFence> fences;
  std::shared_ptr<EventState> done;
  std::uint64_t done_generation = 0;
  std::shared_ptr<ReplayOrder> order;  // with its ticket, when launched under an order
  std::uint64_t ticket = 0;
};

std::unique_ptr<GraphExec> DeviceGraph::instantiate(const std::vector<std::string>& symbols) const {
  std::unique_ptr<GraphExec> exec(new GraphExec());
  exec->symbols_ = symbols;
  exec->pool_ = pool;
  exec->order_.resize(static_cast<std::size_t>(num_streams));
  exec->has_cross_dependents_.assign(nodes.size(), false);
  exec->nodes_.reserve(nodes.size());
  constexpr std::size_t kWord = sizeof(std::uint64_t);
  static_assert(alignof(ArgBlock) <= kWord, "the argument arena is word aligned");
  std::size_t words = 0;
  for (const GraphNode& n : nodes) words += (n.args.used_bytes() + kWord - 1) / kWord;
  SG_CHECK(words < (std::size_t{1} << 32), "a device graph of ", nodes.size(),
           " nodes is too large to instantiate");
  exec->args_.resize(words);
  std::size_t at = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    const std::size_t used = n.args.used_bytes();
    std::memcpy(&exec->args_[at], &n.args, used);
    GraphExec::Node node{n.fn, static_cast<std::uint32_t>(at),
                         static_cast<std::uint32_t>(exec->cross_deps_.size()), 0};
    at += (used + kWord - 1) / kWord;
    for (const int d : n.deps) {
      SG_ASSERT(d >= 0 && static_cast<std::size_t>(d) < i, "dependency on a later node");
      if (nodes[static_cast<std::size_t>(d)].stream != n.stream) {
        exec->cross_deps_.push_back(d);
        exec->has_cross_dependents_[static_cast<std::size_t>(d)] = true;
      }
    }
    node.deps_end = static_cast<std::uint32_t>(exec->cross_deps_.size());
    for (const UpdateSlot& u : n.updates) {
      SG_CHECK(u.scalar_index >= 0 && u.scalar_index < n.args.num_scalars, "updatable slot ",
               u.scalar_index, " of node #", i, " (", n.name, ") is not a scalar of the node");
      exec->updates_.push_back(
          {static_cast<int>(i), u.scalar_index, CompiledSymExpr(u.expr, symbols)});
    }
    exec->nodes_.push_back(node);
    exec->labels_.push_back(n.label.empty() ? std::string(n.name) : n.label);
    exec->order_[static_cast<std::size_t>(n.stream)].push_back(static_cast<int>(i));
  }
  exec->done_ = std::make_unique<std::atomic<std::uint64_t>[]>(nodes.size());
  exec->branch_done_ =
      std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(num_streams));
  for (int b = 1; b < num_streams; ++b) {
    SG_ASSERT(device != nullptr, "a multi-stream graph needs its device");
    StreamOptions options;
    options.name = "replay-branch" + std::to_string(b);
    exec->branches_.push_back(device->create_stream(options));
  }
  return exec;
}

GraphExec::~GraphExec() {
  // The launch stream's entries point at this exec: wait for the last one.
  {
    std::unique_lock lock(finish_mutex_);
    const std::uint64_t last = generation_.load(std::memory_order_acquire);
    finish_cv_.wait(lock, [&] { return finished_.load(std::memory_order_acquire) >= last; });
  }
  for (auto& b : branches_) b->synchronize();
}

GraphExec::Replay* GraphExec::take_replay() {
  std::lock_guard lock(free_mutex_);
  if (free_.empty()) {
    all_.push_back(std::make_unique<Replay>());
    all_.back()->exec = this;
    return all_.back().get();
  }
  Replay* r = free_.back();
  free_.pop_back();
  return r;
}

void GraphExec::give_back(Replay* replay) {
  std::lock_guard lock(free_mutex_);
  free_.push_back(replay);
}

void GraphExec::launch(Stream& stream, std::span<const std::int64_t> sym_values,
                       std::span<const ReplayCopy> copies,
                       const std::shared_ptr<ReplayOrder>& order) {
  LaunchOptions options;
  options.copies_in = copies;
  options.order = order;
  launch(stream, sym_values, options);
}

void GraphExec::check_can_launch(const Stream& stream) const {
  stream.check_can_launch("graph_replay");
  for (const auto& b : branches_) b->check_can_launch("graph_replay_branch");
}

void GraphExec::launch(Stream& stream, std::span<const std::int64_t> sym_values,
                       const LaunchOptions& options) {
  SG_CHECK(sym_values.size() == symbols_.size(), "graph replay: expected ", symbols_.size(),
           " sym values, got ", sym_values.size());
  // Everything that can refuse the launch is checked before a generation or a
  // ticket is taken: a taken ticket that never runs would make every later
  // replay under the same order wait forever.
  check_can_launch(stream);
  const std::shared_ptr<ReplayOrder>& order = options.order;
  Replay* r = take_replay();
  r->generation = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  r->values.clear();
  for (const Update& u : updates_) r->values.push_back(u.expr.eval(sym_values.data()));
  r->copies.assign(options.copies_in.begin(), options.copies_in.end());
  r->copies_out.assign(options.copies_out.begin(), options.copies_out.end());
  r->fences.clear();
  for (const ReplayFence& f : options.wait_for) {
    if (f.stream_id != stream.id() && !f.reached()) r->fences.push_back(f);
  }
  r->done = options.done;
  r->done_generation = options.done_generation;
  if (order != nullptr) {
    if (r->order != order) r->order = order;
    r->ticket = order->launched_.fetch_add(1, std::memory_order_acq_rel) + 1;
  } else {
    r->order.reset();
  }
  for (std::size_t b = 0; b < branches_.size(); ++b) {
    ArgBlock a;
    a.num_tensors = 0;
    a.num_scalars = 3;
    a.scalars[0].i = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(this));
    a.scalars[1].i = static_cast<std::int64_t>(r->generation);
    a.scalars[2].i = static_cast<std::int64_t>(b + 1);
    branches_[b]->launch(run_branch, a, "graph_replay_branch");
  }
  ArgBlock a;
  a.num_tensors = 0;
  a.num_scalars = 1;
  a.scalars[0].i = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(r));
  if (options.on_caller) {
    stream.run_on_caller(run_origin, a, "graph_replay");
  } else {
    stream.launch(run_origin, a, "graph_replay");
  }
}

namespace {
// Note [Kernel errors inside a replay]
// A node's kernel reports errors through this context, which prefixes the
// node's label, so the sticky error names the operator and the IR node that
// failed ("graph_replay: node #7 index_copy_ %k3 of graph @decode: ..."),
// not just the replay's queue entry.
class NodeContext final : public KernelContext {
 public:
  NodeContext(KernelContext& inner, const std::string& label) : inner_(inner), label_(label) {}
  void fail(const std::string& message) override { inner_.fail(label_ + ": " + message); }
  [[nodiscard]] int num_threads() const override { return inner_.num_threads(); }
  void parallel_run(int parts, void (*fn)(void*, int), void* arg) override {
    inner_.parallel_run(parts, fn, arg);
  }

 private:
  KernelContext& inner_;
  const std::string& label_;
};
}  // namespace

void GraphExec::run_stream(int stream, std::uint64_t generation, KernelContext& ctx) {
  for (const int index : order_[static_cast<std::size_t>(stream)]) {
    const Node& n = nodes_[static_cast<std::size_t>(index)];
    for (std::uint32_t k = n.deps_begin; k < n.deps_end; ++k) {
      wait_for(done_[static_cast<std::size_t>(cross_deps_[k])], generation);
    }
    NodeContext node_ctx(ctx, labels_[static_cast<std::size_t>(index)]);
    n.fn(args_of(n), node_ctx);
    if (has_cross_dependents_[static_cast<std::size_t>(index)]) {
      runtime::advance(done_[static_cast<std::size_t>(index)], generation);
    }
  }
}

void GraphExec::run_origin(const ArgBlock& args, KernelContext& ctx) {
  auto* r = reinterpret_cast<Replay*>(static_cast<std::uintptr_t>(args.scalars[0].i));
  GraphExec& e = *r->exec;
  // Replays never overlap, even when launched on different streams.
  wait_for(e.finished_, r->generation - 1);
  ReplayOrder* order = r->order.get();  // r holds it until give_back()
  const std::uint64_t ticket = r->ticket;
  if (order != nullptr) wait_for(order->finished_, ticket - 1);
  // Work queued on other streams that still reads this graph's memory
  // (Note [Output uses] in allocator.h).
  for (const ReplayFence& f : r->fences) f.wait();
  for (const ReplayCopy& c : r->copies) c.fn(c.args, ctx);
  for (std::size_t k = 0; k < e.updates_.size(); ++k) {
    const Update& u = e.updates_[k];
    e.args_of(e.nodes_[static_cast<std::size_t>(u.node)]).scalars[u.slot].i = r->values[k];
  }
  e.origin_ctx_.store(&ctx, std::memory_order_release);
  runtime::advance(e.started_, r->generation);
  e.run_stream(0, r->generation, ctx);
  for (std::size_t b = 1; b <= e.branches_.size(); ++b) wait_for(e.branch_done_[b], r->generation);
  for (const ReplayCopy& c : r->copies_out) c.fn(c.args, ctx);
  const std::uint64_t generation = r->generation;
  r->copies.clear();  // releases the copies' sources
  r->copies_out.clear();
  r->fences.clear();
  if (r->done != nullptr) {
    complete_fence(*r->done, r->done_generation);
    r->done.reset();
  }
  if (order != nullptr) {
    runtime::advance(order->finished_, ticket);
  }
  e.give_back(r);
  std::lock_guard lock(e.finish_mutex_);
  runtime::advance(e.finished_, generation);
  e.finish_cv_.notify_all();
}

void GraphExec::run_branch(const ArgBlock& args, KernelContext&) {
  auto* e = reinterpret_cast<GraphExec*>(static_cast<std::uintptr_t>(args.scalars[0].i));
  const auto generation = static_cast<std::uint64_t>(args.scalars[1].i);
  const auto branch = static_cast<std::size_t>(args.scalars[2].i);
  wait_for(e->started_, generation);
  // Kernel errors surface on the launch stream, where the user synchronizes.
  KernelContext& origin = *e->origin_ctx_.load(std::memory_order_acquire);
  e->run_stream(static_cast<int>(branch), generation, origin);
  runtime::advance(e->branch_done_[branch], generation);
}

}  // namespace sinkgraph

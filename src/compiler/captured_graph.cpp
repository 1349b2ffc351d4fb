// CapturedGraph: one device graph per graph key (Note [Graph keys] in
// graph_signature.h), captured on first use and replayed with one launch. The
// signature (binding, keys) and the policy (counters, limits, explain's log)
// live in their own files; this one holds capture and replay.
#include "captured_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "../codegen/region.h"
#include "capture_policy.h"
#include "data_dump.h"
#include "graph_signature.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/passes.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::detail {

namespace {

// Note [Captures run on a side stream]
// A capture records every launch made on its stream, by any thread. Capturing
// on the caller's stream (usually the device's default stream, which every
// host thread shares) would record another thread's eager kernels into the
// graph: they would never run, that thread would read memory nothing wrote,
// and every replay would run them again. So, like torch.cuda.graph's private
// side stream, captures run on a stream of their own, made current on the
// capturing thread for the duration. Nothing executes on it (a capture only
// records); replays launch on the caller's current stream. One per device,
// shared by every compiled function: captures are rare, and take turns. A
// reduce-overhead function called from inside a capture (a composite that
// calls one) is an error: its replay would be recorded into the outer graph,
// and its own capture would wait for the turn its caller holds.
Stream& capture_stream() {
  // Lives as long as the device (never destroyed, like the device itself).
  static Stream* stream = [] {
    StreamOptions options;
    options.name = "capture";
    options.spin_us = 0;  // idle but for captures: park at once
    return cpu().create_stream(options).release();
  }();
  return *stream;
}

std::mutex& capture_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The graph this thread is capturing, or null.
thread_local const ir::Graph* t_capturing = nullptr;

class CapturedGraph final : public ConcreteGraph {
 public:
  CapturedGraph(std::unique_ptr<ir::Graph> graph, CompilerConfig config,
                std::vector<std::string> notes)
      : graph_(std::move(graph)),
        config_(std::move(config)),
        notes_(std::move(notes)),
        signature_(*graph_, config_.frozen_parameter, config_.clone_input),
        policy_(graph_->name, config_.capture_limit) {
    copy_kernel_ =
        OpRegistry::instance().get("copy_").kernels[static_cast<std::size_t>(DeviceType::cpu)];
  }

  ~CapturedGraph() override { reset(); }

  std::vector<ir::RtValue> run(std::span<const ir::RtValue> inputs,
                               const CallOptions& options) override;
  [[nodiscard]] std::string kind() const override { return "CapturedGraph"; }
  [[nodiscard]] const ir::Graph& graph() const override { return *graph_; }
  [[nodiscard]] std::string explain() const override;
  [[nodiscard]] std::string device_graph_text() const override {
    std::lock_guard lock(mutex_);
    std::string out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      out += "key " + std::to_string(i) + ": " + entries_[i]->device_graph.str();
    }
    return out;
  }
  [[nodiscard]] GraphCounters counters() const override {
    std::lock_guard lock(mutex_);
    GraphCounters c = policy_.counters();
    std::set<const MemPool*> seen;
    for (const auto& e : entries_) {
      if (seen.insert(e->pool.get()).second)
        c.pool_reserved_bytes += e->pool->stats().reserved_bytes;
      c.planned_arena_bytes = std::max(c.planned_arena_bytes, e->planned_bytes);
      c.liveness_lower_bound_bytes = std::max(c.liveness_lower_bound_bytes, e->lower_bound_bytes);
      c.codegen_kernels = std::max(c.codegen_kernels, e->codegen_kernels);
      c.compile_cache_hits += e->compile_cache_hits;
    }
    return c;
  }
  void reset() override {
    std::lock_guard lock(mutex_);
    reset_locked();
    policy_.on_reset();
  }

 private:
  // One captured device graph: a graph key's capture and what its replays need.
  struct Entry {
    GraphKey key;
    std::shared_ptr<MemPool> pool;
    // Note [Memory planning]: every planned intermediate lives in this one
    // allocation, held as long as the captured graph that writes it.
    std::shared_ptr<Storage> arena;
    std::int64_t planned_bytes = 0;      // the arena's size (0: not planned)
    std::int64_t lower_bound_bytes = 0;  // liveness lower bound of the intermediates
    DeviceGraph device_graph;
    // Generated regions' tables (Note [Generated regions]): declared before
    // exec, so they outlive the replays it waits for.
    std::vector<std::shared_ptr<const codegen::RegionCall>> region_calls;
    std::int64_t codegen_kernels = 0, codegen_nodes = 0, compile_cache_hits = 0;
    std::unique_ptr<GraphExec> exec;
    std::vector<Tensor> static_inputs;        // per graph input (user inputs only)
    std::vector<ir::RtValue> capture_inputs;  // per graph input: what the capture ran on
    std::vector<const void*> param_addrs;     // per param input
    std::vector<Tensor> outputs;
    std::vector<std::shared_ptr<const OutputStamp>> stamps;
    std::int64_t replays = 0;
    double capture_ms = 0;
    std::int64_t pool_bytes = 0;
  };

  std::unique_ptr<Entry> capture(std::span<const ir::RtValue> inputs, GraphKey key);
  std::vector<ir::RtValue> replay(Entry& e, std::span<const ir::RtValue> inputs,
                                  const std::vector<std::int64_t>& values, const CallOptions& call);
  std::vector<ir::RtValue> run_eagerly(std::span<const ir::RtValue> inputs) {
    policy_.on_eager_fallback_call();
    return ir::interpret(*graph_, inputs);
  }
  void check_frozen_params(std::span<const ir::RtValue> inputs, const Entry* entry);
  void reset_locked() {
    entries_.clear();  // ~GraphExec waits for its queued replays; pools free in stream order
    shared_pool_.reset();
  }
  const Tensor& tensor(std::span<const ir::RtValue> inputs, int i) const {
    return std::get<Tensor>(inputs[static_cast<std::size_t>(i)]);
  }
  const std::string& input_name(int i) const {
    return graph_->inputs()[static_cast<std::size_t>(i)]->name;
  }

  std::unique_ptr<ir::Graph> graph_;
  CompilerConfig config_;
  std::vector<std::string> notes_;
  GraphSignature signature_;
  KernelFn copy_kernel_ = nullptr;
  std::string writer_name_ = "graph @" + graph_->name;

  mutable std::mutex mutex_;
  CapturePolicy policy_;
  // Scratch for replay(), reused so that a call allocates no vectors.
  std::vector<ReplayCopy> copies_in_, copies_out_;
  std::vector<ReplayFence> fences_;
  std::shared_ptr<MemPool> shared_pool_;
  MemPool::Checkpoint shared_base_;  // shared_pool_ before any capture
  // Keys share memory, so their replays never overlap, whatever the stream.
  std::shared_ptr<ReplayOrder> order_ = std::make_shared<ReplayOrder>();
  // Completed by each replay at its end: what host reads of outputs wait for.
  std::shared_ptr<EventState> done_ = std::make_shared<EventState>();
  std::uint64_t done_generation_ = 0;
  std::vector<std::unique_ptr<Entry>> entries_;
  // Note [Version counters]: under frozen_parameter, the params' versions when
  // the graph was compiled (their values may be folded into it).
  std::vector<std::uint64_t> frozen_versions_;
  bool dumped_ = false;
};

void CapturedGraph::check_frozen_params(std::span<const ir::RtValue> inputs, const Entry* entry) {
  if (!config_.frozen_parameter) return;
  const std::vector<int>& params = signature_.param_inputs();
  if (frozen_versions_.empty() && !params.empty()) {
    // The first call compiled the graph: its values are the folded ones.
    for (const int p : params) frozen_versions_.push_back(tensor(inputs, p).storage()->version());
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Tensor& t = tensor(inputs, params[k]);
    SG_CHECK(t.storage()->version() == frozen_versions_[k], "graph @", graph_->name, ": param %",
             input_name(params[k]),
             " was written in place after the graph was compiled, but frozen_parameter promises "
             "params never change (their values may be folded into the graph, which would "
             "silently use the old ones); set frozen_parameter=false, or compile again after "
             "updating the weights");
    if (entry != nullptr) {
      SG_CHECK(t.data_ptr() == entry->param_addrs[k], "graph @", graph_->name, ": param %",
               input_name(params[k]), " moved from ", entry->param_addrs[k], " to ", t.data_ptr(),
               ", but frozen_parameter promises params never move (the captured graph would read "
               "the old memory); keep the params in place or set frozen_parameter=false");
    }
  }
}

std::vector<ir::RtValue> CapturedGraph::run(std::span<const ir::RtValue> inputs,
                                            const CallOptions& options) {
  check_not_capturing(graph_->name);
  std::lock_guard lock(mutex_);
  policy_.note_call();
  if (policy_.eager_forever()) return run_eagerly(inputs);
  std::vector<std::int64_t> values;
  signature_.bind(inputs, values);
  GraphKey key = signature_.key_of(inputs, values);

  Entry* entry = nullptr;
  for (auto& e : entries_) {
    if (e->key == key) entry = e.get();
  }
  check_frozen_params(inputs, entry);
  if (entry != nullptr && !config_.force_recapture) return replay(*entry, inputs, values, options);

  std::string why;
  KeyChange change = KeyChange::first;
  if (entry != nullptr) {
    why = "force_recapture";
  } else {
    std::vector<GraphKey> known;
    known.reserve(entries_.size());
    for (const auto& e : entries_) known.push_back(e->key);
    change = signature_.classify(key, known, why);
    if (!policy_.admit_new_key(why)) {
      reset_locked();
      return run_eagerly(inputs);
    }
  }
  if (!config_.data_dump.empty() && !dumped_) {
    dumped_ = true;  // one eager run, node by node, to compare against replay
    (void)interpret_and_dump(*graph_, inputs, config_.data_dump);
  }
  for (std::int64_t w = 0; w < config_.warmup_iters; ++w) (void)ir::interpret(*graph_, inputs);
  std::unique_ptr<Entry> fresh = capture(inputs, std::move(key));
  const bool forced = entry != nullptr;
  policy_.on_capture(change, forced, why);
  policy_.log((forced ? "re-capture: " : "capture: ") + why + "; " +
              std::to_string(fresh->device_graph.nodes.size()) + " nodes in " +
              std::to_string(fresh->capture_ms).substr(0, 6) + " ms, pool '" + fresh->pool->name() +
              "' reserves " + std::to_string(fresh->pool_bytes) + " B");
  if (forced) {
    for (auto& e : entries_) {
      if (e.get() == entry) {
        e = std::move(fresh);  // the old graph dies here: its memory frees in stream order
        entry = e.get();
      }
    }
  } else {
    entries_.push_back(std::move(fresh));
    entry = entries_.back().get();
  }
  return replay(*entry, inputs, values, options);
}

std::unique_ptr<CapturedGraph::Entry> CapturedGraph::capture(std::span<const ir::RtValue> inputs,
                                                             GraphKey key) {
  const auto start = std::chrono::steady_clock::now();
  auto e = std::make_unique<Entry>();
  e->key = std::move(key);
  if (config_.use_graph_pool) {
    e->pool = config_.use_graph_pool;
  } else if (config_.reuse_graph_pool_in_same_fx) {
    if (!shared_pool_) {
      shared_pool_ = cpu().allocator().create_pool("graph @" + graph_->name);
      shared_base_ = shared_pool_->checkpoint();
    }
    e->pool = shared_pool_;
  } else {
    e->pool = cpu().allocator().create_pool("graph @" + graph_->name + " key " +
                                            std::to_string(entries_.size()));
  }
  const std::int64_t reserved_before = e->pool->stats().reserved_bytes;
  // Note [Captures run on a side stream].
  const std::lock_guard capture_turn(capture_mutex());
  Stream& stream = capture_stream();
  const StreamGuard on_capture_stream(stream);
  struct Capturing {
    explicit Capturing(const ir::Graph* g) { t_capturing = g; }
    ~Capturing() { t_capturing = nullptr; }
    Capturing(const Capturing&) = delete;
    Capturing& operator=(const Capturing&) = delete;
  } capturing(graph_.get());

  // Keys of one graph never run together (order_): this key's kernels may
  // borrow the memory the other keys hold, outputs included (Note [Pool
  // checkpoints]). Restored before the static inputs below are allocated, so
  // they are not lent, and they borrow nothing themselves (only captures do).
  if (e->pool == shared_pool_) shared_pool_->restore(shared_base_);

  // Static inputs: the graph reads user inputs from buffers it owns (or, with
  // clone_input=false, from the first caller's tensor), params and mutated
  // inputs in place.
  e->capture_inputs.assign(inputs.begin(), inputs.end());
  e->static_inputs.resize(inputs.size());
  for (const int i : signature_.user_inputs()) {
    const auto index = static_cast<std::size_t>(i);
    const Tensor& caller = tensor(inputs, i);
    if (config_.clone_input) {
      PoolScope scope(stream, e->pool);
      e->static_inputs[index] = Tensor::empty(caller.shape(), caller.dtype());
    } else {
      e->static_inputs[index] = caller;
    }
    e->capture_inputs[index] = e->static_inputs[index];
  }
  for (const int i : signature_.param_inputs())
    e->param_addrs.push_back(tensor(inputs, i).data_ptr());

  // Note [Memory planning] in passes.h: shapes are concrete for this key.
  // max-autotune places every fresh intermediate at its planned offset in one
  // arena; the other modes only measure the liveness lower bound.
  const SymBindings bindings = ir::bind_symbols(*graph_, e->capture_inputs);
  const bool planned = config_.mode == Mode::max_autotune && config_.memory_planning;
  const passes::MemoryPlan plan = passes::plan_memory(*graph_, bindings, planned);
  e->lower_bound_bytes = plan.lower_bound_bytes;
  const ir::PlacementFn placement = [&](const ir::Node& node) -> Tensor {
    const passes::MemoryPlan::Buffer* b = e->arena ? plan.find(node) : nullptr;
    if (b == nullptr) return {};
    const ir::Value& v = *node.result();
    Shape shape;
    for (const SymInt& d : v.meta.shape) shape.push_back(d.eval(bindings));
    const auto elem = static_cast<std::int64_t>(dtype_size(v.meta.dtype));
    return Tensor(e->arena, v.meta.dtype, shape, contiguous_strides(shape), b->offset / elem);
  };

  // Note [Generated regions]: max-autotune writes runs of nodes with emitters
  // as C++ and launches each run as one kernel.
  std::optional<codegen::RegionBuilder> regions;
  std::map<const ir::Node*, std::vector<const SymInt*>> node_updatables;
  ir::NodeRunner runner;
  if (config_.mode == Mode::max_autotune && config_.codegen) {
    regions.emplace(graph_->name, config_.cache_dir);
    for (const auto& u : signature_.updatables()) {
      auto& slots = node_updatables[u.node];
      if (slots.size() <= static_cast<std::size_t>(u.scalar_index))
        slots.resize(static_cast<std::size_t>(u.scalar_index) + 1, nullptr);
      slots[static_cast<std::size_t>(u.scalar_index)] = &u.expr;
    }
    runner = [&](const ir::Node& node, std::span<const Tensor* const> operands,
                 std::span<const ScalarValue> scalars, const Tensor& placed) -> Tensor {
      const OpDef& op = *node.op;
      const Tensor* place = placed.defined() ? &placed : nullptr;
      if (op.schema.is_view) return run_op(op, operands, scalars, place);  // no kernel
      if (op.emit == nullptr || op.composite != nullptr) {
        regions->flush(stream);
        return run_op(op, operands, scalars, place);
      }
      Tensor out;
      const bool fresh = op.schema.alias_of < 0;
      if (!fresh) {
        out = *operands[static_cast<std::size_t>(op.schema.alias_of)];
      } else if (place != nullptr) {
        out = placed;
      } else {
        Shape shape;
        for (const SymInt& d : node.result()->meta.shape) shape.push_back(d.eval(bindings));
        out = Tensor::empty(shape, node.result()->meta.dtype);
      }
      std::vector<const SymInt*> upd(scalars.size(), nullptr);
      if (const auto it = node_updatables.find(&node); it != node_updatables.end()) {
        for (std::size_t i = 0; i < it->second.size() && i < upd.size(); ++i)
          upd[i] = it->second[i];
      }
      bool taken = regions->add(op, operands, out, scalars, upd, &node);
      if (!taken) {  // a new region may take it (the open one may be full)
        regions->flush(stream);
        taken = regions->add(op, operands, out, scalars, upd, &node);
      }
      if (taken) return out;
      return run_op(op, operands, scalars, fresh ? &out : nullptr);
    };
  }

  // Record: run the graph through the dispatcher with the stream capturing,
  // noting which device node each IR node launched.
  std::vector<std::pair<const ir::Node*, std::size_t>> launched;
  std::vector<ir::RtValue> outputs;
  stream.begin_capture(e->pool, config_.capture_error_mode);
  try {
    if (planned && plan.arena_bytes > 0) {
      // Allocated for the capturing stream: from the pool, and free to borrow
      // what the graph's other keys hold (Note [Pool checkpoints]).
      e->arena = std::make_shared<Storage>(
          cpu(), cpu().allocator().allocate(static_cast<std::size_t>(plan.arena_bytes), stream));
      e->planned_bytes = plan.arena_bytes;
    }
    outputs = ir::interpret(
        *graph_, e->capture_inputs,
        [&](const ir::Node& node, const Tensor&) {
          launched.emplace_back(&node, stream.capture_size());
        },
        placement, runner);
    if (regions) regions->flush(stream);
  } catch (...) {
    try {
      (void)stream.end_capture();
    } catch (...) {  // the original error is the one to report
    }
    throw;
  }
  e->device_graph = stream.end_capture();
  // Note [Kernel errors inside a replay]: each device node names its IR node.
  std::size_t first = 0;
  for (const auto& [node, end] : launched) {
    for (std::size_t n = first; n < end && n < e->device_graph.nodes.size(); ++n) {
      GraphNode& g = e->device_graph.nodes[n];
      g.label = std::string("node #") + std::to_string(n) + " " + g.name + " (%" +
                node->result()->name + " of graph @" + graph_->name + ")";
    }
    first = std::max(first, end);
  }
  if (regions) {
    for (const auto& [index, name] : regions->launches()) {
      e->device_graph.nodes[index].label =
          std::string("node #") + std::to_string(index) + " " + name;
    }
    for (const auto& u : regions->updates()) {
      e->device_graph.nodes[u.device_node].updates.push_back({u.scalar_slot, u.expr});
    }
    e->region_calls = regions->take_calls();
    e->codegen_kernels = regions->stats().kernels;
    e->codegen_nodes = regions->stats().nodes;
    e->compile_cache_hits = regions->stats().cache_hits;
    for (const auto& note : regions->stats().notes) notes_.push_back(note);
    // Nodes of a region that fell back ran their kernels when it closed.
    for (const auto& [node, end] : launched) {
      if (const auto index = regions->fallback_node(node)) {
        GraphNode& g = e->device_graph.nodes[*index];
        g.label = std::string("node #") + std::to_string(*index) + " " + g.name + " (%" +
                  node->result()->name + " of graph @" + graph_->name + ")";
      }
    }
  }
  for (const auto& u : signature_.updatables()) {
    if (regions && regions->generated(u.node)) continue;  // its region's slots, above
    if (const auto index = regions ? regions->fallback_node(u.node) : std::nullopt) {
      e->device_graph.nodes[*index].updates.push_back({u.scalar_index, u.expr});
      continue;
    }
    const auto it = std::find_if(launched.begin(), launched.end(),
                                 [&](const auto& l) { return l.first == u.node; });
    SG_ASSERT(it != launched.end() && it->second > 0, "updatable node %", u.node->result()->name,
              " launched no kernel");
    e->device_graph.nodes[it->second - 1].updates.push_back({u.scalar_index, u.expr});
  }
  e->exec = e->device_graph.instantiate(signature_.symbol_names());
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    e->outputs.push_back(std::get<Tensor>(outputs[o]));
    auto stamp = std::make_shared<OutputStamp>();
    stamp->pool = e->pool;
    stamp->origin = "output " + std::to_string(o) + " of graph @" + graph_->name;
    e->stamps.push_back(std::move(stamp));
  }
  e->pool_bytes = e->pool->stats().reserved_bytes - reserved_before;
  e->capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return e;
}

// A ReplayCopy of `src` into `dst` (the copy_ kernel, strided on both sides).
ReplayCopy make_copy(KernelFn copy, const Tensor& dst, const Tensor& src,
                     std::shared_ptr<const void> keep_alive) {
  ReplayCopy c;
  c.fn = copy;
  c.args.num_tensors = 2;
  c.args.num_scalars = 0;
  c.args.tensors[0] = dst.arg();
  c.args.tensors[1] = src.arg();
  c.keep_alive = std::move(keep_alive);
  return c;
}

std::vector<ir::RtValue> CapturedGraph::replay(Entry& e, std::span<const ir::RtValue> inputs,
                                               const std::vector<std::int64_t>& values,
                                               const CallOptions& call) {
  Stream& stream = current_stream(cpu());
  // Nothing below may fail once the pool's generation moves (begin_replay):
  // a refused launch would leave the old outputs reported overwritten.
  e.exec->check_can_launch(stream);
  copies_in_.clear();
  copies_out_.clear();
  for (const int i : signature_.user_inputs()) {
    const Tensor& caller = tensor(inputs, i);
    const Tensor& target = e.static_inputs[static_cast<std::size_t>(i)];
    if (!config_.clone_input && caller.data_ptr() == target.data_ptr()) continue;
    copies_in_.push_back(make_copy(copy_kernel_, target, caller, caller.storage()));
  }
  std::vector<ir::RtValue> out;
  out.reserve(e.outputs.size());
  const std::vector<int>& bases = signature_.output_bases();
  for (std::size_t o = 0; o < e.outputs.size(); ++o) {
    const int base = bases[o];
    if (base >= 0) {
      // Note [Stale outputs]: a view of a caller's tensor is returned as that
      // view, never stamped (its memory is the caller's, not the pool's).
      const auto b = static_cast<std::size_t>(base);
      Tensor view = GraphSignature::rebase_view(e.outputs[o], std::get<Tensor>(e.capture_inputs[b]),
                                                tensor(inputs, base));
      if (view.defined()) {
        out.emplace_back(std::move(view));
        continue;
      }
    }
    out.emplace_back(Tensor());
    if (config_.clone_output) {
      // Copied inside the replay's own queue entry, so the next replay, on
      // whatever stream, cannot overwrite the output before the copy ran.
      const Tensor& t = e.outputs[o];
      Tensor copy = Tensor::empty(t.shape(), t.dtype());
      copies_out_.push_back(make_copy(copy_kernel_, copy, t, copy.storage()));
      out.back() = std::move(copy);
    }
  }

  // Inputs that are another graph's outputs: held until this replay's copy of
  // them has run (Note [Output uses]). Our own outputs need no hold: the
  // replay copies them in before its first kernel. The holds are taken only
  // after begin_replay, which may wait: a thread never waits for a pool while
  // holding another (two graphs feeding each other from two threads would
  // otherwise deadlock); taking a hold never waits.
  PoolUses uses;
  // Our own outputs passed back as inputs (legal: copied in first) must still
  // be current when this replay takes the pool's turn.
  std::uint64_t own_generation = 0;
  for (const int i : signature_.user_inputs()) {
    const Tensor& caller = tensor(inputs, i);
    if (caller.stamp_pool() == e.pool.get()) own_generation = caller.stamp_generation();
  }
  const ReplayFence done{stream.id(), done_, ++done_generation_};
  const std::uint64_t generation =
      e.pool->begin_replay(writer_name_, fences_, done, own_generation);
  if (generation == 0) {
    for (const int i : signature_.user_inputs())
      tensor(inputs, i).check_not_stale("input of a graph replay");
    SG_ASSERT(false, "begin_replay refused, but no input is stale");
  }
  const std::size_t own_fences = fences_.size();
  try {
    for (const int i : signature_.user_inputs()) {
      const Tensor& caller = tensor(inputs, i);
      if (!caller.is_stamped() || caller.stamp_pool() == e.pool.get()) continue;
      ReplayFence writer;
      uses.add(caller.begin_output_use("input of a graph replay", &writer));
      fences_.push_back(std::move(writer));  // copy it only once it is written
    }
    GraphExec::LaunchOptions options;
    options.copies_in = copies_in_;
    options.copies_out = copies_out_;
    options.order = order_;
    options.wait_for = fences_;
    options.done = done_;
    options.done_generation = done.generation;
    options.on_caller = call.wait;
    e.exec->launch(stream, values, options);
  } catch (...) {
    // An input made stale by another thread since bind() checked it, or a
    // capture begun on this stream by another thread since check_can_launch.
    fences_.resize(own_fences);
    e.pool->cancel_replay(fences_, done);
    throw;
  }
  uses.end(done);
  copies_in_.clear();  // the launch holds its own references to the sources
  copies_out_.clear();
  fences_.clear();
  ++e.replays;
  policy_.on_replay();

  for (std::size_t o = 0; o < e.outputs.size(); ++o) {
    if (std::get<Tensor>(out[o]).defined()) continue;
    Tensor t = e.outputs[o];
    t.set_stamp(e.stamps[o], generation);
    out[o] = std::move(t);
  }
  return out;
}

std::string CapturedGraph::explain() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "CapturedGraph: " << entries_.size() << " captured key(s) of at most "
      << config_.capture_limit
      << (policy_.eager_forever() ? " (capture limit reached: running eagerly)" : "")
      << "; key syms:";
  if (signature_.key_symbols().empty()) out << " (none)";
  for (const int k : signature_.key_symbols()) {
    out << " " << signature_.symbol_names()[static_cast<std::size_t>(k)];
  }
  out << (config_.frozen_parameter ? "" : " + param addresses")
      << (signature_.mutated_inputs().empty() ? "" : " + mutated input addresses")
      << "; updatable slots: " << signature_.updatables().size() << "\n";
  out << policy_.explain();
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    out << "  key " << i << ": " << e.device_graph.nodes.size() << " nodes, captured in "
        << e.capture_ms << " ms, pool '" << e.pool->name() << "' +" << e.pool_bytes
        << " B, replayed " << e.replays << " times\n";
    out << "    memory: ";
    if (e.planned_bytes > 0) {
      out << "planned arena " << e.planned_bytes << " B (";
    } else {
      out << "not planned (";
    }
    out << "liveness lower bound of the intermediates " << e.lower_bound_bytes << " B";
    if (e.planned_bytes > 0 && e.lower_bound_bytes > 0) {
      char ratio[32];
      std::snprintf(
          ratio, sizeof ratio, "%.3f",
          static_cast<double>(e.planned_bytes) / static_cast<double>(e.lower_bound_bytes));
      out << ", planned/bound " << ratio;
    }
    out << "), pool +" << e.pool_bytes << " B\n";
    if (config_.mode == Mode::max_autotune && config_.codegen) {
      out << "    generated code: " << e.codegen_kernels << " kernel(s) in place of "
          << e.codegen_nodes << " nodes, " << e.compile_cache_hits
          << " from the compile cache (Note [Generated regions])\n";
    }
  }
  for (const auto& note : notes_) out << "  note: " << note << "\n";
  return out.str();
}

}  // namespace

void check_not_capturing(const std::string& callee) {
  SG_CHECK(t_capturing == nullptr, "graph @", callee, ": called while this thread captures graph @",
           t_capturing->name,
           "; a captured function cannot call a reduce-overhead or max-autotune function "
           "(call it outside, or compile the callee with mode eager)");
  const Stream& stream = current_stream(cpu());
  SG_CHECK(!stream.is_capturing(), "graph @", callee, ": called while stream '", stream.name(),
           "' captures a graph (Stream::begin_capture); its replay cannot be recorded into "
           "another capture. Call it before begin_capture or after end_capture, or on another "
           "stream");
}

std::unique_ptr<ConcreteGraph> make_captured_graph(std::unique_ptr<ir::Graph> graph,
                                                   const CompilerConfig& config,
                                                   std::vector<std::string> notes) {
  return std::make_unique<CapturedGraph>(std::move(graph), config, std::move(notes));
}

}  // namespace sinkgraph::detail

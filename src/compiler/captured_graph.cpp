// CapturedGraph: one device graph per graph key, replayed with one launch.
//
// Note [Graph keys]
// A graph key is the values of the syms that feed shapes or fixed
// (non-updatable) arguments, plus the addresses of params unless
// frozen_parameter. A sym that feeds only updatable slots (a decode position)
// is not in the key: one capture serves every value, and each replay writes
// the value into the captured nodes.
#include "captured_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>

#include "data_dump.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/passes.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::detail {

namespace {

void collect(const SymInt& v, std::set<std::string>& out) {
  for (auto& s : v.free_symbols()) out.insert(std::move(s));
}

void collect(const ScalarValue& v, std::set<std::string>& out) {
  if (const auto* s = std::get_if<SymInt>(&v)) collect(*s, out);
  if (const auto* list = std::get_if<std::vector<SymInt>>(&v)) {
    for (const auto& d : *list) collect(d, out);
  }
}

// Where a symbol's value comes from in a call: a sym input, or an input dim.
struct SymbolSource {
  std::string name;
  int input = 0;
  int dim = -1;  // -1: the input is a sym
};

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

std::string ptr_text(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

class CapturedGraph final : public ConcreteGraph {
 public:
  CapturedGraph(std::unique_ptr<ir::Graph> graph, CompilerConfig config,
                std::vector<std::string> notes)
      : graph_(std::move(graph)), config_(std::move(config)), notes_(std::move(notes)) {
    analyze();
    copy_kernel_ =
        OpRegistry::instance().get("copy_").kernels[static_cast<std::size_t>(DeviceType::cpu)];
  }

  ~CapturedGraph() override { reset(); }

  std::vector<ir::RtValue> run(std::span<const ir::RtValue> inputs) override;
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
    GraphCounters c = counters_;
    std::set<const MemPool*> seen;
    for (const auto& e : entries_) {
      if (seen.insert(e->pool.get()).second)
        c.pool_reserved_bytes += e->pool->stats().reserved_bytes;
      c.planned_arena_bytes = std::max(c.planned_arena_bytes, e->planned_bytes);
      c.liveness_lower_bound_bytes = std::max(c.liveness_lower_bound_bytes, e->lower_bound_bytes);
    }
    return c;
  }
  void reset() override {
    std::lock_guard lock(mutex_);
    reset_locked();
  }

 private:
  struct Entry {
    std::vector<std::int64_t> key;
    std::shared_ptr<MemPool> pool;
    // Note [Memory planning]: every planned intermediate lives in this one
    // allocation, held as long as the captured graph that writes it.
    std::shared_ptr<Storage> arena;
    std::int64_t planned_bytes = 0;      // the arena's size (0: not planned)
    std::int64_t lower_bound_bytes = 0;  // liveness lower bound of the intermediates
    DeviceGraph device_graph;
    std::unique_ptr<GraphExec> exec;
    std::vector<Tensor> static_inputs;       // per graph input (user inputs only)
    std::vector<const void*> mutated_addrs;  // per graph input (mutated only)
    std::vector<const void*> param_addrs;    // per graph input (params only)
    std::vector<Tensor> outputs;
    std::vector<std::shared_ptr<const OutputStamp>> stamps;
    std::int64_t replays = 0;
    double capture_ms = 0;
    std::int64_t pool_bytes = 0;
  };

  void analyze();
  void bind(std::span<const ir::RtValue> inputs, std::vector<std::int64_t>& values) const;
  std::vector<std::int64_t> key_of(std::span<const ir::RtValue> inputs,
                                   const std::vector<std::int64_t>& values) const;
  std::unique_ptr<Entry> capture(std::span<const ir::RtValue> inputs,
                                 std::vector<std::int64_t> key);
  std::vector<ir::RtValue> replay(Entry& e, std::span<const ir::RtValue> inputs,
                                  const std::vector<std::int64_t>& values);
  std::vector<ir::RtValue> run_eagerly(std::span<const ir::RtValue> inputs);
  void log(const std::string& line) {
    log_.push_back("call " + std::to_string(calls_) + ": " + line);
  }
  void reset_locked();
  const void* address(const ir::RtValue& v) const { return std::get<Tensor>(v).data_ptr(); }

  std::unique_ptr<ir::Graph> graph_;
  CompilerConfig config_;
  std::vector<std::string> notes_;
  KernelFn copy_kernel_ = nullptr;
  std::vector<ReplayCopy> copies_;  // scratch for replay(), so a call allocates no vector
  std::string writer_name_ = "graph @" + graph_->name;

  // Analysis (Note [Graph keys]).
  std::vector<SymbolSource> symbols_;  // every bound symbol, in binding order
  bool has_derived_dims_ = false;      // an input dim is an expression, not a plain symbol
  std::vector<std::string> symbol_names_;
  std::vector<int> key_symbols_;  // indices into symbols_
  std::vector<int> param_inputs_, user_inputs_, mutated_inputs_;
  std::vector<int> output_alias_;  // per output: the input it aliases, or -1
  struct Updatable {
    const ir::Node* node;
    int scalar_index;
    SymInt expr;
  };
  std::vector<Updatable> updatables_;

  mutable std::mutex mutex_;
  std::shared_ptr<MemPool> shared_pool_;
  MemPool::Checkpoint shared_base_;  // shared_pool_ before any capture
  // Keys share memory, so their replays never overlap, whatever the stream.
  std::shared_ptr<ReplayOrder> order_ = std::make_shared<ReplayOrder>();
  std::vector<std::unique_ptr<Entry>> entries_;
  std::size_t distinct_keys_ = 0;
  bool eager_forever_ = false;
  bool dumped_ = false;
  GraphCounters counters_;
  std::int64_t calls_ = 0;
  std::vector<std::string> log_;
};

void CapturedGraph::analyze() {
  const auto& inputs = graph_->inputs();
  std::set<std::string> bound;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* in = inputs[i];
    switch (in->kind) {
      case ir::InputKind::sym:
        symbols_.push_back({in->name, static_cast<int>(i), -1});
        bound.insert(in->name);
        break;
      case ir::InputKind::param:
        param_inputs_.push_back(static_cast<int>(i));
        break;
      case ir::InputKind::input:
        user_inputs_.push_back(static_cast<int>(i));
        break;
      case ir::InputKind::mutated:
        mutated_inputs_.push_back(static_cast<int>(i));
        break;
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* in = inputs[i];
    if (in->is_sym) continue;
    for (int d = 0; d < in->meta.shape.size(); ++d) {
      const SymInt& dim = in->meta.shape[d];
      const auto syms = dim.free_symbols();
      if (syms.size() == 1 && dim == SymInt::symbol(syms[0]) && !bound.contains(syms[0])) {
        symbols_.push_back({syms[0], static_cast<int>(i), d});
        bound.insert(syms[0]);
      } else if (dim.is_symbolic()) {
        has_derived_dims_ = true;  // checked by bind_symbols on every call
      }
    }
  }
  for (const auto& s : symbols_) symbol_names_.push_back(s.name);

  // Symbols that feed shapes or fixed arguments are in the key.
  std::set<std::string> keyed;
  for (const ir::Value* in : inputs) {
    if (!in->is_sym) {
      for (const auto& d : in->meta.shape) collect(d, keyed);
    }
  }
  for (const auto& node : graph_->nodes()) {
    for (const auto& d : node->result()->meta.shape) collect(d, keyed);
    int scalar = 0;
    std::size_t attr = 0;
    for (const ArgSpec& spec : node->op->schema.args) {
      if (spec.kind == ArgKind::tensor || spec.kind == ArgKind::tensor_list) continue;
      const ScalarValue& value = node->attrs[attr++].value;
      const bool in_block = spec.kind != ArgKind::int_list;
      const auto* sym = std::get_if<SymInt>(&value);
      if (spec.updatable && sym != nullptr && sym->is_symbolic()) {
        updatables_.push_back({node.get(), scalar, *sym});
      } else {
        collect(value, keyed);
      }
      if (in_block) ++scalar;
    }
  }
  for (std::size_t i = 0; i < symbols_.size(); ++i) {
    if (keyed.contains(symbols_[i].name)) key_symbols_.push_back(static_cast<int>(i));
  }

  // Outputs that are (in-place results of) inputs return the caller's tensor
  // (in-place operators, and `reuse` hints: Note [Placement hints] in ir.h).
  for (const ir::Value* out : graph_->outputs) {
    const ir::Value* v = out;
    while (v->producer != nullptr && v->producer->aliased_operand() >= 0 &&
           !v->producer->op->schema.is_view) {
      v = v->producer->operands[static_cast<std::size_t>(v->producer->aliased_operand())];
    }
    int alias = -1;
    if (v->is_input()) {
      alias = static_cast<int>(std::find(inputs.begin(), inputs.end(), v) - inputs.begin());
    }
    output_alias_.push_back(alias);
  }
}

void CapturedGraph::bind(std::span<const ir::RtValue> inputs,
                         std::vector<std::int64_t>& values) const {
  const auto& ins = graph_->inputs();
  SG_CHECK(inputs.size() == ins.size(), "graph @", graph_->name, " takes ", ins.size(),
           " inputs, got ", inputs.size());
  // Cheap checks of the common case; anything unusual gets bind_symbols' full
  // validation and its error message.
  bool simple = true;
  for (std::size_t i = 0; i < ins.size() && simple; ++i) {
    if (ins[i]->is_sym) {
      simple = std::holds_alternative<std::int64_t>(inputs[i]);
      continue;
    }
    const Tensor* t = std::get_if<Tensor>(&inputs[i]);
    simple = t != nullptr && t->defined() && t->dtype() == ins[i]->meta.dtype &&
             t->ndim() == ins[i]->meta.shape.size();
    for (int d = 0; simple && d < t->ndim(); ++d) {
      const auto want = ins[i]->meta.shape[d].maybe_value();
      simple = !want || *want == t->size(d);
    }
    if (simple) t->check_not_stale("input of a graph replay");
  }
  if (!simple || has_derived_dims_) (void)ir::bind_symbols(*graph_, inputs);
  values.resize(symbols_.size());
  for (std::size_t i = 0; i < symbols_.size(); ++i) {
    const SymbolSource& s = symbols_[i];
    const ir::RtValue& in = inputs[static_cast<std::size_t>(s.input)];
    values[i] = s.dim < 0 ? std::get<std::int64_t>(in) : std::get<Tensor>(in).size(s.dim);
  }
}

std::vector<std::int64_t> CapturedGraph::key_of(std::span<const ir::RtValue> inputs,
                                                const std::vector<std::int64_t>& values) const {
  std::vector<std::int64_t> key;
  key.reserve(key_symbols_.size() + param_inputs_.size());
  for (const int k : key_symbols_) key.push_back(values[static_cast<std::size_t>(k)]);
  if (!config_.frozen_parameter) {
    for (const int p : param_inputs_) {
      key.push_back(static_cast<std::int64_t>(
          reinterpret_cast<std::uintptr_t>(address(inputs[static_cast<std::size_t>(p)]))));
    }
  }
  return key;
}

std::vector<ir::RtValue> CapturedGraph::run_eagerly(std::span<const ir::RtValue> inputs) {
  ++counters_.eager_fallback_due_to_capture_limit;
  return ir::interpret(*graph_, inputs);
}

void CapturedGraph::reset_locked() {
  entries_.clear();  // ~GraphExec waits for its queued replays
  shared_pool_.reset();
}

std::vector<ir::RtValue> CapturedGraph::run(std::span<const ir::RtValue> inputs) {
  check_not_capturing(graph_->name);
  std::lock_guard lock(mutex_);
  ++calls_;
  if (eager_forever_) return run_eagerly(inputs);
  std::vector<std::int64_t> values;
  bind(inputs, values);
  const std::vector<std::int64_t> key = key_of(inputs, values);
  const std::size_t sym_part = key_symbols_.size();

  Entry* entry = nullptr;
  for (auto& e : entries_) {
    if (e->key == key) entry = e.get();
  }
  std::string reason;
  bool recapture = false;
  if (entry != nullptr) {
    for (std::size_t m = 0; m < mutated_inputs_.size(); ++m) {
      const void* now = address(inputs[static_cast<std::size_t>(mutated_inputs_[m])]);
      if (now != entry->mutated_addrs[m]) {
        reason = "mutated input %" +
                 graph_->inputs()[static_cast<std::size_t>(mutated_inputs_[m])]->name +
                 " moved from " + ptr_text(entry->mutated_addrs[m]) + " to " + ptr_text(now) +
                 " (captured kernels write its old address)";
        ++counters_.recapture_due_to_mutated_input_change;
        recapture = true;
        break;
      }
    }
    if (!recapture && config_.force_recapture) {
      reason = "force_recapture";
      ++counters_.recapture_due_to_force_recapture;
      recapture = true;
    }
    if (config_.frozen_parameter) {
      for (std::size_t p = 0; p < param_inputs_.size(); ++p) {
        const void* now = address(inputs[static_cast<std::size_t>(param_inputs_[p])]);
        SG_CHECK(now == entry->param_addrs[p], "graph @", graph_->name, ": param %",
                 graph_->inputs()[static_cast<std::size_t>(param_inputs_[p])]->name, " moved from ",
                 ptr_text(entry->param_addrs[p]), " to ", ptr_text(now),
                 ", but frozen_parameter promises params never move (the captured graph would read "
                 "the old memory); keep the params in place or set frozen_parameter=false");
      }
    }
  } else {
    // A new key: say which part is new.
    std::string values_text;
    for (std::size_t k = 0; k < sym_part; ++k) {
      values_text += (k > 0 ? ", " : "") +
                     symbols_[static_cast<std::size_t>(key_symbols_[k])].name + "=" +
                     std::to_string(key[k]);
    }
    bool same_syms_other_params = false;
    for (const auto& e : entries_) {
      if (std::equal(key.begin(), key.begin() + static_cast<std::ptrdiff_t>(sym_part),
                     e->key.begin())) {
        same_syms_other_params = true;
      }
    }
    if (entries_.empty() && distinct_keys_ == 0) {
      reason = "first call";
    } else if (same_syms_other_params) {
      reason = "a param moved (params' addresses are part of the key unless frozen_parameter)";
      ++counters_.recapture_due_to_parameter_change;
    } else {
      reason = "new graph key";
    }
    if (!values_text.empty()) reason += " [" + values_text + "]";
    if (static_cast<std::int64_t>(distinct_keys_) >= config_.capture_limit) {
      const std::string msg = "graph @" + graph_->name + ": capture_limit (" +
                              std::to_string(config_.capture_limit) + ") reached at " + reason +
                              "; freeing its captured graphs and running it eagerly from now on";
      std::fprintf(stderr, "sinkgraph: warning: %s\n", msg.c_str());
      log("fallback: " + msg);
      reset_locked();
      eager_forever_ = true;
      return run_eagerly(inputs);
    }
  }
  if (entry == nullptr || recapture) {
    if (!config_.data_dump.empty() &&
        !dumped_) {  // one eager run, node by node, to compare against replay
      dumped_ = true;
      (void)interpret_and_dump(*graph_, inputs, config_.data_dump);
    }
    for (std::int64_t w = 0; w < config_.warmup_iters; ++w) (void)ir::interpret(*graph_, inputs);
    std::unique_ptr<Entry> fresh = capture(inputs, key);
    log((recapture ? "re-capture: " : "capture: ") + reason + "; " +
        std::to_string(fresh->device_graph.nodes.size()) + " nodes in " +
        std::to_string(fresh->capture_ms).substr(0, 6) + " ms, pool '" + fresh->pool->name() +
        "' reserves " + std::to_string(fresh->pool_bytes) + " B");
    ++counters_.captured;
    if (recapture) {
      for (auto& e : entries_) {
        if (e.get() == entry) {
          e = std::move(fresh);
          entry = e.get();
        }
      }
    } else {
      ++distinct_keys_;
      entries_.push_back(std::move(fresh));
      entry = entries_.back().get();
    }
  }
  return replay(*entry, inputs, values);
}

std::unique_ptr<CapturedGraph::Entry> CapturedGraph::capture(std::span<const ir::RtValue> inputs,
                                                             std::vector<std::int64_t> key) {
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
  std::vector<ir::RtValue> capture_inputs(inputs.begin(), inputs.end());
  e->static_inputs.resize(inputs.size());
  e->mutated_addrs.clear();
  e->param_addrs.clear();
  for (const int i : user_inputs_) {
    const auto& caller = std::get<Tensor>(inputs[static_cast<std::size_t>(i)]);
    if (config_.clone_input) {
      PoolScope scope(stream, e->pool);
      e->static_inputs[static_cast<std::size_t>(i)] = Tensor::empty(caller.shape(), caller.dtype());
    } else {
      e->static_inputs[static_cast<std::size_t>(i)] = caller;
    }
    capture_inputs[static_cast<std::size_t>(i)] = e->static_inputs[static_cast<std::size_t>(i)];
  }
  for (const int i : mutated_inputs_)
    e->mutated_addrs.push_back(address(inputs[static_cast<std::size_t>(i)]));
  for (const int i : param_inputs_)
    e->param_addrs.push_back(address(inputs[static_cast<std::size_t>(i)]));

  // Note [Memory planning] in passes.h: shapes are concrete for this key.
  // max-autotune places every fresh intermediate at its planned offset in one
  // arena; the other modes only measure the liveness lower bound.
  const SymBindings bindings = ir::bind_symbols(*graph_, capture_inputs);
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
        *graph_, capture_inputs,
        [&](const ir::Node& node, const Tensor&) {
          launched.emplace_back(&node, stream.capture_size());
        },
        placement);
  } catch (...) {
    try {
      (void)stream.end_capture();
    } catch (...) {  // the original error is the one to report
    }
    throw;
  }
  e->device_graph = stream.end_capture();
  for (const Updatable& u : updatables_) {
    const auto it = std::find_if(launched.begin(), launched.end(),
                                 [&](const auto& l) { return l.first == u.node; });
    SG_ASSERT(it != launched.end() && it->second > 0, "updatable node %", u.node->result()->name,
              " launched no kernel");
    e->device_graph.nodes[it->second - 1].updates.push_back({u.scalar_index, u.expr});
  }
  e->exec = e->device_graph.instantiate(symbol_names_);
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    e->outputs.push_back(std::get<Tensor>(outputs[o]));
    auto stamp = std::make_shared<OutputStamp>();
    stamp->pool = e->pool.get();
    stamp->origin = "output " + std::to_string(o) + " of graph @" + graph_->name;
    e->stamps.push_back(std::move(stamp));
  }
  e->pool_bytes = e->pool->stats().reserved_bytes - reserved_before;
  e->capture_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return e;
}

std::vector<ir::RtValue> CapturedGraph::replay(Entry& e, std::span<const ir::RtValue> inputs,
                                               const std::vector<std::int64_t>& values) {
  Stream& stream = current_stream(cpu());
  std::vector<ReplayCopy>& copies = copies_;  // reused across calls (under mutex_)
  copies.clear();
  for (const int i : user_inputs_) {
    const auto& caller = std::get<Tensor>(inputs[static_cast<std::size_t>(i)]);
    const Tensor& target = e.static_inputs[static_cast<std::size_t>(i)];
    if (!config_.clone_input && caller.data_ptr() == target.data_ptr()) continue;
    ReplayCopy c;
    c.fn = copy_kernel_;
    c.args.num_tensors = 2;
    c.args.num_scalars = 0;
    c.args.tensors[0] = target.arg();
    c.args.tensors[1] = caller.arg();
    c.keep_alive = caller.storage();
    copies.push_back(std::move(c));
  }
  e.exec->launch(stream, values, copies, order_);
  copies.clear();  // the launch holds its own references to the sources
  const std::uint64_t generation = e.pool->bump_generation(writer_name_);
  ++e.replays;
  ++counters_.replayed;

  std::vector<ir::RtValue> out;
  out.reserve(e.outputs.size());
  for (std::size_t o = 0; o < e.outputs.size(); ++o) {
    if (output_alias_[o] >= 0) {
      out.emplace_back(inputs[static_cast<std::size_t>(output_alias_[o])]);
      continue;
    }
    Tensor t = e.outputs[o];
    if (config_.clone_output) {
      Tensor copy = Tensor::empty(t.shape(), t.dtype());
      ops::copy_(copy, t);
      out.emplace_back(std::move(copy));
    } else {
      t.set_stamp(e.stamps[o], generation);
      out.emplace_back(std::move(t));
    }
  }
  return out;
}

std::string CapturedGraph::explain() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "CapturedGraph: " << entries_.size() << " captured key(s) of at most "
      << config_.capture_limit
      << (eager_forever_ ? " (capture limit reached: running eagerly)" : "") << "; key syms:";
  if (key_symbols_.empty()) out << " (none)";
  for (const int k : key_symbols_) out << " " << symbols_[static_cast<std::size_t>(k)].name;
  out << (config_.frozen_parameter ? "" : " + param addresses")
      << "; updatable slots: " << updatables_.size() << "\n";
  out << "  counters: captured " << counters_.captured << ", replayed " << counters_.replayed
      << ", recapture_due_to_mutated_input_change "
      << counters_.recapture_due_to_mutated_input_change << ", recapture_due_to_parameter_change "
      << counters_.recapture_due_to_parameter_change << ", recapture_due_to_force_recapture "
      << counters_.recapture_due_to_force_recapture << ", eager_fallback_due_to_capture_limit "
      << counters_.eager_fallback_due_to_capture_limit << "\n";
  for (const auto& line : log_) out << "  " << line << "\n";
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
}

std::unique_ptr<ConcreteGraph> make_captured_graph(std::unique_ptr<ir::Graph> graph,
                                                   const CompilerConfig& config,
                                                   std::vector<std::string> notes) {
  return std::make_unique<CapturedGraph>(std::move(graph), config, std::move(notes));
}

}  // namespace sinkgraph::detail

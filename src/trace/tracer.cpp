// The tracer: a DispatchInterceptor that records operator calls into a Graph
// (Note [What becomes what while tracing] in trace.h).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "sinkgraph/error.h"
#include "sinkgraph/trace.h"

namespace sinkgraph {

namespace {

class TracedValue final : public TraceInfo {
 public:
  TracedValue(const void* owner, ir::Value* v) : tracer(owner), value(v) {}
  [[nodiscard]] std::string describe() const override {
    if (value->producer == nullptr) return "%" + value->name + " (a graph input)";
    std::string s = "%" + value->name + " = " + value->producer->op_name() + "(";
    for (std::size_t i = 0; i < value->producer->operands.size(); ++i) {
      s += (i > 0 ? ", %" : "%") + value->producer->operands[i]->name;
    }
    return s + ")";
  }
  const void* tracer;
  ir::Value* value;
};

// The graph input a value writes through to, following views and in-place results.
ir::Value* root_of(ir::Value* v) {
  while (v->producer != nullptr) {
    const OpSchema& schema = v->producer->op->schema;
    if (schema.alias_of != 0 || v->producer->operands.empty()) return v;
    v = v->producer->operands[0];
  }
  return v;
}

class StrictCompare {
 public:
  explicit StrictCompare(bool on) : previous_(set_strict_symbolic_compare(on)) {}
  ~StrictCompare() { set_strict_symbolic_compare(previous_); }
  StrictCompare(const StrictCompare&) = delete;
  StrictCompare& operator=(const StrictCompare&) = delete;

 private:
  bool previous_;
};

// The bytes a view can touch: [first, last) from its storage's start.
std::pair<std::int64_t, std::int64_t> extent(const Tensor& t) {
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype()));
  std::int64_t lo = t.offset();
  std::int64_t hi = t.offset();
  for (int d = 0; d < t.ndim(); ++d) {
    if (t.shape()[d] == 0) return {0, 0};
    const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  return {lo * elem, (hi + 1) * elem};
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.shares_storage(b) && a.offset() == b.offset() && a.dtype() == b.dtype() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

// Per argument, the first earlier tensor argument that shares its storage
// (-1 for none, and for what is not a concrete tensor). By storage address
// in sorted order: Guards::check runs on every call, and a decode step's
// 81 arguments compared pairwise were 3,240 comparisons per call.
std::vector<int> first_sharers(std::span<const Arg> args) {
  std::vector<std::pair<const void*, int>> by_storage;
  by_storage.reserve(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto* t = std::get_if<Tensor>(&args[i]);
    if (t == nullptr || !t->defined() || t->is_traced()) continue;
    by_storage.emplace_back(t->storage().get(), static_cast<int>(i));
  }
  std::sort(by_storage.begin(), by_storage.end());
  std::vector<int> first(args.size(), -1);
  for (std::size_t k = 1; k < by_storage.size(); ++k) {
    if (by_storage[k].first != by_storage[k - 1].first) continue;
    const int prev = by_storage[k - 1].second;  // the group's first, or its first's sharer
    first[static_cast<std::size_t>(by_storage[k].second)] =
        first[static_cast<std::size_t>(prev)] >= 0 ? first[static_cast<std::size_t>(prev)] : prev;
  }
  return first;
}

// How tensor argument `i` aliases an earlier one, `sharer` being the first
// earlier argument on its storage (first_sharers; Guards::check and trace()).
ArgGuard::Alias classify_alias(std::span<const Arg> args, std::size_t i, int sharer, int& alias_of,
                               bool& overlaps) {
  alias_of = -1;
  overlaps = false;
  if (sharer < 0) return ArgGuard::Alias::none;
  const auto& t = std::get<Tensor>(args[i]);
  const auto& u = std::get<Tensor>(args[static_cast<std::size_t>(sharer)]);
  alias_of = sharer;
  if (same_view(t, u)) return ArgGuard::Alias::same;
  const auto [a0, a1] = extent(t);
  const auto [b0, b1] = extent(u);
  overlaps = a0 < b1 && b0 < a1;
  return ArgGuard::Alias::disjoint;
}

class Tracer final : public DispatchInterceptor {
 public:
  Tracer(const TraceOptions& options, TracedGraph& out) : options_(options), out_(out) {}

  Tensor make_traced(ir::Value* v, bool contiguous) {
    auto info = std::make_shared<TracedValue>(this, v);
    info->shape = v->meta.shape;
    info->contiguous = contiguous;
    info->device = &get_device(v->meta.device);
    return Tensor(std::move(info), v->meta.dtype);
  }

  // The graph value a tensor stands for; concrete tensors become params.
  ir::Value* value_of(const Tensor& t) {
    if (t.is_traced()) {
      const auto* info = dynamic_cast<const TracedValue*>(t.trace().get());
      SG_CHECK(info != nullptr && info->tracer == this,
               "a tensor traced by another trace() call was used here");
      return info->value;
    }
    const auto key =
        std::make_tuple(t.storage().get(), t.offset(), t.dtype(),
                        std::vector<std::int64_t>(t.shape().begin(), t.shape().end()),
                        std::vector<std::int64_t>(t.strides().begin(), t.strides().end()));
    if (const auto it = params_.find(key); it != params_.end()) return it->second;
    TensorMeta meta{t.dtype(), to_sym(t.shape()), t.device().type()};
    ir::Value* v =
        out_.graph->add_input("p" + std::to_string(out_.params.size()), meta, ir::InputKind::param);
    out_.bindings.push_back({InputBinding::Source::param, static_cast<int>(out_.params.size())});
    out_.params.push_back(t);
    params_.emplace(key, v);
    return v;
  }

  Tensor intercept(const OpDef& op, std::span<const Tensor* const> tensors,
                   std::span<const ScalarValue> scalars) override {
    // Note [Comparing symbolic sizes]: shape functions ask "provably equal"
    // on purpose; only the model's own code is held to strict comparisons.
    const StrictCompare library_code(false);
    const std::string& name = op.schema.name;
    if (const auto it = options_.decompositions.find(name);
        it != options_.decompositions.end() && !decomposing_.contains(name)) {
      std::vector<Tensor> args;
      args.reserve(tensors.size());
      for (const Tensor* t : tensors) args.push_back(*t);
      decomposing_.insert(name);  // the decomposition may call the operator itself
      const StrictCompare user_code(true);
      struct Reset {
        std::set<std::string>& set;
        const std::string& key;
        ~Reset() { set.erase(key); }
      } reset{decomposing_, name};
      return it->second(args, scalars);
    }
    std::vector<ir::Value*> operands;
    operands.reserve(tensors.size());
    for (const Tensor* t : tensors) operands.push_back(value_of(*t));
    std::vector<ir::NamedAttr> attrs;
    std::size_t next = 0;
    for (const ArgSpec& spec : op.schema.args) {
      if (spec.kind == ArgKind::tensor || spec.kind == ArgKind::tensor_list) continue;
      SG_ASSERT(next < scalars.size(), name, ": fewer scalars than the schema declares");
      attrs.push_back({spec.name, scalars[next++]});
    }
    ir::Node* node = out_.graph->add_node(op, std::move(operands), std::move(attrs));
    // In-place writes to an input make it `mutated`.
    std::size_t tensor_index = 0;
    for (const ArgSpec& spec : op.schema.args) {
      if (spec.kind != ArgKind::tensor) continue;
      if (spec.mutated) {
        ir::Value* root = root_of(node->operands[tensor_index]);
        if (root->is_input() && root->kind == ir::InputKind::input)
          root->kind = ir::InputKind::mutated;
      }
      ++tensor_index;
    }
    bool contiguous = true;
    if (op.schema.is_view) {
      contiguous = name == "view";
    } else if (op.schema.alias_of == 0) {
      contiguous = tensors[0]->is_contiguous();
    }
    return make_traced(node->result(), contiguous);
  }

 private:
  using ParamKey = std::tuple<const Storage*, std::int64_t, DType, std::vector<std::int64_t>,
                              std::vector<std::int64_t>>;
  const TraceOptions& options_;
  TracedGraph& out_;
  std::map<ParamKey, ir::Value*> params_;
  std::set<std::string> decomposing_;
};

class InterceptorScope {
 public:
  explicit InterceptorScope(DispatchInterceptor* i) : previous_(set_dispatch_interceptor(i)) {}
  ~InterceptorScope() { set_dispatch_interceptor(previous_); }
  InterceptorScope(const InterceptorScope&) = delete;
  InterceptorScope& operator=(const InterceptorScope&) = delete;

 private:
  DispatchInterceptor* previous_;
};

std::string arg_name(const TraceOptions& options, std::size_t i) {
  return i < options.arg_names.size() ? options.arg_names[i] : "a" + std::to_string(i);
}

}  // namespace

TracedGraph trace(const TracedFn& fn, std::span<const Arg> example_args,
                  const TraceOptions& options) {
  SG_CHECK(dispatch_interceptor() == nullptr, "trace: already tracing on this thread");
  TracedGraph out;
  out.graph = std::make_unique<ir::Graph>(options.graph_name);
  Tracer tracer(options, out);
  std::vector<Arg> traced_args;
  int next_symbol = 0;
  const std::vector<int> sharers = first_sharers(example_args);
  for (std::size_t i = 0; i < example_args.size(); ++i) {
    const std::string name = arg_name(options, i);
    ArgGuard guard;
    if (const auto* t = std::get_if<Tensor>(&example_args[i])) {
      SG_CHECK(t->defined() && !t->is_traced(), "trace: argument ", i, " (", name,
               ") must be a concrete tensor");
      guard.kind = ArgGuard::Kind::tensor;
      guard.dtype = t->dtype();
      guard.device = t->device().type();
      guard.contiguous = t->is_contiguous();
      TensorMeta meta{t->dtype(), to_sym(t->shape()), t->device().type()};
      guard.dims.assign(t->shape().begin(), t->shape().end());
      bool dynamic = false;
      if (const auto it = options.dynamic_dims.find(static_cast<int>(i));
          it != options.dynamic_dims.end()) {
        for (const int d : it->second) {
          const int dim = wrap_dim(d, t->ndim(), "trace dynamic_dims");
          meta.shape[dim] = SymInt::symbol("s" + std::to_string(next_symbol++));
          guard.dims[static_cast<std::size_t>(dim)] = -1;
          dynamic = true;
        }
      }
      if (!guard.contiguous && !dynamic)
        guard.strides.assign(t->strides().begin(), t->strides().end());
      // Arguments that share memory: the same view twice (f(b, b)) is one
      // graph input; views that overlap otherwise cannot be traced as
      // separate inputs (a write through one would be invisible to the other).
      bool overlaps = false;
      guard.alias = classify_alias(example_args, i, sharers[i], guard.alias_of, overlaps);
      SG_CHECK(!overlaps, "trace: arguments ", guard.alias_of, " and ", i, " (", name,
               ") are different views of overlapping memory; a graph takes each tensor argument "
               "as separate memory. Pass a copy (ops::clone), or the same view twice");
      if (guard.alias == ArgGuard::Alias::same) {
        traced_args.push_back(traced_args[static_cast<std::size_t>(guard.alias_of)]);
        out.guards.args.push_back(guard);
        continue;
      }
      const bool is_param = std::find(options.param_args.begin(), options.param_args.end(),
                                      static_cast<int>(i)) != options.param_args.end();
      ir::Value* v =
          out.graph->add_input(name, meta, is_param ? ir::InputKind::param : ir::InputKind::input);
      out.bindings.push_back({InputBinding::Source::arg, static_cast<int>(i)});
      if (is_param) out.param_arg_examples.emplace(name, *t);
      traced_args.emplace_back(tracer.make_traced(v, guard.contiguous));
    } else if (const auto* s = std::get_if<SymInt>(&example_args[i])) {
      SG_CHECK(!s->is_symbolic(), "trace: argument ", i, " (", name, ") must be a concrete SymInt");
      guard.kind = ArgGuard::Kind::sym;
      out.graph->add_sym_input(name);
      out.bindings.push_back({InputBinding::Source::arg, static_cast<int>(i)});
      traced_args.emplace_back(SymInt::symbol(name));
    } else {
      guard.kind = ArgGuard::Kind::integer;
      guard.value = std::get<std::int64_t>(example_args[i]);
      traced_args.emplace_back(guard.value);
    }
    out.guards.args.push_back(guard);
  }
  std::vector<Tensor> results;
  {
    InterceptorScope scope(&tracer);
    const StrictCompare user_code(true);
    results = fn(traced_args);
  }
  // Params read through the model's own tensors are guarded on them.
  if (options.parameters) {
    const NamedTensors handles = options.parameters();
    for (std::size_t i = 0; i < out.params.size(); ++i) {
      const Tensor& p = out.params[i];
      for (const auto& [pname, handle] : handles) {
        if (handle == nullptr || !handle->defined() || handle->is_traced() ||
            !same_view(*handle, p)) {
          continue;
        }
        ParamGuard g;
        g.name = pname;
        g.param = static_cast<int>(i);
        g.handle = handle;
        g.storage = p.storage().get();
        g.offset = p.offset();
        g.dtype = p.dtype();
        g.shape.assign(p.shape().begin(), p.shape().end());
        g.strides.assign(p.strides().begin(), p.strides().end());
        out.guards.params.push_back(std::move(g));
        break;
      }
    }
  }
  for (const Tensor& r : results) {
    SG_CHECK(r.defined(), "trace: the function returned an undefined tensor");
    out.graph->outputs.push_back(tracer.value_of(r));
  }
  return out;
}

std::vector<ir::RtValue> TracedGraph::graph_inputs(std::span<const Arg> args) const {
  std::vector<ir::RtValue> inputs;
  inputs.reserve(bindings.size());
  for (const InputBinding& b : bindings) {
    if (b.source == InputBinding::Source::param) {
      inputs.emplace_back(params[static_cast<std::size_t>(b.index)]);
    } else if (const auto* t = std::get_if<Tensor>(&args[static_cast<std::size_t>(b.index)])) {
      inputs.emplace_back(*t);
    } else {
      inputs.emplace_back(std::get<SymInt>(args[static_cast<std::size_t>(b.index)]).value());
    }
  }
  return inputs;
}

bool Guards::check(std::span<const Arg> call_args, std::string* why) const {
  const auto fail = [&](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  if (call_args.size() != args.size()) {
    return fail("expected " + std::to_string(args.size()) + " arguments, got " +
                std::to_string(call_args.size()));
  }
  const std::vector<int> sharers = first_sharers(call_args);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ArgGuard& g = args[i];
    // The argument's name, built only for a failure's reason.
    const auto where = [i] { return "argument " + std::to_string(i); };
    switch (g.kind) {
      case ArgGuard::Kind::tensor: {
        const auto* t = std::get_if<Tensor>(&call_args[i]);
        if (t == nullptr || !t->defined()) return fail(where() + " must be a tensor");
        if (t->dtype() != g.dtype) {
          return fail(where() + " has dtype " + std::string(dtype_name(t->dtype())) +
                      ", traced with " + std::string(dtype_name(g.dtype)));
        }
        if (t->device().type() != g.device) return fail(where() + " moved to another device type");
        if (t->ndim() != static_cast<int>(g.dims.size())) {
          return fail(where() + " has rank " + std::to_string(t->ndim()) + ", traced with " +
                      std::to_string(g.dims.size()));
        }
        for (std::size_t d = 0; d < g.dims.size(); ++d) {
          if (g.dims[d] >= 0 && t->size(static_cast<int>(d)) != g.dims[d]) {
            return fail(where() + " dimension " + std::to_string(d) + " is " +
                        std::to_string(t->size(static_cast<int>(d))) +
                        ", traced as the static size " + std::to_string(g.dims[d]));
          }
        }
        if (t->is_contiguous() != g.contiguous) {
          return fail(where() + (g.contiguous ? " is not contiguous, traced contiguous"
                                              : " is contiguous, traced non-contiguous"));
        }
        if (!g.strides.empty() && !std::equal(g.strides.begin(), g.strides.end(),
                                              t->strides().begin(), t->strides().end())) {
          return fail(where() + " has other strides than traced");
        }
        int alias_of = -1;
        bool overlaps = false;
        const ArgGuard::Alias alias = classify_alias(call_args, i, sharers[i], alias_of, overlaps);
        if (alias != g.alias || alias_of != g.alias_of || overlaps) {
          return fail(where() + " shares memory with the other arguments differently than traced");
        }
        break;
      }
      case ArgGuard::Kind::sym:
        if (!std::holds_alternative<SymInt>(call_args[i]))
          return fail(where() + " must be a SymInt");
        break;
      case ArgGuard::Kind::integer: {
        const auto* v = std::get_if<std::int64_t>(&call_args[i]);
        if (v == nullptr) return fail(where() + " must be a plain integer");
        if (*v != g.value) {
          return fail(where() + " is " + std::to_string(*v) + ", specialized while tracing as " +
                      std::to_string(g.value));
        }
        break;
      }
    }
  }
  for (const ParamGuard& p : params) {
    const Tensor& h = *p.handle;
    const bool same =
        h.defined() && !h.is_traced() && h.storage().get() == p.storage && h.offset() == p.offset &&
        h.dtype() == p.dtype &&
        std::equal(p.shape.begin(), p.shape.end(), h.shape().begin(), h.shape().end()) &&
        std::equal(p.strides.begin(), p.strides.end(), h.strides().begin(), h.strides().end());
    if (!same) return fail("parameter '" + p.name + "' was reassigned since tracing");
  }
  return true;
}

std::string Guards::str() const {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ArgGuard& g = args[i];
    out += (i > 0 ? "; " : "") + std::string("arg") + std::to_string(i) + ": ";
    switch (g.kind) {
      case ArgGuard::Kind::tensor: {
        out += std::string(dtype_name(g.dtype)) + "[";
        for (std::size_t d = 0; d < g.dims.size(); ++d) {
          out +=
              (d > 0 ? "," : "") + (g.dims[d] < 0 ? std::string("*") : std::to_string(g.dims[d]));
        }
        out += "] on " + std::string(device_type_name(g.device));
        if (!g.contiguous) out += " non-contiguous";
        if (g.alias == ArgGuard::Alias::same)
          out += " (same as arg" + std::to_string(g.alias_of) + ")";
        if (g.alias == ArgGuard::Alias::disjoint) {
          out += " (shares storage with arg" + std::to_string(g.alias_of) + ")";
        }
        break;
      }
      case ArgGuard::Kind::sym:
        out += "sym";
        break;
      case ArgGuard::Kind::integer:
        out += "== " + std::to_string(g.value);
        break;
    }
  }
  if (!params.empty()) out += "; " + std::to_string(params.size()) + " param handle(s)";
  return out;
}

}  // namespace sinkgraph

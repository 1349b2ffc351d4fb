#include <algorithm>
#include <atomic>
#include <deque>
#include <unordered_map>
#include <utility>

#include "dispatch.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

namespace {
struct Counters {
  std::atomic<std::uint64_t> dispatches{0};
  std::atomic<std::uint64_t> shape_fns{0};
  std::atomic<std::uint64_t> launches{0};
};
Counters g_counters;
__attribute__((tls_model("initial-exec"))) thread_local DispatchInterceptor* t_interceptor =
    nullptr;

struct RegistryState {
  std::deque<OpDef> ops;  // stable addresses
  std::unordered_map<std::string, const OpDef*> by_name;
};
RegistryState& state() {
  static RegistryState s;
  return s;
}
}  // namespace

OpRegistry::OpRegistry() {
  detail::register_elementwise_ops(*this);
  detail::register_nn_ops(*this);
  detail::register_shape_ops(*this);
  detail::register_memory_ops(*this);
  detail::register_fused_ops(*this);
  detail::register_vision_ops(*this);
  detail::register_reduce_ops(*this);
  detail::register_collective_ops(*this);
  // Then each backend's kernels (which backends: chosen in CMake).
  detail::register_cpu_kernels(*this);
  detail::register_cuda_kernels(*this);
  for (const OpDef& op : state().ops) {
    SG_ASSERT(op.schema.is_view || op.composite != nullptr ||
                  op.kernels[static_cast<std::size_t>(DeviceType::cpu)] != nullptr,
              op.schema.name, " has no CPU kernel");
  }
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  RegistryState& s = state();
  SG_CHECK(!s.by_name.contains(def.schema.name), "operator '", def.schema.name,
           "' is already registered");
  SG_ASSERT(def.shape_fn != nullptr, def.schema.name, " has no shape function");
  SG_ASSERT(
      def.kernel_scalars == nullptr || std::none_of(def.schema.args.begin(), def.schema.args.end(),
                                                    [](const ArgSpec& a) { return a.updatable; }),
      def.schema.name, " packs its own kernel scalars but has an updatable argument");
  const std::string name = def.schema.name;
  s.ops.push_back(std::move(def));
  s.by_name.emplace(name, &s.ops.back());
}

namespace {
// The definition a backend attaches something to (a kernel, an emitter):
// known, and neither a view nor a composite, which run nothing of their own.
OpDef& backend_target(const std::unordered_map<std::string, const OpDef*>& by_name,
                      std::string_view name, const char* what) {
  const auto it = by_name.find(std::string(name));
  SG_CHECK(it != by_name.end(), what, ": unknown operator '", name, "'");
  // The deque holds the definitions; by_name points into it.
  auto& def = const_cast<OpDef&>(*it->second);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  SG_CHECK(!def.schema.is_view && def.composite == nullptr, what, ": '", name,
           "' is a view or a composite and runs no kernel of its own");
  return def;
}
}  // namespace

void OpRegistry::set_kernel(std::string_view name, DeviceType device, KernelFn kernel) {
  OpDef& def = backend_target(state().by_name, name, "set_kernel");
  SG_CHECK(kernel != nullptr, "set_kernel: null kernel for '", name, "'");
  KernelFn& slot = def.kernels[static_cast<std::size_t>(device)];
  SG_CHECK(slot == nullptr, "set_kernel: '", name, "' already has a ", device_type_name(device),
           " kernel");
  slot = kernel;
}

void OpRegistry::set_emitter(std::string_view name, EmitFn emit) {
  OpDef& def = backend_target(state().by_name, name, "set_emitter");
  SG_CHECK(emit != nullptr, "set_emitter: null emitter for '", name, "'");
  SG_CHECK(def.emit == nullptr, "set_emitter: '", name, "' already has an emitter");
  def.emit = emit;
}

const OpDef* OpRegistry::find(std::string_view name) const {
  const auto& map = state().by_name;
  const auto it = map.find(std::string(name));
  return it == map.end() ? nullptr : it->second;
}

const OpDef& OpRegistry::get(std::string_view name) const {
  const OpDef* op = find(name);
  SG_CHECK(op != nullptr, "unknown operator '", name, "'");
  return *op;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& op : state().ops) out.push_back(op.schema.name);
  return out;
}

Tensor run_op(const OpDef& op, std::span<const Tensor* const> tensors,
              std::span<const ScalarValue> scalars, const Tensor* out) {
  return detail::dispatch(op, tensors, scalars, out);
}

DispatchInterceptor* set_dispatch_interceptor(DispatchInterceptor* interceptor) {
  return std::exchange(t_interceptor, interceptor);
}

DispatchInterceptor* dispatch_interceptor() { return t_interceptor; }

DispatchCounters dispatch_counters() {
  return {g_counters.dispatches.load(std::memory_order_relaxed),
          g_counters.shape_fns.load(std::memory_order_relaxed),
          g_counters.launches.load(std::memory_order_relaxed)};
}

namespace detail {

namespace {
// Name of the i-th tensor argument, for messages.
std::string tensor_arg_name(const OpSchema& schema, std::size_t index) {
  std::size_t i = 0;
  for (const auto& arg : schema.args) {
    if (arg.kind == ArgKind::tensor) {
      if (i == index) return arg.name;
      ++i;
    } else if (arg.kind == ArgKind::tensor_list) {
      return detail::concat(arg.name, "[", index - i, "]");
    }
  }
  return detail::concat("#", index);
}
}  // namespace

void infer(const OpDef& op, std::span<const Tensor* const> tensors,
           std::span<const ScalarValue> scalars, Inferred& r) {
  const char* name = op.schema.name.c_str();
  TensorMeta* metas = r.inline_metas.data();
  if (tensors.size() > r.inline_metas.size()) {
    r.heap_metas.resize(tensors.size());
    metas = r.heap_metas.data();
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = *tensors[i];
    SG_CHECK(t.defined(), name, ": argument '", tensor_arg_name(op.schema, i),
             "' is an undefined tensor");
    t.check_not_stale(name);
    if (r.device == nullptr) {
      r.device = &t.device();
    } else {
      SG_CHECK(&t.device() == r.device, name, ": argument '", tensor_arg_name(op.schema, i),
               "' is on ", t.device().name(), " but '", tensor_arg_name(op.schema, 0), "' is on ",
               r.device->name(), " (expected all tensors on one device)");
    }
    metas[i].dtype = t.dtype();
    for (const std::int64_t d : t.shape()) metas[i].shape.push_back(SymInt(d));
    metas[i].device = t.device().type();
  }
  if (r.device == nullptr) r.device = &cpu();
  r.args = ShapeArgs{std::span<const TensorMeta>(metas, tensors.size()), scalars};
  r.out = op.shape_fn(r.args);
  g_counters.shape_fns.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Note [Output placement]: a placed output must be exactly what the operator produces.
void check_placed(const OpDef& op, const Tensor& out, const TensorMeta& inferred) {
  const char* name = op.schema.name.c_str();
  SG_CHECK(op.schema.alias_of < 0, name, ": an output placement was given, but ", name,
           " returns (a view of) its input, never a fresh output");
  SG_CHECK(out.defined() && !out.is_traced(), name, ": the placed output is not a concrete tensor");
  const Shape want = to_concrete(inferred.shape);
  SG_CHECK(out.dtype() == inferred.dtype && out.shape() == want, name, ": the placed output is ",
           dtype_name(out.dtype()), shape_str(out.shape()), " but ", name, " produces ",
           dtype_name(inferred.dtype), shape_str(want));
  out.check_not_stale(name);
}
}  // namespace

Tensor dispatch(const OpDef& op, std::span<const Tensor* const> tensors,
                std::span<const ScalarValue> scalars, const Tensor* placed) {
  if (t_interceptor != nullptr) [[unlikely]] {
    SG_CHECK(placed == nullptr, op.schema.name,
             ": an output placement cannot be traced (it is a property of a run, not of the "
             "graph)");
    return t_interceptor->intercept(op, tensors, scalars);
  }
  g_counters.dispatches.fetch_add(1, std::memory_order_relaxed);
  // Names the operator in capture-time errors raised below us (allocation,
  // host reads). Only a capture reads the name, so the eager path without one
  // pays a single atomic load for it.
  struct OpName {
    bool set;
    const char* previous = nullptr;
    explicit OpName(const char* n) : set(any_capture_active()) {
      if (set) {
        previous = current_op_name();
        set_current_op_name(n);
      }
    }
    ~OpName() {
      if (set) set_current_op_name(previous);
    }
    OpName(const OpName&) = delete;
    OpName& operator=(const OpName&) = delete;
  } op_name(op.schema.name.c_str());
  const char* name = op.schema.name.c_str();
  if (op.composite != nullptr) {
    if (placed == nullptr) return op.composite(tensors, scalars);
    SG_CHECK(op.composite_into != nullptr, name,
             ": an output placement was given, but this composite operator cannot take one");
    Inferred check;
    infer(op, tensors, scalars, check);
    check_placed(op, *placed, check.out);
    return op.composite_into(tensors, scalars, *placed);
  }
  Inferred inferred;
  infer(op, tensors, scalars, inferred);
  const TensorMeta& out = inferred.out;
  if (placed != nullptr) check_placed(op, *placed, out);
  Device* device = inferred.device;
  const ShapeArgs& shape_args = inferred.args;

  if (op.schema.is_view) {
    const Tensor& base = *tensors[0];
    const ViewResult v = op.view_fn(base.shape(), base.strides(), base.offset(), shape_args);
    Tensor view(base.storage(), out.dtype, v.shape, v.strides, v.offset);
    view.copy_stamp_from(base);
    return view;
  }

  const bool fresh = op.schema.alias_of < 0;
  Tensor result = !fresh              ? *tensors[static_cast<std::size_t>(op.schema.alias_of)]
                  : placed != nullptr ? *placed
                                      : Tensor::empty(to_concrete(out.shape), out.dtype, *device);
  const KernelFn kernel = op.kernels[static_cast<std::size_t>(device->type())];
  SG_CHECK(kernel != nullptr, name, ": no kernel for ", device->name());

  ArgBlock block;
  SG_ASSERT(tensors.size() + (fresh ? 1 : 0) <= kMaxTensorArgs, name,
            ": too many tensor arguments");
  for (std::size_t i = 0; i < tensors.size(); ++i) block.tensors[i] = tensors[i]->arg();
  block.num_tensors = static_cast<std::uint16_t>(tensors.size());
  if (fresh) block.tensors[block.num_tensors++] = result.arg();
  // Note [Kernel scalars]: the schema's scalars, unless the operator packs its own.
  std::span<const ScalarValue> schema_scalars = scalars;
  if (op.kernel_scalars != nullptr) {
    const int n = op.kernel_scalars(shape_args, block.scalars);
    SG_ASSERT(n >= 0 && n <= kMaxScalarArgs, name, ": kernel_scalars filled ", n, " slots");
    block.num_scalars = static_cast<std::uint16_t>(n);
    schema_scalars = {};
  }
  for (const ScalarValue& s : schema_scalars) {
    ScalarArg slot{};
    if (const auto* i = std::get_if<SymInt>(&s)) {
      slot.i = i->value();
    } else if (const auto* f = std::get_if<double>(&s)) {
      slot.f = *f;
    } else if (const auto* b = std::get_if<bool>(&s)) {
      slot.i = *b ? 1 : 0;
    } else if (const auto* d = std::get_if<DType>(&s)) {
      slot.i = static_cast<std::int64_t>(*d);
    } else {
      continue;  // lists shape the output; kernels never read them
    }
    SG_ASSERT(block.num_scalars < kMaxScalarArgs, name, ": too many scalar arguments");
    block.scalars[block.num_scalars++] = slot;
  }
  if (result.numel() == 0 && fresh) return result;
  Stream& stream = current_stream(*device);
  // Note [Output uses] in allocator.h: the replay outputs this operator reads
  // are held from before its launch until a fence recorded after it, and the
  // launch waits for the replay that wrote them when that ran on another
  // stream. Only replay outputs take part: other inputs cost one test each.
  PoolUses uses;
  for (const Tensor* t : tensors) {
    if (!t->is_stamped()) continue;
    ReplayFence writer;
    uses.add(t->begin_output_use(name, &writer));
    if (!stream.is_capturing() && writer.stream_id != stream.id() && !writer.reached()) {
      stream.wait(writer);
    }
  }
  stream.launch(kernel, block, name);
  g_counters.launches.fetch_add(1, std::memory_order_relaxed);
  if (!uses.empty()) uses.end(stream.is_capturing() ? ReplayFence{} : stream.record_fence());
  // Note [Version counters] in tensor.h: every in-place write bumps the
  // written storage's version.
  if (placed != nullptr) placed->storage()->bump_version();
  if (!fresh) {
    std::size_t index = 0;
    for (const ArgSpec& spec : op.schema.args) {
      if (spec.kind == ArgKind::tensor_list) break;
      if (spec.kind != ArgKind::tensor) continue;
      if (spec.mutated) tensors[index]->storage()->bump_version();
      ++index;
    }
  }
  return result;
}

OpDef make_op(const char* name, std::vector<ArgSpec> args, ShapeFn shape, OpTraits traits) {
  OpDef def;
  def.schema.name = name;
  def.schema.args = std::move(args);
  def.shape_fn = shape;
  def.traits = traits;
  return def;
}

void check_floating(const TensorMeta& t, const char* op, const char* arg) {
  SG_CHECK(is_floating(t.dtype), op, ": argument '", arg, "' has dtype ", dtype_name(t.dtype),
           " (shape ", shape_str(t.shape), "); expected f32, f16 or bf16");
}

void check_same_dtype(const TensorMeta& a, const TensorMeta& b, const char* op, const char* arg_a,
                      const char* arg_b) {
  SG_CHECK(a.dtype == b.dtype, op, ": arguments '", arg_a, "' (", dtype_name(a.dtype),
           shape_str(a.shape), ") and '", arg_b, "' (", dtype_name(b.dtype), shape_str(b.shape),
           ") must have the same dtype");
}

void check_rank(const TensorMeta& t, int rank, const char* op, const char* arg) {
  SG_CHECK(t.shape.size() == rank, op, ": argument '", arg, "' has shape ", shape_str(t.shape),
           "; expected ", rank, " dimensions");
}

void check_dim(const SymInt& got, const SymInt& expected, const char* op, const char* what) {
  SG_CHECK(got == expected, op, ": ", what, " is ", got.str(), "; expected ", expected.str());
}

void check_norm_weight(const TensorMeta& x, const TensorMeta& w, const char* op, const char* arg) {
  check_same_dtype(x, w, op, "x", arg);
  SG_CHECK(w.shape.size() == 1 && !x.shape.empty() && w.shape[0] == x.shape.back(), op, ": ", arg,
           shape_str(w.shape), " must be 1-D with x's last dimension (x", shape_str(x.shape), ")");
}

}  // namespace detail
}  // namespace sinkgraph

// Note [The libtorch fallback]
// An ATen operator without a converter still runs in eager and
// reduce-overhead, as TorchAir's reduce-overhead does not need every
// operator registered with the graph engine: the converter records one
// `torch_fallback(inputs..., id)` node, whose CPU kernel calls the ATen
// operator through libtorch's C++ dispatcher on the node's buffers and
// copies the result into the node's output. The node is an ordinary kernel:
// it is traced, planned and captured like any other, so a replay runs it
// with the static buffers' addresses.
//
// Each distinct call (operator, constant arguments, output type) is one
// entry of a table; the node's `id` names it. The shape function reads the
// entry's output meta (recorded by the front end from the FX graph's
// example run), the kernel its operator handle and constants. Entries are
// never removed (a captured graph may replay any of them at any time).
//
// Only this file includes torch headers. The kernel runs on a stream worker
// thread without the GIL: the dispatcher needs none.
#include "torch_fallback.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <deque>
#include <mutex>
#include <optional>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include "sinkgraph/error.h"
#include "sinkgraph/op_registry.h"

namespace py = pybind11;

namespace sinkgraph::python {
namespace {

constexpr char kFallbackOp[] = "torch_fallback";

// One argument of the ATen call: a tensor input of the node, or a constant.
struct Argument {
  int tensor = -1;  // index into the node's inputs
  std::vector<int> tensor_list;
  bool is_tensor_list = false;
  c10::IValue constant;
};

struct Entry {
  std::string name;  // "aten::foo.overload"
  c10::OperatorHandle op;
  std::vector<Argument> args;
  int output_index = 0;  // which result of the operator is the node's output
  TensorMeta meta;
  // An in-place operator (relu_, bernoulli_): the node's output starts as a
  // copy of argument 0 and the operator writes it there, so the node itself
  // stays functional; the front end writes the result back where needed.
  bool inplace = false;
};

struct Table {
  std::mutex mutex;
  std::deque<Entry> entries;  // stable addresses
};

Table& table() {
  static Table t;
  return t;
}

const Entry& entry(std::int64_t id) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  SG_CHECK(id >= 0 && static_cast<std::size_t>(id) < t.entries.size(),
           "torch_fallback: unknown fallback id ", id);
  return t.entries[static_cast<std::size_t>(id)];
}

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::f32:
      return at::kFloat;
    case DType::f16:
      return at::kHalf;
    case DType::bf16:
      return at::kBFloat16;
    case DType::i32:
      return at::kInt;
    case DType::i64:
      return at::kLong;
    case DType::boolean:
      return at::kBool;
  }
  return at::kFloat;
}

at::Tensor as_aten(const TensorArg& t) {
  std::vector<std::int64_t> sizes(t.sizes, t.sizes + t.ndim);
  std::vector<std::int64_t> strides(t.strides, t.strides + t.ndim);
  void* data =
      static_cast<char*>(t.data) + t.offset * static_cast<std::int64_t>(dtype_size(t.dtype));
  return at::from_blob(data, sizes, strides, at::TensorOptions().dtype(scalar_type(t.dtype)));
}

TensorMeta fallback_shape(const ShapeArgs& args) {
  const Entry& e = entry(args.integer(0));
  SG_CHECK(args.tensors.size() <= static_cast<std::size_t>(kMaxTensorArgs - 1), kFallbackOp, ": ",
           e.name, " takes ", args.tensors.size(), " tensors; at most ", kMaxTensorArgs - 1,
           " fit a kernel");
  return e.meta;
}

void fallback_kernel(const ArgBlock& block, KernelContext& ctx) {
  try {
    const Entry& e = entry(block.scalars[0].i);
    const c10::InferenceMode inference;
    const int num_inputs = block.num_tensors - 1;
    std::vector<at::Tensor> inputs;
    inputs.reserve(static_cast<std::size_t>(num_inputs));
    for (int i = 0; i < num_inputs; ++i) inputs.push_back(as_aten(block.tensors[i]));
    torch::jit::Stack stack;
    stack.reserve(e.args.size());
    for (const Argument& a : e.args) {
      if (a.tensor >= 0) {
        stack.emplace_back(inputs[static_cast<std::size_t>(a.tensor)]);
      } else if (a.is_tensor_list) {
        std::vector<at::Tensor> list;
        for (const int i : a.tensor_list) list.push_back(inputs[static_cast<std::size_t>(i)]);
        stack.emplace_back(std::move(list));
      } else {
        stack.push_back(a.constant);
      }
    }
    at::Tensor out = as_aten(block.tensors[num_inputs]);
    if (e.inplace) {
      out.copy_(stack[0].toTensor());
      stack[0] = out;
      e.op.callBoxed(&stack);
      return;
    }
    e.op.callBoxed(&stack);
    SG_CHECK(static_cast<std::size_t>(e.output_index) < stack.size(), e.name, " returned ",
             stack.size(), " values");
    const c10::IValue& result = stack[static_cast<std::size_t>(e.output_index)];
    SG_CHECK(result.isTensor(), e.name, " result ", e.output_index, " is not a tensor");
    const at::Tensor& r = result.toTensor();
    SG_CHECK(r.sizes() == out.sizes(), e.name, " returned shape ", r.sizes(),
             " but the graph expected ", out.sizes());
    out.copy_(r);
  } catch (const std::exception& ex) {
    ctx.fail(std::string("torch_fallback: ") + ex.what());
  }
}

c10::IValue constant_from_py(const py::handle& kind, const py::handle& value) {
  const auto k = kind.cast<std::string>();
  if (k == "none") return {};
  if (k == "int") return value.cast<std::int64_t>();
  if (k == "float") return value.cast<double>();
  if (k == "bool") return value.cast<bool>();
  if (k == "str") return value.cast<std::string>();
  if (k == "int_list") return value.cast<std::vector<std::int64_t>>();
  if (k == "float_list") return value.cast<std::vector<double>>();
  if (k == "bool_list") {
    c10::List<bool> list;
    for (const auto v : value.cast<py::sequence>()) list.push_back(v.cast<bool>());
    return list;
  }
  // ScalarType, MemoryFormat and Layout travel as their enum values, as in
  // TorchScript's boxed calls.
  if (k == "dtype" || k == "memory_format" || k == "layout") return value.cast<std::int64_t>();
  if (k == "device") return c10::Device(value.cast<std::string>());
  SG_CHECK(false, "torch_fallback: an argument of kind '", k, "' cannot be passed to libtorch");
  return {};
}

// Registers one call; returns its id.
std::int64_t register_call(const std::string& name, const std::string& overload,
                           const std::vector<std::pair<std::string, py::object>>& args,
                           int output_index, const std::string& dtype,
                           const std::vector<std::int64_t>& shape, bool inplace) {
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  SG_CHECK(handle.has_value(), "torch_fallback: libtorch has no operator ", name, ".", overload);
  Entry e{name + "." + overload, *handle, {}, output_index, {}, inplace};
  SG_CHECK(!inplace || (!args.empty() && args.front().first == "tensor"),
           "torch_fallback: in-place ", e.name, " must take a tensor first");
  for (const auto& [kind, value] : args) {
    Argument a;
    if (kind == "tensor") {
      a.tensor = value.cast<int>();
    } else if (kind == "tensor_list") {
      a.is_tensor_list = true;
      a.tensor_list = value.cast<std::vector<int>>();
    } else {
      a.constant = constant_from_py(py::str(kind), value);
    }
    e.args.push_back(std::move(a));
  }
  const auto d = parse_dtype(dtype);
  SG_CHECK(d.has_value(), "torch_fallback: unknown dtype ", dtype);
  e.meta.dtype = *d;
  for (const auto s : shape) e.meta.shape.push_back(SymInt(s));
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.entries.push_back(std::move(e));
  return static_cast<std::int64_t>(t.entries.size() - 1);
}

}  // namespace

void bind_torch_fallback(py::module_& m) {
  auto& registry = OpRegistry::instance();
  if (registry.find(kFallbackOp) == nullptr) {
    OpDef def;
    def.schema.name = kFallbackOp;
    def.schema.args = {{"inputs", ArgKind::tensor_list}, {"id", ArgKind::integer}};
    def.shape_fn = fallback_shape;
    registry.add(std::move(def));
    registry.set_kernel(kFallbackOp, DeviceType::cpu, fallback_kernel);
  }
  m.def("register_torch_fallback", &register_call, py::arg("name"), py::arg("overload"),
        py::arg("args"), py::arg("output_index"), py::arg("dtype"), py::arg("shape"),
        py::arg("inplace") = false,
        "Registers one libtorch call for a torch_fallback node; returns its id");
}

}  // namespace sinkgraph::python

// sinkgraph._C: the Python bindings the PyTorch front end is built on.
//
// Tensors cross without copies in both directions through DLPack (Note
// [Borrowed memory] in allocator.h); operators run through the one
// registry (run_op), so a converter calling _C.op while a graph is traced is
// recorded by the tracer exactly as C++ model code is; compiled graphs are
// the C++ CompiledFunction, whose trace calls back into Python once per
// guard set and whose replays run with the GIL released.
//
// Only this folder knows Python; only torch_fallback.cpp knows torch.
#include <ATen/dlpack.h>
#include <cstring>
#include <memory>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ir.h"
#include "sinkgraph/log.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"
#include "sinkgraph/version.h"
#include "torch_fallback.h"

namespace py = pybind11;
namespace sg = sinkgraph;

namespace {

// ---- DLPack ------------------------------------------------------------------

constexpr const char* kDltensor = "dltensor";
constexpr const char* kUsedDltensor = "used_dltensor";

sg::DType dtype_from_dl(const DLDataType& t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return sg::DType::f32;
    if (t.code == kDLFloat && t.bits == 16) return sg::DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return sg::DType::bf16;
    if (t.code == kDLInt && t.bits == 32) return sg::DType::i32;
    if (t.code == kDLInt && t.bits == 64) return sg::DType::i64;
  }
  SG_CHECK(false, "a tensor of DLPack type (code ", static_cast<int>(t.code), ", bits ",
           static_cast<int>(t.bits), ", lanes ", t.lanes,
           ") has no sinkgraph dtype; tensors cross as float32, float16, bfloat16, int32 or int64");
  return sg::DType::f32;
}

DLDataType dl_from_dtype(sg::DType d) {
  switch (d) {
    case sg::DType::f32:
      return {kDLFloat, 32, 1};
    case sg::DType::f16:
      return {kDLFloat, 16, 1};
    case sg::DType::bf16:
      return {kDLBfloat, 16, 1};
    case sg::DType::i32:
      return {kDLInt, 32, 1};
    case sg::DType::i64:
      return {kDLInt, 64, 1};
    case sg::DType::boolean:
      break;
  }
  SG_CHECK(false, "a bool tensor cannot cross to torch through DLPack 0.6 (torch 1.13)");
  return {kDLFloat, 32, 1};
}

// A torch tensor's memory as a sinkgraph tensor, without a copy. The
// DLManagedTensor (which holds a reference to the torch tensor) is released
// when the last sinkgraph storage viewing it dies.
sg::Tensor from_dlpack(py::capsule capsule) {
  SG_CHECK(std::strcmp(capsule.name(), kDltensor) == 0,
           "from_dlpack: the capsule was already consumed (or is not a DLPack tensor)");
  auto* managed = static_cast<DLManagedTensor*>(capsule.get_pointer());
  const DLTensor& t = managed->dl_tensor;
  SG_CHECK(t.device.device_type == kDLCPU,
           "from_dlpack: only CPU tensors cross to the sinkgraph CPU device (device type ",
           static_cast<int>(t.device.device_type), ")");
  SG_CHECK(t.ndim <= sg::kMaxDims, "from_dlpack: a tensor of ", t.ndim,
           " dimensions; sinkgraph tensors have at most ", sg::kMaxDims);
  const sg::DType dtype = dtype_from_dl(t.dtype);
  const auto elem = static_cast<std::int64_t>(sg::dtype_size(dtype));
  sg::Shape shape;
  sg::Strides strides;
  std::int64_t lo = 0;
  std::int64_t hi = 0;  // element extent, relative to the first element
  bool empty = false;
  for (int i = 0; i < t.ndim; ++i) {
    const std::int64_t size = t.shape[i];
    std::int64_t stride = 1;
    if (t.strides != nullptr) {
      stride = t.strides[i];
    } else {
      for (int j = i + 1; j < t.ndim; ++j) stride *= t.shape[j];
    }
    SG_CHECK(size >= 0, "from_dlpack: negative size");
    shape.push_back(size);
    strides.push_back(stride);
    if (size == 0) empty = true;
    if (size > 0) (stride >= 0 ? hi : lo) += (size - 1) * stride;
  }
  SG_CHECK(empty || lo == 0, "from_dlpack: negative strides are not supported");
  SG_CHECK(t.byte_offset % static_cast<std::uint64_t>(elem) == 0,
           "from_dlpack: byte offset not a multiple of the element size");
  auto* base = static_cast<char*>(t.data) + t.byte_offset;
  const auto bytes = static_cast<std::size_t>(empty ? 0 : (hi + 1) * elem);
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  capsule.set_name(kUsedDltensor);
  auto storage = std::make_shared<sg::Storage>(
      sg::cpu(), sg::DataPtr::borrow(base, bytes == 0 ? 1 : bytes, std::move(owner)));
  return {std::move(storage), dtype, shape, strides, 0};
}

struct ExportedTensor {
  sg::Tensor tensor;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
};

// A sinkgraph tensor's memory as a DLPack capsule for torch.from_dlpack: a
// view, kept alive by the capsule. The caller has waited for pending writes.
py::capsule to_dlpack(const sg::Tensor& t) {
  SG_CHECK(t.defined() && !t.is_traced(), "to_dlpack: a traced tensor has no values");
  auto* e = new ExportedTensor{t, {}, {}, {}};
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->managed.dl_tensor;
  d.data = static_cast<char*>(t.storage()->data()) +
           t.offset() * static_cast<std::int64_t>(sg::dtype_size(t.dtype()));
  d.device = {kDLCPU, 0};
  d.ndim = t.ndim();
  d.dtype = dl_from_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) {
    delete static_cast<ExportedTensor*>(m->manager_ctx);
  };
  return py::capsule(&e->managed, kDltensor, [](PyObject* cap) {
    // A capsule nobody consumed still owns the tensor.
    if (PyCapsule_IsValid(cap, kDltensor) != 0) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kDltensor));
      m->deleter(m);
    }
  });
}

// ---- operators -----------------------------------------------------------------

sg::ScalarValue scalar_from_py(const py::handle& h, const sg::ArgSpec& spec,
                               const std::string& op) {
  using sg::ArgKind;
  try {
    switch (spec.kind) {
      case ArgKind::integer:
        return sg::SymInt(h.cast<std::int64_t>());
      case ArgKind::real:
        return h.cast<double>();
      case ArgKind::boolean:
        return h.cast<bool>();
      case ArgKind::int_list: {
        std::vector<sg::SymInt> out;
        for (const auto v : h.cast<py::sequence>()) out.emplace_back(v.cast<std::int64_t>());
        return out;
      }
      case ArgKind::dtype: {
        const auto d = sg::parse_dtype(h.cast<std::string>());
        SG_CHECK(d.has_value(), op, ": argument '", spec.name, "': unknown dtype '",
                 h.cast<std::string>(), "'");
        return *d;
      }
      default:
        break;
    }
  } catch (const py::cast_error&) {
    SG_CHECK(false, op, ": argument '", spec.name, "' got ", py::str(h).cast<std::string>(),
             " of the wrong type");
  }
  SG_ASSERT(false, "not a scalar argument");
  return 0.0;
}

// Runs operator `name` on tensors and scalars in schema order: the one entry
// point of every converter.
sg::Tensor run_named_op(const std::string& name, const std::vector<sg::Tensor>& tensors,
                        const py::list& scalars) {
  const sg::OpDef& op = sg::OpRegistry::instance().get(name);
  std::vector<sg::ScalarValue> values;
  std::size_t k = 0;
  for (const auto& spec : op.schema.args) {
    if (spec.kind == sg::ArgKind::tensor || spec.kind == sg::ArgKind::tensor_list) continue;
    SG_CHECK(k < scalars.size(), name, ": missing argument '", spec.name, "'");
    values.push_back(scalar_from_py(scalars[k++], spec, name));
  }
  SG_CHECK(k == scalars.size(), name, ": ", scalars.size(), " scalar arguments; expected ", k);
  std::vector<const sg::Tensor*> ptrs;
  ptrs.reserve(tensors.size());
  for (const auto& t : tensors) ptrs.push_back(&t);
  return sg::run_op(op, ptrs, values);
}

py::tuple shape_of(const sg::Tensor& t) {
  const sg::SymShape s = t.sym_shape();
  py::tuple out(s.size());
  for (int i = 0; i < s.size(); ++i) {
    const auto v = s[i].maybe_value();
    SG_CHECK(v.has_value(), "tensor ", t.str(), " has a symbolic dimension ", s[i].str());
    out[static_cast<std::size_t>(i)] = *v;
  }
  return out;
}

// ---- compiled graphs -----------------------------------------------------------

sg::CompilerConfig config_from(const std::vector<std::pair<std::string, std::string>>& options) {
  sg::CompilerConfig c;
  for (const auto& [name, value] : options) c.set(name, value);
  return c;
}

py::dict counters_dict(const sg::GraphCounters& c) {
  py::dict d;
  d["captured"] = c.captured;
  d["replayed"] = c.replayed;
  d["recapture_due_to_mutated_input_change"] = c.recapture_due_to_mutated_input_change;
  d["recapture_due_to_parameter_change"] = c.recapture_due_to_parameter_change;
  d["recapture_due_to_force_recapture"] = c.recapture_due_to_force_recapture;
  d["eager_fallback_due_to_capture_limit"] = c.eager_fallback_due_to_capture_limit;
  d["pool_reserved_bytes"] = c.pool_reserved_bytes;
  return d;
}

class CompiledGraph {
 public:
  CompiledGraph(py::function fn, const std::vector<std::pair<std::string, std::string>>& options,
                const std::string& name, std::vector<std::string> arg_names,
                std::vector<int> param_args) {
    sg::TraceOptions trace;
    trace.graph_name = name;
    trace.arg_names = std::move(arg_names);
    trace.param_args = std::move(param_args);
    // The trace runs Python converters: hold the GIL only while they run.
    auto holder = std::make_shared<py::function>(std::move(fn));
    sg::TracedFn traced = [holder](std::span<const sg::Arg> args) {
      py::gil_scoped_acquire gil;
      py::list list;
      for (const auto& a : args) list.append(py::cast(std::get<sg::Tensor>(a)));
      return (*holder)(list).cast<std::vector<sg::Tensor>>();
    };
    fn_ = sg::compile(std::move(traced), sg::get_backend(config_from(options)), std::move(trace));
    holder_ = std::move(holder);
  }
  ~CompiledGraph() {
    // The Python function may only be released with the GIL held.
    fn_.reset();
  }
  CompiledGraph(const CompiledGraph&) = delete;
  CompiledGraph& operator=(const CompiledGraph&) = delete;

  std::vector<sg::Tensor> call(const std::vector<sg::Tensor>& tensors) {
    std::vector<sg::Arg> args(tensors.begin(), tensors.end());
    std::vector<sg::Tensor> out;
    {
      py::gil_scoped_release release;
      out = (*fn_)(args);
      // torch reads results straight from memory, not through sinkgraph's
      // host reads, and the caller's tensors may die once we return: wait.
      sg::current_stream().synchronize();
    }
    return out;
  }

  [[nodiscard]] std::string explain() const { return fn_->explain(false); }
  [[nodiscard]] py::dict counters() const { return counters_dict(fn_->counters()); }
  [[nodiscard]] std::size_t num_graphs() const { return fn_->num_graphs(); }
  // The compiled IR of guard set i (after the passes), as text.
  [[nodiscard]] std::string graph_text(std::size_t i) const {
    SG_CHECK(i < fn_->num_graphs(), "graph_text: ", i, " of ", fn_->num_graphs(), " graphs");
    return sg::ir::print(fn_->graph(i));
  }
  void reset() { fn_->reset(); }

 private:
  std::shared_ptr<sg::CompiledFunction> fn_;
  std::shared_ptr<py::function> holder_;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "sinkgraph's C++ runtime, as the PyTorch front end uses it";
  static py::exception<sg::Error> error(m, "Error", PyExc_RuntimeError);
  // pybind11 takes a plain function pointer of this exact signature.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const sg::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const sg::InternalError& e) {
      PyErr_SetString(PyExc_AssertionError, e.what());
    }
  });

  py::class_<sg::Tensor>(m, "Tensor")
      .def_property_readonly("shape", &shape_of)
      .def_property_readonly(
          "dtype", [](const sg::Tensor& t) { return std::string(sg::dtype_name(t.dtype())); })
      .def_property_readonly("ndim", &sg::Tensor::ndim)
      .def_property_readonly("is_traced", &sg::Tensor::is_traced)
      .def("is_contiguous", &sg::Tensor::is_contiguous)
      .def("__repr__", [](const sg::Tensor& t) { return "sinkgraph.Tensor(" + t.str() + ")"; });

  m.def("version", [] { return std::string(sg::version()); });
  m.def(
      "set_log_level",
      [](const std::string& name) { sg::set_log_level(sg::parse_log_level(name)); },
      py::arg("level"), "error, warn, info or debug (as SINKGRAPH_LOG)");
  m.def("log_level", [] { return std::string(sg::log_level_name(sg::log_level())); });

  m.def("from_dlpack", &from_dlpack, "A torch tensor's memory (a DLPack capsule), not copied");
  m.def("to_dlpack", &to_dlpack, "A DLPack capsule viewing the tensor's memory");
  m.def("op", &run_named_op, py::arg("name"), py::arg("tensors"), py::arg("scalars"),
        "Runs (or, while tracing, records) a registered operator");
  m.def("op_names", [] { return sg::OpRegistry::instance().names(); });
  m.def("has_op",
        [](const std::string& n) { return sg::OpRegistry::instance().find(n) != nullptr; });
  m.def("synchronize", [] {
    py::gil_scoped_release release;
    sg::current_stream().synchronize();
  });

  m.def("config_options", [] {
    const sg::CompilerConfig defaults;
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& name : sg::CompilerConfig::option_names()) {
      out.emplace_back(name, defaults.get(name));
    }
    return out;
  });
  m.def("check_option", [](const std::string& name, const std::string& value) {
    sg::CompilerConfig c;
    c.set(name, value);
    return c.get(name);
  });
  m.def("pipeline", [](const std::vector<std::pair<std::string, std::string>>& options) {
    return sg::GraphCompiler(config_from(options)).pipeline();
  });

  py::class_<CompiledGraph>(m, "CompiledGraph")
      .def(py::init<py::function, const std::vector<std::pair<std::string, std::string>>&,
                    const std::string&, std::vector<std::string>, std::vector<int>>(),
           py::arg("fn"), py::arg("options"), py::arg("name"), py::arg("arg_names"),
           py::arg("param_args"))
      .def("__call__", &CompiledGraph::call)
      .def("explain", &CompiledGraph::explain)
      .def("counters", &CompiledGraph::counters)
      .def("num_graphs", &CompiledGraph::num_graphs)
      .def("graph_text", &CompiledGraph::graph_text)
      .def("reset", &CompiledGraph::reset);

  sinkgraph::python::bind_torch_fallback(m);
}

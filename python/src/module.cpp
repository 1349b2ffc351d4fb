// sinkgraph._C: the Python bindings the PyTorch front end is built on.
//
// Tensors cross without copies in both directions through DLPack (Note
// [Borrowed memory] in allocator.h); operators run through the one
// registry (run_op), so a converter calling _C.op while a graph is traced is
// recorded by the tracer exactly as C++ model code is; compiled graphs are
// the C++ CompiledFunction, whose trace calls back into Python once per
// guard set and whose replays run with the GIL released.
//
// Only this folder knows Python, and nothing here knows torch: what needs
// torch stays in the Python package.
#include <cstring>
#include <memory>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include "dlpack.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/ir.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/log.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"
#include "sinkgraph/tokenizer.h"
#include "sinkgraph/version.h"

namespace py = pybind11;
namespace sg = sinkgraph;

namespace {

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

// Note [Torch arguments in one call]
// A region's call used to convert its arguments in Python, one by one: a
// cached parameter checked for identity, address and version, a user tensor
// through DLPack, then each output back. At about 0.3 us of interpreter time
// per argument that was most of a small module's call (the nn.Linear of
// bench/python_call.py's fixed-cost part has 3 arguments; a transformer
// layer 13). call_torch() does it here, in one crossing: torch stays in
// Python, reached only through the callables bind_torch() was given
// (torch.Tensor, to_dlpack, from_dlpack) and the tensors' own data_ptr() and
// _version. A parameter's sinkgraph tensor is cached per argument slot and
// reused while the same tensor object arrives at the same address; its
// version is compared only under frozen_parameter (where a write must raise).
struct TorchHooks {
  py::object tensor_type;  // torch.Tensor
  py::object to_dlpack;    // torch tensor -> capsule
  py::object from_dlpack;  // capsule -> torch tensor
};

struct ParamSlot {
  py::object tensor;  // the torch tensor last bound here (held: its id stays unique)
  std::uintptr_t address = 0;
  std::int64_t version = 0;
  sg::Tensor bound;
};

std::int64_t int_attr(const py::handle& obj, PyObject* name) {
  auto v = py::reinterpret_steal<py::object>(PyObject_GetAttr(obj.ptr(), name));
  if (!v) throw py::error_already_set();
  return v.cast<std::int64_t>();
}

std::uintptr_t data_address(const py::handle& tensor) {
  static PyObject* name = PyUnicode_InternFromString("data_ptr");
  auto v = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(tensor.ptr(), name));
  if (!v) throw py::error_already_set();
  return v.cast<std::uintptr_t>();
}

std::int64_t tensor_version(const py::handle& tensor) {
  static PyObject* name = PyUnicode_InternFromString("_version");
  return int_attr(tensor, name);
}

class CompiledGraph {
 public:
  CompiledGraph(py::function fn, const std::vector<std::pair<std::string, std::string>>& options,
                const std::string& name, std::vector<std::string> arg_names,
                std::vector<int> param_args)
      : name_(name), frozen_(config_from(options).frozen_parameter) {
    for (const int i : param_args) {
      if (i >= static_cast<int>(is_param_.size()))
        is_param_.resize(static_cast<std::size_t>(i) + 1);
      is_param_[static_cast<std::size_t>(i)] = true;
    }
    slots_.resize(is_param_.size());
    sg::TraceOptions trace;
    trace.graph_name = name;
    trace.arg_names = std::move(arg_names);
    trace.param_args = std::move(param_args);
    // The trace runs Python converters: hold the GIL only while they run.
    auto holder = std::make_shared<py::function>(std::move(fn));
    sg::TracedFn traced = [holder](std::span<const sg::Arg> args) {
      py::gil_scoped_acquire gil;
      py::list list;
      for (const auto& a : args) {
        if (const auto* t = std::get_if<sg::Tensor>(&a)) {
          list.append(py::cast(*t));
        } else if (const auto* i = std::get_if<std::int64_t>(&a)) {
          list.append(*i);  // an integer input: specialized and guarded by the tracer
        } else {
          const auto v = std::get<sg::SymInt>(a).maybe_value();
          SG_CHECK(v.has_value(), "a symbolic integer argument reached the converters");
          list.append(*v);
        }
      }
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

  // Arguments are sinkgraph tensors or Python integers (Dynamo's SymInt
  // inputs arrive as ints; each value is its own guard set).
  std::vector<sg::Tensor> call(const py::list& values) {
    std::vector<sg::Arg> args;
    args.reserve(values.size());
    for (const auto& v : values) {
      if (py::isinstance<sg::Tensor>(v)) {
        args.emplace_back(v.cast<sg::Tensor>());
      } else {
        SG_CHECK(py::isinstance<py::int_>(v), "a compiled graph's argument ", args.size(), " is ",
                 py::str(py::type::of(v)).cast<std::string>(), "; expected a tensor or an integer");
        args.emplace_back(v.cast<std::int64_t>());
      }
    }
    std::vector<sg::Tensor> out;
    {
      py::gil_scoped_release release;
      // torch reads results straight from memory, not through sinkgraph's
      // host reads, and the caller's tensors may die once we return: the
      // call waits for its work (Note [Replays on the caller]).
      out = fn_->call(args, {.wait = true});
    }
    return out;
  }

  void bind_torch(py::object tensor_type, py::object to_dlpack, py::object from_dlpack) {
    hooks_ = {std::move(tensor_type), std::move(to_dlpack), std::move(from_dlpack)};
  }

  // Note [Arguments by plan]
  // When a region is the whole of an ATen graph but for the constants folded
  // at compile time (fold_constants: a Llama's decode step holds 15), the FX
  // module around it only fetched those constants and reordered the graph's
  // inputs into the region's arguments, for about 35 us of interpreter time
  // per call, and each constant crossed by DLPack on every call. A plan
  // instead says, per region argument, where it comes from: an index into the
  // graph's inputs, or a constant, bound here once (the graph holds it, so its
  // memory never moves). call_torch() then takes the graph's inputs as
  // AOTAutograd passes them.
  void set_plan(const py::list& plan) {
    SG_CHECK(hooks_.tensor_type, "region @", name_, ": bind_torch() was not called");
    std::vector<std::int64_t> sources;
    std::vector<ParamSlot> constants;
    for (const py::handle item : plan) {
      if (PyLong_Check(item.ptr()) != 0) {
        const auto index = item.cast<std::int64_t>();
        SG_CHECK(index >= 0, "region @", name_, ": plan index ", index, " is negative");
        sources.push_back(index);
        continue;
      }
      SG_CHECK(PyObject_IsInstance(item.ptr(), hooks_.tensor_type.ptr()) == 1, "region @", name_,
               ": a plan item is a ", py::type::of(item).attr("__name__").cast<std::string>(),
               "; expected an input index or a constant tensor");
      ParamSlot slot;
      slot.tensor = py::reinterpret_borrow<py::object>(item);
      slot.bound = sg::python::from_dlpack(hooks_.to_dlpack(item));
      constants.push_back(std::move(slot));
      sources.push_back(-static_cast<std::int64_t>(constants.size()));  // -1 - constant index
    }
    plan_ = std::move(sources);
    constants_ = std::move(constants);
  }

  // Note [Torch arguments in one call]: torch tensors and integers in, the
  // tensor outputs out as torch tensors. With a plan (Note [Arguments by
  // plan]), `values` are the graph's inputs and the plan picks the region's.
  py::list call_torch(const py::sequence& values) {
    SG_CHECK(hooks_.tensor_type, "region @", name_, ": bind_torch() was not called");
    std::vector<sg::Arg> args;
    const auto given = static_cast<std::size_t>(py::len(values));
    const std::size_t n = plan_.empty() ? given : plan_.size();
    args.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t from = i;
      if (!plan_.empty()) {
        const std::int64_t source = plan_[i];
        if (source < 0) {
          args.emplace_back(constants_[static_cast<std::size_t>(-1 - source)].bound);
          continue;
        }
        from = static_cast<std::size_t>(source);
        SG_CHECK(from < given, "region @", name_, ": called with ", given,
                 " inputs; its plan reads input ", from);
      }
      const py::handle v = values[from];
      if (PyObject_IsInstance(v.ptr(), hooks_.tensor_type.ptr()) == 1) {
        if (i < is_param_.size() && is_param_[i]) {
          args.emplace_back(param(i, v));
        } else {
          args.emplace_back(sg::python::from_dlpack(hooks_.to_dlpack(v)));
        }
      } else if (PyLong_Check(v.ptr()) != 0) {  // bool included, as int(a) took it
        args.emplace_back(v.cast<std::int64_t>());
      } else {
        SG_CHECK(false, "region @", name_, ": argument ", i, " is a ",
                 py::type::of(v).attr("__name__").cast<std::string>(),
                 "; expected a tensor or an integer");
      }
    }
    std::vector<sg::Tensor> out;
    {
      py::gil_scoped_release release;
      out = fn_->call(args, {.wait = true});
    }
    py::list result(out.size());
    for (std::size_t k = 0; k < out.size(); ++k) {
      result[k] = hooks_.from_dlpack(sg::python::to_dlpack(out[k]));
    }
    return result;
  }

  [[nodiscard]] std::string explain() const { return fn_->explain(false); }
  [[nodiscard]] py::dict counters() const { return counters_dict(fn_->counters()); }
  [[nodiscard]] std::size_t num_graphs() const { return fn_->num_graphs(); }
  [[nodiscard]] std::int64_t eager_calls() const { return fn_->eager_calls(); }
  // The compiled IR of guard set i (after the passes), as text.
  [[nodiscard]] std::string graph_text(std::size_t i) const {
    SG_CHECK(i < fn_->num_graphs(), "graph_text: ", i, " of ", fn_->num_graphs(), " graphs");
    return sg::ir::print(fn_->graph(i));
  }
  void reset() { fn_->reset(); }

 private:
  // Argument slot i's parameter as a sinkgraph tensor (Note [Torch arguments
  // in one call]).
  const sg::Tensor& param(std::size_t i, const py::handle& tensor) {
    ParamSlot& slot = slots_[i];
    const std::uintptr_t address = data_address(tensor);
    if (slot.tensor.ptr() == tensor.ptr() && slot.address == address) {
      SG_CHECK(!frozen_ || tensor_version(tensor) == slot.version, "region @", name_,
               ": parameter ", i,
               " was written in place after it was frozen (frozen_parameter=True promises "
               "parameters never change); set frozen_parameter=False to update weights");
      return slot.bound;
    }
    slot.bound = sg::python::from_dlpack(hooks_.to_dlpack(tensor));
    slot.tensor = py::reinterpret_borrow<py::object>(tensor);
    slot.address = address;
    slot.version = frozen_ ? tensor_version(tensor) : 0;
    return slot.bound;
  }

  std::string name_;
  bool frozen_ = false;
  std::vector<bool> is_param_;  // by argument index
  std::vector<ParamSlot> slots_;
  std::vector<std::int64_t> plan_;    // Note [Arguments by plan]; empty: values in order
  std::vector<ParamSlot> constants_;  // the plan's constants, bound once
  TorchHooks hooks_;
  std::shared_ptr<sg::CompiledFunction> fn_;
  std::shared_ptr<py::function> holder_;
};

// ---- generation -----------------------------------------------------------------

std::unique_ptr<sg::Generator> make_generator(const std::string& model, const std::string& mode,
                                              std::int64_t max_batch,
                                              std::vector<std::int64_t> capture_sizes,
                                              std::int64_t graph_memory_budget,
                                              const std::string& quantize) {
  SG_CHECK(quantize.empty() || quantize == "q8_0" || quantize == "q4_0",
           "Generator: quantize must be \"q8_0\", \"q4_0\" or None, got \"", quantize, "\"");
  sg::GeneratorConfig config;
  config.mode = sg::parse_mode(mode);
  config.max_batch = max_batch;
  if (!capture_sizes.empty()) config.capture_sizes = std::move(capture_sizes);
  config.graph_memory_budget = graph_memory_budget;
  py::gil_scoped_release release;
  sg::models::LlamaModel m = model == "builtin"
                                 ? sg::models::random_model(sg::models::builtin_config(), 0)
                                 : sg::models::load_model(model);
  if (!quantize.empty()) {
    m = sg::models::quantize_model(
        m, quantize == "q8_0" ? sg::ops::QuantFormat::q8_0 : sg::ops::QuantFormat::q4_0);
  }
  return std::make_unique<sg::Generator>(std::move(m), std::move(config));
}

// A Python callable as the loop's callback: called with the GIL held; a
// Python exception (or a pending Ctrl-C) ends the call with it.
template <typename... Args>
std::function<void(Args...)> callback(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  return [fn](Args... args) {
    py::gil_scoped_acquire hold;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    fn(args...);
  };
}

// (ids, stats JSON, explain report).
py::tuple generate_one(sg::Generator& g, std::vector<std::int64_t> prompt, std::int64_t steps,
                       double temperature, std::uint64_t seed, std::vector<std::int64_t> stop_ids,
                       const py::object& on_token, bool keep_logits) {
  sg::GenerateOptions o;
  o.prompt = std::move(prompt);
  o.steps = steps;
  o.temperature = temperature;
  o.seed = seed;
  o.stop_ids = std::move(stop_ids);
  o.on_token = callback<std::int64_t>(on_token);
  o.keep_logits = keep_logits;
  sg::GenerateResult r;
  {
    py::gil_scoped_release release;
    r = g.generate(o);
  }
  py::object logits = py::none();
  if (keep_logits) {
    const auto vocab = static_cast<py::ssize_t>(g.model().config().vocab_size);
    const auto rows = static_cast<py::ssize_t>(r.logits.size()) / vocab;
    py::array_t<float> a({rows, vocab});
    std::memcpy(a.mutable_data(), r.logits.data(), r.logits.size() * sizeof(float));
    logits = std::move(a);
  }
  return py::make_tuple(r.ids, r.stats_json(), r.explain, logits);
}

py::tuple generate_many(sg::Generator& g, std::vector<std::vector<std::int64_t>> prompts,
                        std::int64_t steps, double temperature, std::uint64_t seed,
                        std::vector<std::int64_t> stop_ids, const py::object& on_token) {
  sg::BatchOptions o;
  o.prompts = std::move(prompts);
  o.steps = steps;
  o.temperature = temperature;
  o.seed = seed;
  o.stop_ids = std::move(stop_ids);
  o.on_token = callback<std::size_t, std::int64_t>(on_token);
  sg::BatchResult r;
  {
    py::gil_scoped_release release;
    r = g.generate_batch(o);
  }
  return py::make_tuple(r.ids, r.stats_json(), r.explain);
}

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
  m.def(
      "convert_checkpoint",
      [](const std::string& src, const std::string& dst, const std::string& format,
         const std::string& dtype) {
        py::gil_scoped_release release;
        const sg::models::LlamaModel model = sg::models::load_model(src);
        const bool quantized = dtype == "q8_0" || dtype == "q4_0";
        if (format == "gguf") {
          const auto type = dtype == "q8_0"   ? sg::models::GgufType::q8_0
                            : dtype == "q4_0" ? sg::models::GgufType::q4_0
                            : dtype == "f16"  ? sg::models::GgufType::f16
                            : dtype == "bf16" ? sg::models::GgufType::bf16
                                              : sg::models::GgufType::f32;
          SG_CHECK(quantized || sg::parse_dtype(dtype).has_value(), "convert_checkpoint: dtype ",
                   dtype, " is not f32, f16, bf16, q8_0 or q4_0");
          sg::models::save_gguf(model, dst, type);
          return;
        }
        SG_CHECK(!quantized, "convert_checkpoint: dtype ", dtype, " needs format \"gguf\"");
        const auto d = sg::parse_dtype(dtype);
        SG_CHECK(d.has_value(), "convert_checkpoint: dtype ", dtype, " is not f32, f16 or bf16");
        const auto f = format == "llama2c"       ? sg::models::CheckpointFormat::llama2c
                       : format == "safetensors" ? sg::models::CheckpointFormat::safetensors
                       : format == "hf"          ? sg::models::CheckpointFormat::hf
                                                 : sg::models::CheckpointFormat::gguf;
        SG_CHECK(f != sg::models::CheckpointFormat::gguf, "convert_checkpoint: format ", format,
                 " is not llama2c, safetensors, hf or gguf");
        sg::models::save_model(model, dst, f, *d);
      },
      py::arg("src"), py::arg("dst"), py::arg("format"), py::arg("dtype"));
  m.def("set_num_threads", &sg::set_num_threads, py::arg("threads"));
  m.def("num_threads", &sg::num_threads);
  m.def("set_use_onednn", &sg::ops::set_use_onednn, py::arg("use"));
  m.def("use_onednn", &sg::ops::use_onednn);
  m.def("onednn_built", &sg::ops::onednn_built);
  m.def("onednn_conv_calls", &sg::ops::onednn_conv_calls);
  m.def("onednn_matmul_calls", &sg::ops::onednn_matmul_calls);

  m.def("from_dlpack", &sinkgraph::python::from_dlpack,
        "A torch tensor's memory (a DLPack capsule), not copied");
  m.def(
      "to_dlpack",
      [](const sg::Tensor& t) {
        // A host read (Tensor::to_floats): the replay that wrote t, then the
        // current stream's queued kernels, finish before the view is handed
        // out, so torch never reads a value still being written.
        SG_CHECK(t.defined() && !t.is_traced(), "to_dlpack: a traced tensor has no values");
        {
          const py::gil_scoped_release release;
          sg::ReplayFence writer;
          sg::PoolUses use;
          use.add(t.begin_output_use("to_dlpack", &writer));
          writer.wait();
          sg::current_stream(t.device()).synchronize();
        }
        return sinkgraph::python::to_dlpack(t);
      },
      "A DLPack capsule viewing the tensor's memory, once its writes are done");
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

  // Generation (include/sinkgraph/generate.h): python/sinkgraph/generation.py
  // wraps these. The loop runs with the GIL released; a streaming callback
  // takes it back for each id, and a Ctrl-C seen there ends the call.
  py::class_<sg::Generator>(m, "Generator")
      .def(py::init(&make_generator), py::arg("model"), py::arg("mode"), py::arg("max_batch"),
           py::arg("capture_sizes"), py::arg("graph_memory_budget"), py::arg("quantize"))
      .def("generate", &generate_one, py::arg("prompt"), py::arg("steps"), py::arg("temperature"),
           py::arg("seed"), py::arg("stop_ids"), py::arg("on_token"), py::arg("keep_logits"))
      .def("generate_batch", &generate_many, py::arg("prompts"), py::arg("steps"),
           py::arg("temperature"), py::arg("seed"), py::arg("stop_ids"), py::arg("on_token"))
      .def("model_config", [](const sg::Generator& g) { return g.model().config().str(); })
      .def("mode",
           [](const sg::Generator& g) { return std::string(sg::mode_name(g.config().mode)); });

  py::class_<CompiledGraph>(m, "CompiledGraph")
      .def(py::init<py::function, const std::vector<std::pair<std::string, std::string>>&,
                    const std::string&, std::vector<std::string>, std::vector<int>>(),
           py::arg("fn"), py::arg("options"), py::arg("name"), py::arg("arg_names"),
           py::arg("param_args"))
      .def("__call__", &CompiledGraph::call)
      .def("bind_torch", &CompiledGraph::bind_torch, py::arg("tensor_type"), py::arg("to_dlpack"),
           py::arg("from_dlpack"))
      .def("call_torch", &CompiledGraph::call_torch)
      .def("set_plan", &CompiledGraph::set_plan, py::arg("plan"))
      .def("explain", &CompiledGraph::explain)
      .def("counters", &CompiledGraph::counters)
      .def("num_graphs", &CompiledGraph::num_graphs)
      .def("eager_calls", &CompiledGraph::eager_calls)
      .def("graph_text", &CompiledGraph::graph_text)
      .def("reset", &CompiledGraph::reset);

  // Tokenizers (include/sinkgraph/tokenizer.h); text crosses as str (UTF-8).
  using sg::models::Tokenizer;
  py::class_<Tokenizer>(m, "Tokenizer")
      .def_static(
          "from_vocabulary",
          [](const std::string& kind, std::vector<std::string> tokens, std::vector<float> scores,
             std::vector<std::int32_t> types, std::vector<std::string> merges, std::int64_t bos,
             std::int64_t eos, std::int64_t unk, bool add_bos, bool add_space_prefix,
             const std::string& pre) {
            sg::models::Vocabulary v;
            SG_CHECK(kind == "sentencepiece" || kind == "bpe", "Tokenizer.from_vocabulary: kind \"",
                     kind, "\" is not sentencepiece or bpe");
            v.kind = kind == "bpe" ? sg::models::Vocabulary::Kind::bpe
                                   : sg::models::Vocabulary::Kind::sentencepiece;
            v.tokens = std::move(tokens);
            v.scores = std::move(scores);
            v.token_types = std::move(types);
            v.merges = std::move(merges);
            v.bos = bos;
            v.eos = eos;
            v.unk = unk;
            v.add_bos = add_bos;
            v.add_space_prefix = add_space_prefix;
            v.pre = pre;
            return Tokenizer::from_vocabulary(std::move(v), "vocabulary");
          },
          py::arg("kind"), py::arg("tokens"), py::arg("scores") = std::vector<float>{},
          py::arg("types") = std::vector<std::int32_t>{},
          py::arg("merges") = std::vector<std::string>{}, py::arg("bos") = -1, py::arg("eos") = -1,
          py::arg("unk") = -1, py::arg("add_bos") = true, py::arg("add_space_prefix") = true,
          py::arg("pre") = "default")
      .def_static("from_hf_json", &Tokenizer::from_hf_json, py::arg("json"),
                  py::arg("source") = "tokenizer.json")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text, bool add_bos, bool parse_special) {
            return t.encode(text, add_bos, parse_special);
          },
          py::arg("text"), py::arg("add_bos") = false, py::arg("parse_special") = false)
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<std::int64_t>& ids) {
            const std::string s = t.decode(ids);
            // A sequence cut inside a character: U+FFFD, as the references print it.
            return py::reinterpret_steal<py::str>(
                PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
          },
          py::arg("ids"))
      .def(
          "decode_bytes",
          [](const Tokenizer& t, const std::vector<std::int64_t>& ids) {
            return py::bytes(t.decode(ids));
          },
          py::arg("ids"))
      .def(
          "piece", [](const Tokenizer& t, std::int64_t id) { return py::bytes(t.piece(id)); },
          py::arg("id"))
      .def("token_text", &Tokenizer::token_text, py::arg("id"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos", &Tokenizer::bos)
      .def_property_readonly("eos", &Tokenizer::eos)
      .def_property_readonly("unk", &Tokenizer::unk);
}

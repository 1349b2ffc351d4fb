#pragma once
// trace(): runs ordinary model code (written against Tensor, SymInt and ops::)
// on traced tensors and records an IR Graph, with the guards it assumed.
// This is our Dynamo: no bytecode, just the dispatcher's interceptor hook.
//
// Note [What becomes what while tracing]
//  - a Tensor argument         -> an `input` (a `mutated` input if an in-place
//                                 operator writes it); dims listed in
//                                 TraceOptions::dynamic_dims become symbols
//  - a SymInt argument         -> a `sym` input: one graph for every value
//  - an int64 argument         -> specialized: the code sees the plain value,
//                                 and a guard re-traces when it changes
//  - any other tensor the code uses (weights in a model object) -> a `param`
//  - reading a traced tensor's values on the host -> an error: the function
//                                 must trace as one graph
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "sinkgraph/export.h"
#include "sinkgraph/ir.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph {

using Arg = std::variant<Tensor, SymInt, std::int64_t>;
using TracedFn = std::function<std::vector<Tensor>(std::span<const Arg> args)>;

// Re-expresses one operator with others (TorchAir's custom_decompositions):
// called with the operator's tensors and scalars in schema order.
using Decomposition =
    std::function<Tensor(std::span<const Tensor> tensors, std::span<const ScalarValue> scalars)>;
using Decompositions = std::map<std::string, Decomposition>;

// The parameters a model reads, by name, as the tensors it holds them in
// (`module.named_parameters()`): see TraceOptions::parameters.
using NamedTensors = std::vector<std::pair<std::string, const Tensor*>>;

struct TraceOptions {
  std::string graph_name = "main";
  // Where the model keeps its parameters. Like Dynamo's guards on module
  // attributes, every lifted param read through one of these tensors is
  // guarded on that tensor: reassigning it (`model.wq = other`) re-traces
  // instead of replaying the old weights. The tensors must outlive the
  // compiled function. compile() fills it from a model's named_parameters().
  std::function<NamedTensors()> parameters;
  // Names of the arguments (defaults: a0, a1, ...); sym inputs bind these names.
  std::vector<std::string> arg_names;
  // Tensor arguments that are the model's parameters and buffers, passed in
  // by the caller (the PyTorch front end passes them as AOTAutograd does):
  // traced as `param` graph inputs bound to the call's argument, so captured
  // graphs read them in place and key on their addresses (a replaced
  // parameter re-captures, counted as recapture_due_to_parameter_change).
  std::vector<int> param_args;
  // For each argument index, the dims that are dynamic (become symbols s0, s1, ...).
  std::map<int, std::vector<int>> dynamic_dims;
  Decompositions decompositions;
  // Names what the function computes, for the saved graphs (Note [Saved
  // graphs] in src/compiler/saved_graphs.cpp): when set, the compiled function
  // keeps its post-pass graphs and guards in the compile cache folder
  // (CompilerConfig::cache_dir), in a file named by this key, the graph name,
  // the options that shape the graph and sinkgraph's version, so a later
  // process skips tracing and the passes. The file cannot see the function's
  // code: change the key whenever the code changes. Params are found again by
  // name through `parameters`.
  std::string cache_key;
};

// What a traced graph assumed about its arguments.
struct ArgGuard {
  enum class Kind : std::uint8_t { tensor, sym, integer };
  Kind kind = Kind::tensor;
  DType dtype = DType::f32;
  DeviceType device = DeviceType::cpu;
  std::vector<std::int64_t> dims;  // -1: dynamic
  std::int64_t value = 0;          // integer: the specialized value
  // Layout: traced as contiguous or not; a non-contiguous tensor of static
  // shape also guards its exact strides.
  bool contiguous = true;
  std::vector<std::int64_t> strides;
  // Aliasing with the first earlier argument that shares its storage.
  enum class Alias : std::uint8_t { none, same, disjoint };
  Alias alias = Alias::none;
  int alias_of = -1;
};

// A param read through a tensor the model listed (TraceOptions::parameters):
// the call must still find that tensor viewing the same memory.
struct ParamGuard {
  std::string name;
  int param = -1;  // index into TracedGraph::params
  const Tensor* handle = nullptr;
  const void* storage = nullptr;
  std::int64_t offset = 0;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape, strides;
};

struct SG_API Guards {
  std::vector<ArgGuard> args;
  std::vector<ParamGuard> params;
  // True when `args` satisfy every guard; otherwise `why` says which failed.
  bool check(std::span<const Arg> call_args, std::string* why = nullptr) const;
  [[nodiscard]] std::string str() const;
};

// Where each graph input's value comes from at call time.
struct InputBinding {
  enum class Source : std::uint8_t { arg, param };
  Source source = Source::arg;
  int index = 0;  // into the call's args, or into TracedGraph::params
};

struct TracedGraph {
  std::unique_ptr<ir::Graph> graph;
  std::vector<Tensor> params;          // lifted tensors, in order of first use
  std::vector<InputBinding> bindings;  // one per graph input
  // The example tensors of TraceOptions::param_args, by graph input name: the
  // values frozen_parameter's constant folding reads.
  std::map<std::string, Tensor> param_arg_examples;
  Guards guards;
  // Graph inputs for one call (args and params), in the graph's input order.
  [[nodiscard]] SG_API std::vector<ir::RtValue> graph_inputs(std::span<const Arg> args) const;
};

SG_API TracedGraph trace(const TracedFn& fn, std::span<const Arg> example_args,
                         const TraceOptions& options = {});

}  // namespace sinkgraph

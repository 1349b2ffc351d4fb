// GraphCompiler: passes chosen by mode, then a concrete graph.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "captured_graph.h"
#include "data_dump.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"

namespace sinkgraph {

namespace {

class EagerGraph final : public ConcreteGraph {
 public:
  EagerGraph(std::unique_ptr<ir::Graph> graph, std::vector<std::string> notes,
             std::string data_dump)
      : graph_(std::move(graph)), notes_(std::move(notes)), data_dump_(std::move(data_dump)) {}

  std::vector<ir::RtValue> run(std::span<const ir::RtValue> inputs,
                               const CallOptions& /*options*/) override {
    ++runs_;
    if (data_dump_.empty() || dumped_) return ir::interpret(*graph_, inputs);
    dumped_ = true;
    return detail::interpret_and_dump(*graph_, inputs, data_dump_);
  }
  [[nodiscard]] std::string kind() const override { return "EagerGraph"; }
  [[nodiscard]] const ir::Graph& graph() const override { return *graph_; }
  [[nodiscard]] std::string explain() const override {
    std::string out = "EagerGraph: interprets " + std::to_string(graph_->nodes().size()) +
                      " nodes through the eager dispatcher; run " + std::to_string(runs_) +
                      " times\n";
    for (const auto& note : notes_) out += "  note: " + note + "\n";
    return out;
  }

 private:
  std::unique_ptr<ir::Graph> graph_;
  std::vector<std::string> notes_;
  std::string data_dump_;
  std::int64_t runs_ = 0;
  bool dumped_ = false;
};

}  // namespace

std::vector<std::string> GraphCompiler::pipeline() const {
  std::vector<std::string> out;
  for (const auto& p : config_.pre_passes) out.push_back(p.name);
  if (!config_.force_eager && config_.mode != Mode::eager) {
    out.emplace_back("dce");
    out.emplace_back("cse");
    // Its rewritten weights are params only: constant folding evaluates them
    // once under frozen_parameter (Note [Folding a batch norm per call]).
    if (config_.mode == Mode::max_autotune) out.emplace_back("fold_conv_batch_norm");
    out.emplace_back("constant_folding");
    if (config_.remove_noop_ops) out.emplace_back("remove_noop_ops");
    out.emplace_back("dce");
    if (config_.mode == Mode::max_autotune) {
      // Fusion first: the in-place passes and memory planning then see the
      // fused kernels' buffers.
      if (config_.pattern_fusion_pass) out.emplace_back("pattern_fusion_pass");
      // Before fuse_elementwise, which would take the activation otherwise.
      out.emplace_back("fuse_conv_activation");
      out.emplace_back("fuse_elementwise");
      if (config_.remove_cat_ops) out.emplace_back("remove_cat_ops");
    }
    // Writing straight into a mutated input saves the intermediate and the
    // copy back, so it goes before the reuse of intermediates.
    if (config_.input_inplace_pass) out.emplace_back("input_inplace_pass");
    if (config_.inplace_pass) out.emplace_back("inplace_pass");
    // Memory planning runs at capture, per graph key (captured_graph.cpp).
  }
  for (const auto& p : config_.post_passes) out.push_back(p.name);
  return out;
}

std::unique_ptr<ConcreteGraph> GraphCompiler::compile(TracedGraph& traced) const {
  const bool eager = config_.force_eager || config_.mode == Mode::eager;

  passes::PassManager manager;
  for (const auto& p : config_.pre_passes) manager.add(p);
  if (!eager) {
    for (const std::string& name : pipeline()) {
      const bool custom = std::any_of(config_.pre_passes.begin(), config_.pre_passes.end(),
                                      [&](const auto& p) { return p.name == name; }) ||
                          std::any_of(config_.post_passes.begin(), config_.post_passes.end(),
                                      [&](const auto& p) { return p.name == name; });
      if (!custom) manager.add(passes::find_pass(name));
    }
  }
  for (const auto& p : config_.post_passes) manager.add(p);

  passes::PassContext ctx;
  ctx.frozen_parameter = config_.frozen_parameter;
  ctx.codegen = config_.mode == Mode::max_autotune && config_.codegen;
  for (std::size_t i = 0; i < traced.bindings.size(); ++i) {
    if (traced.bindings[i].source == InputBinding::Source::param) {
      ctx.param_data[traced.graph->inputs()[i]->name] =
          traced.params[static_cast<std::size_t>(traced.bindings[i].index)];
    }
  }
  for (const auto& [name, example] : traced.param_arg_examples) ctx.param_data[name] = example;
  manager.run(*traced.graph, ctx, config_.debug_save);
  // Passes may add param inputs (constant folding with frozen_parameter).
  for (std::size_t i = traced.bindings.size(); i < traced.graph->inputs().size(); ++i) {
    const ir::Value* in = traced.graph->inputs()[i];
    const auto it = ctx.param_data.find(in->name);
    SG_ASSERT(in->kind == ir::InputKind::param && it != ctx.param_data.end(),
              "a pass added input %", in->name, " without its data");
    traced.bindings.push_back(
        {InputBinding::Source::param, static_cast<int>(traced.params.size())});
    traced.params.push_back(it->second);
  }
  return build(traced);
}

std::unique_ptr<ConcreteGraph> GraphCompiler::build(const TracedGraph& traced) const {
  std::vector<std::string> notes;  // for the explain report (none today)
  if (config_.force_eager || config_.mode == Mode::eager)
    return std::make_unique<EagerGraph>(traced.graph->clone(), std::move(notes), config_.data_dump);
  return detail::make_captured_graph(traced.graph->clone(), config_, std::move(notes));
}

std::shared_ptr<Backend> get_backend(const CompilerConfig& config,
                                     const Decompositions& custom_decompositions) {
  return std::make_shared<Backend>(config, custom_decompositions);
}

}  // namespace sinkgraph

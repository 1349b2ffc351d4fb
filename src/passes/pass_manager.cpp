// The pass manager and the one list of built-in passes.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "passes_internal.h"

namespace sinkgraph::passes {

const std::vector<Pass>& builtin_passes() {
  static const std::vector<Pass> passes = {
      {"dce", dce},
      {"cse", cse},
      {"constant_folding", constant_folding},
      {"remove_noop_ops", remove_noop_ops},
      {"inplace_pass", inplace_pass},
      {"input_inplace_pass", input_inplace_pass},
      {"remove_cat_ops", remove_cat_ops},
      {"pattern_fusion_pass", pattern_fusion},
      {"fuse_elementwise", fuse_elementwise},
      {"fold_conv_batch_norm", fold_conv_batch_norm},
      {"fuse_conv_activation", fuse_conv_activation},
  };
  return passes;
}

const Pass& find_pass(const std::string& name) {
  std::string known;
  for (const Pass& p : builtin_passes()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  SG_CHECK(false, "unknown pass '", name, "'; known passes: ", known);
  return builtin_passes().front();  // unreachable
}

void PassManager::add(Pass pass) {
  SG_CHECK(static_cast<bool>(pass.run), "pass '", pass.name, "' has nothing to run");
  passes_.push_back(std::move(pass));
}

namespace {
void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  SG_CHECK(file.good(), "debug_save: cannot write ", path.string());
}

std::string numbered(std::size_t index, const std::string& name) {
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%02zu_", index);
  return prefix + name + ".ir";
}
}  // namespace

void PassManager::run(ir::Graph& graph, PassContext& ctx, const std::string& debug_save) const {
  const std::filesystem::path folder(debug_save);
  if (!debug_save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    SG_CHECK(!ec, "debug_save: cannot create folder ", debug_save, ": ", ec.message());
    write_file(folder / numbered(0, "input"), ir::print(graph));
  }
  for (std::size_t i = 0; i < passes_.size(); ++i) {
    const Pass& pass = passes_[i];
    pass.run(graph, ctx);
    ir::verify(graph, "<after pass " + pass.name + ">");
    if (!debug_save.empty()) write_file(folder / numbered(i + 1, pass.name), ir::print(graph));
  }
  if (!debug_save.empty()) write_file(folder / "final.dot", to_dot(graph));
}

}  // namespace sinkgraph::passes

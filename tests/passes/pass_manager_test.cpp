// The pass manager, the list of built-in passes, debug_save and DOT output.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "pass_test_util.h"

namespace sgtest {
namespace {

using ir::InputKind;
namespace fs = std::filesystem;

std::unique_ptr<ir::Graph> sample_graph() {
  auto g = std::make_unique<ir::Graph>("sample");
  ir::Value* x = g->add_input("x", meta({SymInt::symbol("s0"), 4}), InputKind::input);
  ir::Value* w = g->add_input("w", meta({4, 4}), InputKind::param);
  g->add_sym_input("pos");
  ir::Value* h = add(*g, "matmul", {x, w}, {}, "h");
  ir::Value* a = add(*g, "relu", {h}, {}, "a");
  ir::Value* b = add(*g, "relu", {h}, {}, "b");
  add(*g, "exp", {a}, {}, "dead");
  ir::Value* c = add(*g, "mul_scalar", {b}, {{"value", 1.0}}, "c");
  g->outputs = {add(*g, "add", {a, c}, {}, "y")};
  return g;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(passes_pass_manager, BuiltinPassesInOrder) {
  std::vector<std::string> names;
  for (const auto& p : passes::builtin_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"dce", "cse", "constant_folding", "remove_noop_ops",
                                             "inplace_pass", "input_inplace_pass", "remove_cat_ops",
                                             "pattern_fusion_pass", "fuse_elementwise",
                                             "fold_conv_batch_norm", "fuse_conv_activation"}));
  for (const auto& name : names) EXPECT_EQ(passes::find_pass(name).name, name);
}

TEST(passes_pass_manager, UnknownPassListsTheKnownOnes) {
  try {
    (void)passes::find_pass("fuse_everything");
    FAIL() << "expected an error";
  } catch (const sinkgraph::Error& e) {
    EXPECT_STREQ(e.what(),
                 "unknown pass 'fuse_everything'; known passes: dce, cse, constant_folding, "
                 "remove_noop_ops, inplace_pass, input_inplace_pass, remove_cat_ops, "
                 "pattern_fusion_pass, fuse_elementwise, fold_conv_batch_norm, "
                 "fuse_conv_activation");
  }
}

TEST(passes_pass_manager, RunsEveryPassAndPreservesResults) {
  auto g = sample_graph();
  auto out = g->clone();
  passes::PassManager pm;
  for (const auto& p : passes::builtin_passes()) pm.add(p);
  passes::PassContext ctx;
  pm.run(*out, ctx);
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"matmul", "relu", "add"}));
  EXPECT_TRUE(same_results(*g, *out, random_inputs(*g)));
}

TEST(passes_pass_manager, VerifiesAfterEachPass) {
  auto g = sample_graph();
  passes::PassManager pm;
  // Breaks the graph: the last node reads a value defined after it.
  pm.add({"break_order", [](ir::Graph& graph, passes::PassContext&) {
            ir::Value* late = add(graph, "neg", {graph.inputs()[0]});
            graph.nodes().front()->operands[0] = late;
          }});
  passes::PassContext ctx;
  EXPECT_THROW(pm.run(*g, ctx), ir::IrError);
}

TEST(passes_pass_manager, DebugSaveWritesEveryStage) {
  const fs::path dir =
      fs::temp_directory_path() / ("sg_passes_debug_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto g = sample_graph();
  passes::PassManager pm;
  pm.add(passes::find_pass("dce"));
  pm.add(passes::find_pass("cse"));
  passes::PassContext ctx;
  pm.run(*g, ctx, (dir / "nested").string());
  const fs::path d = dir / "nested";
  for (const char* f : {"00_input.ir", "01_dce.ir", "02_cse.ir", "final.dot"}) {
    EXPECT_TRUE(fs::exists(d / f)) << f;
  }
  EXPECT_NE(read(d / "00_input.ir").find("%dead = exp(%a)"), std::string::npos);
  EXPECT_EQ(read(d / "01_dce.ir").find("%dead"), std::string::npos);
  EXPECT_EQ(read(d / "02_cse.ir"), ir::print(*g));
  EXPECT_EQ(read(d / "final.dot"), passes::to_dot(*g));
  fs::remove_all(dir);
}

TEST(passes_to_dot, DescribesInputsNodesAndOutputs) {
  auto g = sample_graph();
  const std::string dot = passes::to_dot(*g);
  EXPECT_EQ(dot.rfind("digraph \"sample\" {", 0), 0U);
  EXPECT_NE(dot.find("in0 [shape=ellipse, label=\"%x\\ninput f32[s0,4]\"]"), std::string::npos);
  EXPECT_NE(dot.find("in2 [shape=ellipse, label=\"%pos\\nsym\"]"), std::string::npos);
  EXPECT_NE(dot.find("[shape=box, label=\"%h = matmul\\nf32[s0,4]\"]"), std::string::npos);
  EXPECT_NE(dot.find("value=1\\nf32[s0,4]"), std::string::npos);
  EXPECT_NE(dot.find("in0 -> n0 [label=\"0\"]"), std::string::npos);
  EXPECT_NE(dot.find("-> return [style=bold, label=\"0\"]"), std::string::npos);
}

TEST(passes_to_dot, IsValidGraphviz) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Graphviz `dot` is not installed; skipping the validity check";
  }
  const fs::path file =
      fs::temp_directory_path() / ("sg_passes_" + std::to_string(::getpid()) + ".dot");
  {
    std::ofstream out(file);
    out << passes::to_dot(*sample_graph());
  }
  const std::string cmd = "dot -Tsvg '" + file.string() + "' -o /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << passes::to_dot(*sample_graph());
  fs::remove(file);
}

}  // namespace
}  // namespace sgtest

// dce and cse on graphs built in code: structure, and interpreter results
// equal bitwise before and after.
#include "pass_test_util.h"

namespace sgtest {
namespace {

using ir::InputKind;

TEST(passes_dce, RemovesUnusedChains) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* a = add(g, "relu", {x});
  add(g, "exp", {a});
  g.outputs = {add(g, "neg", {x}, {}, "y")};
  auto out = run_pass(g, "dce");
  EXPECT_EQ(op_names(*out), std::vector<std::string>{"neg"});
  EXPECT_EQ(out->outputs.at(0)->name, "y");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_dce, KeepsInputsEvenUnused) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  g.add_input("w", meta({3}), InputKind::param);
  g.add_sym_input("pos");
  g.outputs = {add(g, "relu", {x})};
  auto out = run_pass(g, "dce");
  EXPECT_EQ(out->inputs().size(), 3U);
}

TEST(passes_dce, KeepsWritesToInputsAndTheirViews) {
  ir::Graph g("g");
  ir::Value* cache = g.add_input("cache", meta({4, 3}), InputKind::mutated);
  ir::Value* src = g.add_input("src", meta({2, 3}), InputKind::input);
  add(g, "index_copy_", {cache, src}, {{"index", SymInt(1)}});
  ir::Value* head =
      add(g, "slice", {cache},
          {{"dim", SymInt(0)}, {"start", SymInt(0)}, {"end", SymInt(1)}, {"step", SymInt(1)}});
  add(g, "fill_", {head}, {{"value", 7.0}});
  add(g, "relu", {src});  // dead
  g.outputs = {add(g, "neg", {src})};
  auto out = run_pass(g, "dce");
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"index_copy_", "slice", "fill_", "neg"}));
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_dce, KeepsWritesToTemporariesThatAreRead) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* t = full(g, dims({2, 3}), 0.0);
  ir::Value* v = add(g, "view", {t}, {{"shape", dims({6})}});
  add(g, "fill_", {v}, {{"value", 2.0}});  // writes t through a view; result unused
  g.outputs = {add(g, "add", {t, x})};
  auto out = run_pass(g, "dce");
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"full", "view", "fill_", "add"}));
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_dce, RemovesWritesToTemporariesNobodyReads) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* t = full(g, dims({2, 3}), 0.0);
  ir::Value* u = add(g, "fill_", {t}, {{"value", 2.0}});
  add(g, "copy_", {u, x});
  g.outputs = {add(g, "relu", {x})};
  auto out = run_pass(g, "dce");
  EXPECT_EQ(op_names(*out), std::vector<std::string>{"relu"});
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_dce, OutputOfAnInputKeepsNothing) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2}), InputKind::input);
  add(g, "relu", {x});
  g.outputs = {x};
  auto out = run_pass(g, "dce");
  EXPECT_TRUE(out->nodes().empty());
  EXPECT_EQ(out->outputs.at(0)->name, "x");
}

TEST(passes_cse, MergesRepeatedNodes) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* r1 = add(g, "relu", {x}, {}, "r1");
  ir::Value* r2 = add(g, "relu", {x}, {}, "r2");
  ir::Value* e1 = add(g, "exp", {r1});
  ir::Value* e2 = add(g, "exp", {r2});  // a repeat once r2 is r1
  g.outputs = {add(g, "add", {e1, e2}, {}, "y"), r2};
  auto out = run_pass(g, "cse");
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"relu", "exp", "add"}));
  const ir::Node& sum = *out->nodes().back();
  EXPECT_EQ(sum.operands.at(0), sum.operands.at(1));
  EXPECT_EQ(out->outputs.at(1)->name, "r1");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_cse, ComparesAttributesExactly) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  g.add_sym_input("n");
  const SymInt n = SymInt::symbol("n");
  std::vector<ir::Value*> outs = {
      add(g, "mul_scalar", {x}, {{"value", 2.0}}),
      add(g, "mul_scalar", {x}, {{"value", 3.0}}),  // other value
      add(g, "add_scalar", {x}, {{"value", 0.0}}),
      add(g, "add_scalar", {x}, {{"value", -0.0}}),  // other bits
      add(g, "view", {x}, {{"shape", dims({3, 2})}}),
      add(g, "view", {x}, {{"shape", dims({3, 2})}}),  // same list: merged
      add(g, "view", {x}, {{"shape", dims({6})}}),
      full(g, {n + 1, 2}, 1.0),
      full(g, {(n + 2) - 1, 2}, 1.0),  // the same canonical expression: merged
      full(g, {n, 2}, 1.0),
  };
  g.outputs = outs;
  auto out = run_pass(g, "cse");
  EXPECT_EQ(out->nodes().size(), 8U);
  EXPECT_EQ(out->outputs[4], out->outputs[5]);
  EXPECT_EQ(out->outputs[7], out->outputs[8]);
  EXPECT_NE(out->outputs[2], out->outputs[3]);
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_cse, NeverMergesWritesOrReadsOfWrittenTensors) {
  ir::Graph g("g");
  ir::Value* cache = g.add_input("cache", meta({2, 3}), InputKind::mutated);
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* before = add(g, "relu", {cache});
  add(g, "copy_", {cache, x});
  ir::Value* after = add(g, "relu", {cache});  // same text, different value
  ir::Value* t1 = full(g, dims({2, 3}), 1.0);
  ir::Value* t2 = full(g, dims({2, 3}), 1.0);  // t1 is written below: keep t2 apart
  add(g, "fill_", {t1}, {{"value", 5.0}});
  add(g, "fill_", {t1}, {{"value", 5.0}});  // writes are never merged
  g.outputs = {before, after, t1, t2};
  auto out = run_pass(g, "cse");
  EXPECT_EQ(out->nodes().size(), g.nodes().size());
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_cse, MergesViewsOfUnwrittenTensors) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({4, 3}), InputKind::input);
  const std::vector<ir::NamedAttr> s = {
      {"dim", SymInt(0)}, {"start", SymInt(1)}, {"end", SymInt(3)}, {"step", SymInt(1)}};
  ir::Value* a = add(g, "slice", {x}, s);
  ir::Value* b = add(g, "slice", {x}, s);
  g.outputs = {add(g, "mul", {a, b})};
  auto out = run_pass(g, "cse");
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"slice", "mul"}));
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

}  // namespace
}  // namespace sgtest

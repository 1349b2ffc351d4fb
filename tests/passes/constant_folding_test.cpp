// constant_folding: literal constants fold into one `full` with the kernels'
// exact value; frozen params fold into new params (interpreter results equal
// bitwise before and after).
#include "pass_test_util.h"

namespace sgtest {
namespace {

using ir::InputKind;

double value_of(const ir::Value* v) {
  EXPECT_EQ(v->producer->op_name(), "full");
  return std::get<double>(*v->producer->attr("value"));
}

TEST(passes_constant_folding, FoldsChainsOfConstants) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* a = full(g, dims({2, 3}), 2.0);
  ir::Value* b = full(g, dims({2, 3}), 3.0);
  ir::Value* c = add(g, "mul", {a, b}, {}, "c");
  ir::Value* d = add(g, "exp", {add(g, "mul_scalar", {c}, {{"value", 0.1}})}, {}, "d");
  g.outputs = {add(g, "add", {x, d}, {}, "y"), d};
  auto out = run_pass(g, "constant_folding");
  EXPECT_EQ(count_op(*out, "full"), 5U);  // a, b and the unused folded c stay for dce
  EXPECT_EQ(count_op(*out, "exp"), 0U);
  EXPECT_EQ(out->outputs.at(1)->name, "d");
  const Tensor six = sinkgraph::ops::full(SymShape{1}, 6.0);
  const float expect = sinkgraph::ops::exp(sinkgraph::ops::mul_scalar(six, 0.1)).item_float();
  EXPECT_EQ(value_of(out->outputs.at(1)), static_cast<double>(expect));
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
  auto clean = run_pass(*out, "dce");
  EXPECT_EQ(op_names(*clean), (std::vector<std::string>{"full", "add"}));
}

TEST(passes_constant_folding, BroadcastsAndKeepsSymbolicShapes) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({SymInt::symbol("s0"), 8}), InputKind::input);
  const SymInt s0 = SymInt::symbol("s0");
  ir::Value* col = full(g, {s0, 1}, 0.5);
  ir::Value* row = full(g, dims({1, 8}), 0.25);
  ir::Value* c = add(g, "add", {col, row}, {}, "c");
  g.outputs = {add(g, "mul", {x, c}), c};
  auto out = run_pass(g, "constant_folding");
  const ir::Value* folded = out->outputs.at(1);
  EXPECT_EQ(value_of(folded), 0.75);
  EXPECT_EQ(folded->meta.shape, (SymShape{s0, 8}));
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_constant_folding, MatchesHalfPrecisionKernelsBitwise) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    ir::Graph g("g");
    ir::Value* a = full(g, dims({4}), 0.7, dtype);
    ir::Value* b = full(g, dims({4}), 1.3, dtype);
    g.outputs = {add(g, "gelu", {add(g, "div", {a, b})}), add(g, "silu", {b}), add(g, "rsqrt", {b}),
                 add(g, "sub", {a, b})};
    auto out = run_pass(g, "constant_folding");
    EXPECT_EQ(count_op(*out, "full"), out->nodes().size());
    EXPECT_TRUE(same_results(g, *out, {}));
  }
}

TEST(passes_constant_folding, LeavesNonFiniteAndWrittenConstants) {
  ir::Graph g("g");
  ir::Value* neg = full(g, dims({2}), -1.0);
  ir::Value* nan = add(g, "sqrt", {neg});  // NaN: not folded
  ir::Value* t = full(g, dims({2}), 1.0);
  ir::Value* before = add(g, "neg", {t});  // t is written below: not a constant
  add(g, "fill_", {t}, {{"value", 4.0}});
  g.outputs = {nan, before, add(g, "neg", {t})};
  auto out = run_pass(g, "constant_folding");
  EXPECT_EQ(op_names(*out), op_names(g));
  EXPECT_TRUE(same_results(g, *out, {}));
}

TEST(passes_constant_folding, FoldsIntegerConstants) {
  ir::Graph g("g");
  ir::Value* a = full(g, dims({3}), 7.0, DType::i64);
  ir::Value* b = full(g, dims({3}), 5.0, DType::i64);
  g.outputs = {add(g, "mul", {a, b})};
  auto out = run_pass(g, "constant_folding");
  EXPECT_EQ(value_of(out->outputs.at(0)), 35.0);
  EXPECT_TRUE(same_results(g, *out, {}));
}

// x @ (w1 @ w2) + b: the product of two params is one computation at compile time.
struct ParamGraph {
  ir::Graph g{"p"};
  passes::PassContext ctx;
  NamedInputs inputs;
  ParamGraph() {
    ir::Value* x = g.add_input("x", meta({SymInt::symbol("s0"), 4}), InputKind::input);
    ir::Value* w1 = g.add_input("w1", meta({4, 6}), InputKind::param);
    ir::Value* w2 = g.add_input("w2", meta({6, 5}), InputKind::param);
    ir::Value* b = g.add_input("b", meta({5}), InputKind::param);
    ir::Value* w = add(g, "matmul", {w1, w2}, {}, "w");
    ir::Value* bias = add(g, "add", {b, full(g, dims({5}), 1.0)}, {}, "bias");
    ir::Value* y = add(g, "matmul", {x, w}, {}, "y");
    g.outputs = {add(g, "add", {y, bias}, {}, "z")};
    inputs = random_inputs(g, 7);
    for (const char* name : {"w1", "w2", "b"}) {
      ctx.param_data[name] = std::get<Tensor>(inputs.at(name));
    }
  }
};

TEST(passes_constant_folding, FoldsFrozenParamsIntoNewParams) {
  ParamGraph p;
  p.ctx.frozen_parameter = true;
  auto out = run_pass(p.g, "constant_folding", p.ctx);
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"matmul", "add"}));
  ASSERT_EQ(out->inputs().size(), 6U);
  EXPECT_EQ(out->inputs()[4]->name, "folded0");
  EXPECT_EQ(out->inputs()[5]->name, "folded1");
  for (const ir::Value* v : {out->inputs()[4], out->inputs()[5]}) {
    EXPECT_EQ(v->kind, InputKind::param);
    ASSERT_TRUE(p.ctx.param_data.contains(v->name));
    EXPECT_EQ(to_sym(p.ctx.param_data.at(v->name).shape()), v->meta.shape);
  }
  EXPECT_TRUE(same_results(p.g, *out, p.inputs, &p.ctx));
}

TEST(passes_constant_folding, NeverFoldsParamsWithoutFrozenParameter) {
  ParamGraph p;
  auto out = run_pass(p.g, "constant_folding", p.ctx);
  EXPECT_EQ(op_names(*out), op_names(p.g));
  EXPECT_EQ(p.ctx.param_data.size(), 3U);
}

TEST(passes_constant_folding, NeedsTheParamData) {
  ParamGraph p;
  p.ctx.frozen_parameter = true;
  p.ctx.param_data.erase("w2");
  auto out = run_pass(p.g, "constant_folding", p.ctx);
  EXPECT_EQ(count_op(*out, "matmul"), 2U);
  EXPECT_EQ(count_op(*out, "full"), 0U);  // b + 1 still folds: b has data
}

TEST(passes_constant_folding, KeepsViewsOfParamsAndFoldsBelowThem) {
  ir::Graph g("v");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* w = g.add_input("w", meta({5, 4}), InputKind::param);
  ir::Value* v = g.add_input("v", meta({5, 4}), InputKind::param);
  ir::Value* cache = g.add_input("cache", meta({5, 4}), InputKind::param);
  ir::Value* wt = add(g, "transpose", {w}, {{"dim0", SymInt(0)}, {"dim1", SymInt(1)}});
  ir::Value* sum = add(g, "add", {w, v});
  ir::Value* st = add(g, "transpose", {sum}, {{"dim0", SymInt(0)}, {"dim1", SymInt(1)}});
  add(g, "fill_", {cache}, {{"value", 1.0}});  // a written param never folds
  ir::Value* c = add(g, "relu", {cache});
  g.outputs = {add(g, "matmul", {x, wt}), add(g, "matmul", {x, st}), c};
  passes::PassContext ctx;
  ctx.frozen_parameter = true;
  NamedInputs inputs = random_inputs(g, 3);
  for (const char* name : {"w", "v", "cache"})
    ctx.param_data[name] = std::get<Tensor>(inputs.at(name));
  auto out = run_pass(g, "constant_folding", ctx);
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"transpose", "transpose", "fill_", "relu",
                                                      "matmul", "matmul"}));
  EXPECT_EQ(out->inputs().back()->name, "folded0");
  EXPECT_TRUE(same_results(g, *out, inputs, &ctx));
}

TEST(passes_constant_folding, NeverTurnsOutputsIntoFoldedParams) {
  ir::Graph g("o");
  ir::Value* w1 = g.add_input("w1", meta({4, 4}), InputKind::param);
  ir::Value* w2 = g.add_input("w2", meta({4, 4}), InputKind::param);
  ir::Value* m = add(g, "matmul", {w1, w2}, {}, "m");
  ir::Value* t = add(g, "transpose", {m}, {{"dim0", SymInt(0)}, {"dim1", SymInt(1)}}, "t");
  ir::Value* n = add(g, "matmul", {w2, w1}, {}, "n");
  g.outputs = {t, add(g, "relu", {n}, {}, "r")};
  passes::PassContext ctx;
  ctx.frozen_parameter = true;
  NamedInputs inputs = random_inputs(g, 5);
  for (const char* name : {"w1", "w2"}) ctx.param_data[name] = std::get<Tensor>(inputs.at(name));
  auto out = run_pass(g, "constant_folding", ctx);
  // m's storage is an output (through t): computed per call. n folds; r stays.
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"matmul", "transpose", "relu"}));
  EXPECT_EQ(out->nodes().back()->operands.at(0)->name, "folded0");
  for (const ir::Value* o : out->outputs) EXPECT_FALSE(o->is_input());
  EXPECT_TRUE(same_results(g, *out, inputs, &ctx));
}

// Every operator whose traits say pointwise folds, read from the registry
// (Note [Operator traits]): a new pointwise operator needs no list here.
TEST(passes_constant_folding, FoldsEveryPointwiseOperator) {
  using sinkgraph::OpDef;
  using sinkgraph::Pointwise;
  auto& registry = sinkgraph::OpRegistry::instance();
  int folded_ops = 0;
  for (const auto& name : registry.names()) {
    const OpDef& def = registry.get(name);
    if (def.traits.pointwise == Pointwise::none) continue;
    SCOPED_TRACE(name);
    ir::Graph g("g");
    ir::Value* a = full(g, dims({3}), 0.75);
    std::vector<ir::NamedAttr> attrs;
    std::vector<ir::Value*> operands = {a};
    if (def.traits.pointwise == Pointwise::binary) operands.push_back(full(g, dims({3}), 1.5));
    if (def.traits.pointwise == Pointwise::add_scalar ||
        def.traits.pointwise == Pointwise::mul_scalar)
      attrs.push_back({"value", 2.0});
    g.outputs = {add(g, name, operands, attrs)};
    auto out = run_pass(g, "constant_folding");
    EXPECT_EQ(count_op(*out, name), 0U);
    EXPECT_TRUE(same_results(g, *out, {}));
    ++folded_ops;
  }
  EXPECT_GE(folded_ops, 18);
}

}  // namespace
}  // namespace sgtest

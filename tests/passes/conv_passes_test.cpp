// max-autotune's convolution passes: fold_conv_batch_norm (with constant
// folding after it) and fuse_conv_activation. Graphs before and after are
// interpreted on the same inputs: the activation fusion is bitwise, the
// batch-norm fold within float rounding; the passes must leave alone what is
// unsound to rewrite.
#include <algorithm>
#include <span>

#include "passes/pass_test_util.h"
#include "sinkgraph/compiler.h"

namespace sgtest {
namespace {

namespace sg = sinkgraph;

std::vector<ir::NamedAttr> conv_attrs(std::int64_t stride, std::int64_t pad, std::int64_t groups,
                                      std::int64_t act = -1) {
  return {{"stride_h", SymInt(stride)}, {"stride_w", SymInt(stride)}, {"pad_h", SymInt(pad)},
          {"pad_w", SymInt(pad)},       {"dil_h", SymInt(1)},         {"dil_w", SymInt(1)},
          {"groups", SymInt(groups)},   {"activation", SymInt(act)}};
}

std::int64_t activation_of(const ir::Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->op_name() == "conv2d") return std::get<SymInt>(*n->attr("activation")).value();
  }
  return -100;
}

// x[2, 4, 6, 6] -> conv2d (params w[8, 4/groups, 3, 3], b[8]) -> batch_norm
// (params mean, var, weight, bias [8]).
struct ConvBn {
  ir::Graph g;
  ir::Value* x = nullptr;
  ir::Value* conv = nullptr;
  ir::Value* bn = nullptr;
  explicit ConvBn(std::int64_t groups = 1, std::int64_t act = -1,
                  ir::InputKind kinds = ir::InputKind::param) {
    x = g.add_input("x", meta({2, 4, 6, 6}), ir::InputKind::input);
    ir::Value* w = g.add_input("w", meta({8, SymInt(4 / groups), 3, 3}), kinds);
    ir::Value* b = g.add_input("b", meta({8}), ir::InputKind::param);
    std::vector<ir::Value*> p;
    for (const char* name : {"mean", "var", "weight", "bias"})
      p.push_back(g.add_input(name, meta({8}), ir::InputKind::param));
    conv = add(g, "conv2d", {x, w, b}, conv_attrs(1, 1, groups, act), "c");
    bn = add(g, "batch_norm", {conv, p[0], p[1], p[2], p[3]}, {{"eps", 1e-5}}, "y");
  }
};

// Random inputs with a positive running variance.
NamedInputs bn_inputs(const ir::Graph& g, std::uint32_t seed) {
  NamedInputs named = random_inputs(g, seed);
  const auto v = std::get<Tensor>(named.at("var")).to_floats();
  std::vector<float> pos;
  for (const float f : v) pos.push_back(0.25F + std::abs(f));
  named["var"] = Tensor::from_floats(pos, {static_cast<std::int64_t>(pos.size())});
  return named;
}

// ---- fold_conv_batch_norm ----------------------------------------------------

TEST(passes_conv, fold_conv_batch_norm_then_constant_folding_leaves_one_conv) {
  for (const std::int64_t groups : {1, 2, 4}) {  // 4: depthwise
    SCOPED_TRACE(groups);
    ConvBn m(groups);
    m.g.outputs = {m.bn};
    const NamedInputs named = bn_inputs(m.g, 11);
    passes::PassContext ctx = param_context(m.g, named, /*frozen=*/true);
    const auto folded = run_pass(m.g, "fold_conv_batch_norm", ctx);
    EXPECT_EQ(count_op(*folded, "batch_norm"), 0U);
    EXPECT_EQ(count_op(*folded, "conv2d"), 1U);
    EXPECT_EQ(folded->outputs.at(0)->name, "y");  // the result keeps its name
    EXPECT_TRUE(close_results(m.g, *folded, named, ctx));
    // Constant folding evaluates the rescaled weight and bias into new params.
    const auto after = run_pass(*folded, "constant_folding", ctx);
    EXPECT_EQ(op_names(*after), (std::vector<std::string>{"conv2d"}));
    EXPECT_TRUE(ctx.param_data.contains("folded0"));
    EXPECT_TRUE(ctx.param_data.contains("folded1"));
    EXPECT_TRUE(close_results(m.g, *after, named, ctx));
  }
}

// PyTorch's bias=False convolution reaches the IR with a `full` zero bias.
TEST(passes_conv, fold_conv_batch_norm_takes_a_constant_zero_bias) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", meta({2, 4, 6, 6}), ir::InputKind::input);
  ir::Value* w = g.add_input("w", meta({8, 4, 3, 3}), ir::InputKind::param);
  ir::Value* zero = full(g, dims({8}), 0.0);
  std::vector<ir::Value*> p;
  for (const char* name : {"mean", "var", "weight", "bias"})
    p.push_back(g.add_input(name, meta({8}), ir::InputKind::param));
  ir::Value* conv = add(g, "conv2d", {x, w, zero}, conv_attrs(1, 1, 1, -1), "c");
  g.outputs = {add(g, "batch_norm", {conv, p[0], p[1], p[2], p[3]}, {{"eps", 1e-5}}, "y")};
  const NamedInputs named = bn_inputs(g, 17);
  passes::PassContext ctx = param_context(g, named, /*frozen=*/true);
  const auto folded = run_pass(g, "fold_conv_batch_norm", ctx);
  const auto after = run_pass(*folded, "constant_folding", ctx);
  EXPECT_EQ(op_names(*after), (std::vector<std::string>{"conv2d"}));
  EXPECT_TRUE(close_results(g, *after, named, ctx));
}

// Without frozen params the fold stays in the graph and runs per call
// (Note [Folding a batch norm per call]): what a param holds at the call is
// what the convolution uses.
TEST(passes_conv, fold_conv_batch_norm_without_frozen_params_runs_per_call) {
  for (const std::int64_t groups : {1, 4}) {
    SCOPED_TRACE(groups);
    ConvBn m(groups);  // w: 8 * 4/groups * 9 elements, c: 2 * 8 * 36 (cheaper to fold)
    m.g.outputs = {m.bn};
    const NamedInputs named = bn_inputs(m.g, 12);
    passes::PassContext ctx = param_context(m.g, named, /*frozen=*/false);
    const auto folded = run_pass(m.g, "fold_conv_batch_norm", ctx);
    EXPECT_EQ(count_op(*folded, "batch_norm"), 0U);
    EXPECT_EQ(count_op(*folded, "conv2d"), 1U);
    const auto after = run_pass(*folded, "constant_folding", ctx);
    EXPECT_EQ(count_op(*after, "mul"), 3U);  // the scale, the weight and the bias
    EXPECT_FALSE(ctx.param_data.contains("folded0"));
    EXPECT_TRUE(close_results(m.g, *after, named, ctx));
    // Every param changed after the compile: the folded graph follows.
    NamedInputs changed = bn_inputs(m.g, 99);
    changed["x"] = named.at("x");
    const passes::PassContext now = param_context(m.g, changed, /*frozen=*/false);
    EXPECT_TRUE(close_results(m.g, *after, changed, now));
  }
  // Frozen, but a param without data: constant folding could not evaluate the
  // fold, so it too stays per call.
  ConvBn m;
  m.g.outputs = {m.bn};
  const NamedInputs named = bn_inputs(m.g, 13);
  passes::PassContext partial = param_context(m.g, named, /*frozen=*/true);
  partial.param_data.erase("var");
  const auto after =
      run_pass(*run_pass(m.g, "fold_conv_batch_norm", partial), "constant_folding", partial);
  EXPECT_EQ(count_op(*after, "batch_norm"), 0U);
  EXPECT_EQ(count_op(*after, "rsqrt"), 1U);
}

// Per call, a weight larger than the convolution's result costs more to
// rescale than the batch_norm does to run: it stays (late layers over small
// images). Frozen, the fold is free and always made.
TEST(passes_conv, fold_conv_batch_norm_per_call_only_where_it_is_cheaper) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", meta({SymInt::symbol("s0"), 16, 2, 2}), ir::InputKind::input);
  ir::Value* w = g.add_input("w", meta({8, 16, 3, 3}), ir::InputKind::param);  // 1152
  ir::Value* b = g.add_input("b", meta({8}), ir::InputKind::param);
  std::vector<ir::Value*> p;
  for (const char* name : {"mean", "var", "weight", "bias"})
    p.push_back(g.add_input(name, meta({8}), ir::InputKind::param));
  ir::Value* c = add(g, "conv2d", {x, w, b}, conv_attrs(1, 1, 1), "c");  // s0 * 32
  g.outputs = {add(g, "batch_norm", {c, p[0], p[1], p[2], p[3]}, {{"eps", 1e-5}}, "y")};
  const NamedInputs named = bn_inputs(g, 21);
  passes::PassContext per_call = param_context(g, named, /*frozen=*/false);
  EXPECT_EQ(ir::print(*run_pass(g, "fold_conv_batch_norm", per_call)), ir::print(g));
  passes::PassContext frozen = param_context(g, named, /*frozen=*/true);
  EXPECT_EQ(count_op(*run_pass(g, "fold_conv_batch_norm", frozen), "batch_norm"), 0U);
}

TEST(passes_conv, fold_conv_batch_norm_leaves_unsound_patterns_alone) {
  // The convolution's result is also a graph output.
  {
    ConvBn m;
    m.g.outputs = {m.bn, m.conv};
    passes::PassContext ctx = param_context(m.g, bn_inputs(m.g, 13), /*frozen=*/true);
    EXPECT_EQ(count_op(*run_pass(m.g, "fold_conv_batch_norm", ctx), "batch_norm"), 1U);
  }
  // ... or read by another node.
  {
    ConvBn m;
    m.g.outputs = {m.bn, add(m.g, "relu", {m.conv})};
    passes::PassContext ctx = param_context(m.g, bn_inputs(m.g, 14), /*frozen=*/true);
    EXPECT_EQ(count_op(*run_pass(m.g, "fold_conv_batch_norm", ctx), "batch_norm"), 1U);
  }
  // An activation already fused: the batch_norm normalizes relu(conv), not conv.
  {
    ConvBn m(1, /*act=*/5);
    m.g.outputs = {m.bn};
    passes::PassContext ctx = param_context(m.g, bn_inputs(m.g, 15), /*frozen=*/true);
    EXPECT_EQ(count_op(*run_pass(m.g, "fold_conv_batch_norm", ctx), "batch_norm"), 1U);
  }
  // The weight is a per-call input, not a param.
  {
    ConvBn m(1, -1, ir::InputKind::input);
    m.g.outputs = {m.bn};
    passes::PassContext ctx = param_context(m.g, bn_inputs(m.g, 16), /*frozen=*/true);
    EXPECT_EQ(count_op(*run_pass(m.g, "fold_conv_batch_norm", ctx), "batch_norm"), 1U);
  }
  // x is written in place between the convolution and the batch_norm: moving
  // the convolution there would read the new contents.
  {
    ir::Graph g;
    ir::Value* x = g.add_input("x", meta({1, 2, 4, 4}), ir::InputKind::mutated);
    ir::Value* z = g.add_input("z", meta({1, 2, 4, 4}), ir::InputKind::input);
    ir::Value* w = g.add_input("w", meta({2, 2, 1, 1}), ir::InputKind::param);
    ir::Value* b = g.add_input("b", meta({2}), ir::InputKind::param);
    std::vector<ir::Value*> p;
    for (const char* name : {"mean", "var", "weight", "bias"})
      p.push_back(g.add_input(name, meta({2}), ir::InputKind::param));
    ir::Value* c = add(g, "conv2d", {x, w, b}, conv_attrs(1, 0, 1));
    add(g, "copy_", {x, z});
    g.outputs = {add(g, "batch_norm", {c, p[0], p[1], p[2], p[3]}, {{"eps", 1e-5}})};
    const NamedInputs named = bn_inputs(g, 17);
    passes::PassContext ctx = param_context(g, named, /*frozen=*/true);
    const auto after = run_pass(g, "fold_conv_batch_norm", ctx);
    EXPECT_EQ(count_op(*after, "batch_norm"), 1U);
    EXPECT_TRUE(same_results(g, *after, named, &ctx));
  }
}

// ---- fuse_conv_activation ---------------------------------------------------------

TEST(passes_conv, fuse_conv_activation_is_bitwise_for_every_unary_operator) {
  const std::vector<std::pair<const char*, std::int64_t>> unaries = {
      {"neg", 0},  {"exp", 1},     {"sqrt", 2},       {"rsqrt", 3},
      {"erf", 4},  {"relu", 5},    {"silu", 6},       {"gelu", 7},
      {"tanh", 8}, {"sigmoid", 9}, {"hardswish", 10}, {"hardsigmoid", 11}};
  for (const std::int64_t groups : {1, 4}) {
    for (const auto& [name, fn] : unaries) {
      SCOPED_TRACE(std::string(name) + " groups " + std::to_string(groups));
      ir::Graph g;
      ir::Value* x = g.add_input("x", meta({2, 4, 5, 5}), ir::InputKind::input);
      ir::Value* w = g.add_input("w", meta({4, SymInt(4 / groups), 3, 3}), ir::InputKind::param);
      ir::Value* b = g.add_input("b", meta({4}), ir::InputKind::param);
      ir::Value* c = add(g, "conv2d", {x, w, b}, conv_attrs(2, 1, groups), "c");
      g.outputs = {add(g, name, {c}, {}, "y")};
      const auto after = run_pass(g, "fuse_conv_activation");
      EXPECT_EQ(op_names(*after), (std::vector<std::string>{"conv2d"}));
      EXPECT_EQ(activation_of(*after), fn);
      EXPECT_EQ(after->outputs.at(0)->name, "y");
      EXPECT_TRUE(same_results(g, *after, random_inputs(g, 21)));
    }
  }
}

TEST(passes_conv, fuse_conv_activation_leaves_unsound_patterns_alone) {
  const auto base = [](ir::Graph& g, ir::InputKind x_kind = ir::InputKind::input) {
    ir::Value* x = g.add_input("x", meta({1, 2, 4, 4}), x_kind);
    ir::Value* w = g.add_input("w", meta({2, 2, 3, 3}), ir::InputKind::param);
    ir::Value* b = g.add_input("b", meta({2}), ir::InputKind::param);
    return add(g, "conv2d", {x, w, b}, conv_attrs(1, 1, 1), "c");
  };
  {  // The convolution's result is a graph output too.
    ir::Graph g;
    ir::Value* c = base(g);
    g.outputs = {add(g, "relu", {c}), c};
    EXPECT_EQ(count_op(*run_pass(g, "fuse_conv_activation"), "relu"), 1U);
  }
  {  // ... or read by another node.
    ir::Graph g;
    ir::Value* c = base(g);
    g.outputs = {add(g, "add", {add(g, "relu", {c}), c})};
    EXPECT_EQ(count_op(*run_pass(g, "fuse_conv_activation"), "relu"), 1U);
  }
  {  // ... or written in place after the activation read it.
    ir::Graph g;
    ir::Value* c = base(g);
    ir::Value* r = add(g, "relu", {c});
    add(g, "fill_", {c}, {{"value", 1.0}});
    g.outputs = {r};
    EXPECT_EQ(count_op(*run_pass(g, "fuse_conv_activation"), "relu"), 1U);
  }
  {  // An activation already set: two activations do not compose into one index.
    ir::Graph g;
    ir::Value* x = g.add_input("x", meta({1, 2, 4, 4}), ir::InputKind::input);
    ir::Value* w = g.add_input("w", meta({2, 2, 3, 3}), ir::InputKind::param);
    ir::Value* b = g.add_input("b", meta({2}), ir::InputKind::param);
    ir::Value* c = add(g, "conv2d", {x, w, b}, conv_attrs(1, 1, 1, 5));
    g.outputs = {add(g, "sigmoid", {c})};
    EXPECT_EQ(count_op(*run_pass(g, "fuse_conv_activation"), "sigmoid"), 1U);
  }
  {  // x is written between the convolution and the activation: the fused
     // node, standing where the activation stood, would read the new x.
    ir::Graph g;
    ir::Value* c = base(g, ir::InputKind::mutated);
    ir::Value* z = g.add_input("z", meta({1, 2, 4, 4}), ir::InputKind::input);
    add(g, "copy_", {g.inputs()[0], z});
    g.outputs = {add(g, "relu", {c})};
    const auto after = run_pass(g, "fuse_conv_activation");
    EXPECT_EQ(count_op(*after, "relu"), 1U);
    EXPECT_TRUE(same_results(g, *after, random_inputs(g, 22)));
  }
}

// conv -> batch_norm -> hardswish (a MobileNet block), frozen: one conv2d.
TEST(passes_conv, fold_then_fuse_makes_one_conv_with_its_activation) {
  ConvBn m(4);
  m.g.outputs = {add(m.g, "hardswish", {m.bn}, {}, "out")};
  const NamedInputs named = bn_inputs(m.g, 31);
  passes::PassContext ctx = param_context(m.g, named, /*frozen=*/true);
  auto g = m.g.clone();
  for (const char* pass :
       {"fold_conv_batch_norm", "constant_folding", "dce", "fuse_conv_activation"}) {
    passes::find_pass(pass).run(*g, ctx);
    ir::verify(*g);
  }
  EXPECT_EQ(op_names(*g), (std::vector<std::string>{"conv2d"}));
  EXPECT_EQ(activation_of(*g), 10);
  EXPECT_TRUE(close_results(m.g, *g, named, ctx));
}

// ---- the max-autotune pipeline ---------------------------------------------------

TEST(passes_conv, max_autotune_folds_batch_norm_before_constant_folding_and_fuses_after) {
  sg::CompilerConfig c;
  c.set("mode", "max-autotune");
  const auto ma = sg::GraphCompiler(c).pipeline();
  const auto at = [&](const char* name) { return std::find(ma.begin(), ma.end(), name); };
  ASSERT_NE(at("fold_conv_batch_norm"), ma.end());
  ASSERT_NE(at("fuse_conv_activation"), ma.end());
  EXPECT_LT(at("fold_conv_batch_norm"), at("constant_folding"));
  EXPECT_LT(at("constant_folding"), at("fuse_conv_activation"));
  EXPECT_LT(at("fuse_conv_activation"), at("fuse_elementwise"));
  c.set("mode", "reduce-overhead");
  const auto ro = sg::GraphCompiler(c).pipeline();
  EXPECT_EQ(std::find(ro.begin(), ro.end(), "fold_conv_batch_norm"), ro.end());
  EXPECT_EQ(std::find(ro.begin(), ro.end(), "fuse_conv_activation"), ro.end());
}

// A conv -> batch_norm -> relu model compiled in max-autotune with frozen
// params: one conv2d node, results as eager.
struct ConvBnRelu {
  Tensor w, b, mean, var, weight, bias;
  ConvBnRelu() {
    std::mt19937 rng(41);
    w = random_tensor(meta({6, 3, 3, 3}), rng);
    b = random_tensor(meta({6}), rng);
    mean = random_tensor(meta({6}), rng);
    weight = random_tensor(meta({6}), rng);
    bias = random_tensor(meta({6}), rng);
    var = sg::ops::add_scalar(sg::ops::mul(mean, mean), 0.5);
  }
  std::vector<Tensor> operator()(std::span<const sg::Arg> args) const {
    const auto& x = std::get<Tensor>(args[0]);
    const Tensor c = sg::ops::conv2d(x, w, b, 2, 2, 1, 1);
    return {sg::ops::relu(sg::ops::batch_norm(c, mean, var, weight, bias, 1e-5))};
  }
  [[nodiscard]] sg::NamedTensors named_parameters() const {
    return {{"w", &w},     {"b", &b},           {"mean", &mean},
            {"var", &var}, {"weight", &weight}, {"bias", &bias}};
  }
};

TEST(passes_conv, a_compiled_conv_bn_relu_is_one_conv2d) {
  const ConvBnRelu model;
  sg::CompilerConfig c;
  c.set("mode", "max-autotune");
  c.set("frozen_parameter", "true");
  auto fn = sg::compile(std::cref(model), sg::get_backend(c));
  std::mt19937 rng(42);
  const Tensor x = random_tensor(meta({2, 3, 8, 8}), rng);
  const auto want = model(std::vector<sg::Arg>{x})[0].to_floats();
  for (int call = 0; call < 3; ++call) {  // trace, capture, replay
    const auto got = (*fn)({x})[0].to_floats();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << "element " << i;
    }
  }
  EXPECT_EQ(op_names(fn->graph(0)), (std::vector<std::string>{"conv2d"}))
      << ir::print(fn->graph(0));
  EXPECT_EQ(activation_of(fn->graph(0)), 5);
}

}  // namespace
}  // namespace sgtest

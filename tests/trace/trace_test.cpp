// Tracing: model code -> IR graph, compared with hand-written IR and eager results.
#include "sinkgraph/trace.h"

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "models.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ir.h"

namespace {

namespace sg = sinkgraph;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Printed text with every %name replaced by %t<k> in order of first appearance.
std::string canonical(const sg::ir::Graph& graph) {
  const std::string text = sg::ir::print(graph);
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  };
  std::map<std::string, std::string> renamed;
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '%') {
      out += text[i++];
      continue;
    }
    std::size_t end = i + 1;
    while (end < text.size() && name_char(text[end])) ++end;
    const std::string name = text.substr(i, end - i);
    const auto [pos, inserted] = renamed.emplace(name, "%t" + std::to_string(renamed.size()));
    out += pos->second;
    i = end;
  }
  return out;
}

std::vector<float> floats(const sg::ir::RtValue& v) { return std::get<sg::Tensor>(v).to_floats(); }

TEST(trace, mlp_matches_hand_written_ir_and_eager_bitwise) {
  const sgtest::Mlp mlp;
  const sg::Tensor x = sgtest::random_tensor({3, 64}, 7);
  sg::TraceOptions options;
  options.graph_name = "mlp";
  options.arg_names = {"x"};
  options.dynamic_dims[0] = {0};
  const std::vector<sg::Arg> args{x};
  const sg::TracedGraph traced = sg::trace(std::cref(mlp), args, options);

  const auto expected = sg::ir::parse(read_file(SG_TEST_DATA "/trace/mlp.ir"), "mlp.ir");
  EXPECT_EQ(canonical(*traced.graph), canonical(*expected));
  ASSERT_EQ(traced.params.size(), 2U);
  EXPECT_TRUE(traced.params[0].shares_storage(mlp.w1));

  // The interpreter on the traced graph equals direct eager calls bitwise, at
  // the traced size and at another size (dim 0 is dynamic).
  for (const std::int64_t rows : {3, 5}) {
    const sg::Tensor xi = sgtest::random_tensor({rows, 64}, 8 + static_cast<std::uint32_t>(rows));
    const std::vector<sg::Arg> call{xi};
    const auto out = sg::ir::interpret(*traced.graph, traced.graph_inputs(call));
    EXPECT_EQ(floats(out[0]), mlp(call)[0].to_floats());
  }
}

TEST(trace, attention_block_matches_hand_written_ir_and_eager_bitwise) {
  const sgtest::AttentionBlock block;
  const auto make_cache = [] { return sg::ops::zeros({16, 4, 8}); };
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 9);
  sg::TraceOptions options;
  options.graph_name = "attention";
  options.arg_names = {"x", "pos", "kc", "vc"};
  const std::vector<sg::Arg> example{x, sg::SymInt(0), make_cache(), make_cache()};
  const sg::TracedGraph traced = sg::trace(std::cref(block), example, options);

  const auto expected =
      sg::ir::parse(read_file(SG_TEST_DATA "/trace/attention.ir"), "attention.ir");
  EXPECT_EQ(canonical(*traced.graph), canonical(*expected));
  EXPECT_EQ(traced.graph->inputs()[2]->kind, sg::ir::InputKind::mutated);
  EXPECT_EQ(traced.graph->inputs()[1]->kind, sg::ir::InputKind::sym);

  // Several decode steps: graph and eager each on their own caches, bitwise.
  const sg::Tensor kc_g = make_cache(), vc_g = make_cache(), kc_e = make_cache(),
                   vc_e = make_cache();
  for (std::int64_t pos = 0; pos < 4; ++pos) {
    const sg::Tensor xi = sgtest::random_tensor({1, 32}, 20 + static_cast<std::uint32_t>(pos));
    const std::vector<sg::Arg> graph_args{xi, sg::SymInt(pos), kc_g, vc_g};
    const std::vector<sg::Arg> eager_args{xi, sg::SymInt(pos), kc_e, vc_e};
    const auto out = sg::ir::interpret(*traced.graph, traced.graph_inputs(graph_args));
    EXPECT_EQ(floats(out[0]), block(eager_args)[0].to_floats()) << "pos " << pos;
  }
  EXPECT_EQ(kc_g.to_floats(), kc_e.to_floats());
}

TEST(trace, reading_values_while_tracing_is_an_error_naming_the_operator) {
  const auto fn = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const sg::Tensor h = sg::ops::relu(std::get<sg::Tensor>(args[0]));
    if (h.to_floats()[0] > 0) return {h};  // data-dependent control flow
    return {sg::ops::neg(h)};
  };
  const std::vector<sg::Arg> args{sgtest::random_tensor({2, 2}, 1)};
  try {
    (void)sg::trace(fn, args);
    FAIL() << "expected sinkgraph::Error";
  } catch (const sg::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("relu"), std::string::npos) << what;
    EXPECT_NE(what.find("must trace as one graph"), std::string::npos) << what;
  }
  // The thread is not left tracing: eager calls work.
  EXPECT_EQ(sg::ops::relu(sg::Tensor::from_floats({-1, 2}, {2})).to_floats(),
            (std::vector<float>{0, 2}));
}

TEST(trace, symbolic_size_must_be_asked_for_with_sym_size) {
  const auto fn = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(args[0]);
    EXPECT_TRUE(x.sym_size(0).is_symbolic());
    EXPECT_EQ(x.size(1), 4);
    EXPECT_THROW((void)x.size(0), sg::Error);
    return {sg::ops::view(x, {x.sym_size(0) * 4})};
  };
  sg::TraceOptions options;
  options.dynamic_dims[0] = {0};
  const std::vector<sg::Arg> args{sgtest::random_tensor({3, 4}, 1)};
  const sg::TracedGraph traced = sg::trace(fn, args, options);
  EXPECT_EQ(shape_str(traced.graph->outputs[0]->meta.shape), "[4*s0]");
}

TEST(trace, plain_integers_are_specialized_and_guarded) {
  const auto fn = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const auto n = std::get<std::int64_t>(args[1]);
    return {sg::ops::slice(std::get<sg::Tensor>(args[0]), 0, 0, n)};
  };
  const sg::Tensor x = sgtest::random_tensor({6, 2}, 1);
  const std::vector<sg::Arg> args{x, std::int64_t{3}};
  const sg::TracedGraph traced = sg::trace(fn, args);
  EXPECT_EQ(traced.graph->inputs().size(), 1U);  // the integer is not an input
  EXPECT_EQ(shape_str(traced.graph->outputs[0]->meta.shape), "[3,2]");
  std::string why;
  const std::vector<sg::Arg> same{x, std::int64_t{3}}, other{x, std::int64_t{4}};
  EXPECT_TRUE(traced.guards.check(same, &why)) << why;
  EXPECT_FALSE(traced.guards.check(other, &why));
  EXPECT_NE(why.find("specialized"), std::string::npos) << why;
}

TEST(trace, params_are_lifted_once_per_tensor) {
  const sg::Tensor w = sgtest::random_tensor({4, 4}, 2);
  const auto fn = [&](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(args[0]);
    return {sg::ops::add(sg::ops::matmul(x, w), sg::ops::matmul(x, w))};
  };
  const std::vector<sg::Arg> args{sgtest::random_tensor({2, 4}, 1)};
  const sg::TracedGraph traced = sg::trace(fn, args);
  ASSERT_EQ(traced.params.size(), 1U);
  EXPECT_EQ(traced.graph->inputs()[1]->kind, sg::ir::InputKind::param);
}

TEST(trace, decomposing_gelu_into_primitives_gives_the_same_results_without_gelu) {
  // gelu(x) = x * (1 + erf(x / sqrt(2))) * 0.5: the kernel computes (0.5 x)(1 + erf),
  // and scaling by 0.5 is exact, so the decomposed graph agrees bitwise.
  sg::TraceOptions options;
  options.decompositions["gelu"] = [](std::span<const sg::Tensor> t,
                                      std::span<const sg::ScalarValue>) {
    const sg::Tensor e = sg::ops::erf(sg::ops::mul_scalar(t[0], 0.70710678118654752));
    return sg::ops::mul_scalar(sg::ops::mul(t[0], sg::ops::add_scalar(e, 1.0)), 0.5);
  };
  const auto fn = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    return {sg::ops::gelu(std::get<sg::Tensor>(args[0]))};
  };
  const sg::Tensor x = sgtest::random_tensor({64}, 1, 4.0F);
  const std::vector<sg::Arg> args{x};
  const sg::TracedGraph traced = sg::trace(fn, args, options);
  for (const auto& node : traced.graph->nodes()) EXPECT_NE(node->op_name(), "gelu");
  EXPECT_EQ(traced.graph->nodes().size(), 5U);
  const auto out = sg::ir::interpret(*traced.graph, traced.graph_inputs(args));
  EXPECT_EQ(floats(out[0]), sg::ops::gelu(x).to_floats());
}

}  // namespace

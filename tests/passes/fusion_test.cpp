// max-autotune's fusion passes: the graph before and after, interpreted on
// random inputs, must agree (bitwise where the fused kernels do the same
// arithmetic), and the fusions must happen where they are sound only.
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

#include "passes/pass_test_util.h"

namespace sgtest {
namespace {

std::unique_ptr<ir::Graph> golden_input(const std::string& name) {
  std::ifstream in(std::filesystem::path(SG_PASSES_GOLDEN_DIR) / name, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return ir::parse(s.str(), name);
}

TEST(passes_fusion, pattern_fusion_merges_projections_of_frozen_params_and_agrees) {
  const auto g = golden_input("pattern_fusion.ir");
  const NamedInputs named = random_inputs(*g, 3);
  passes::PassContext ctx = param_context(*g, named, /*frozen=*/true);
  const auto after = run_pass(*g, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*after, "linear"), 4U);  // qkv, wo, w1|w3, w2
  EXPECT_EQ(count_op(*after, "rope"), 1U);
  EXPECT_EQ(count_op(*after, "silu_mul"), 1U);
  EXPECT_EQ(count_op(*after, "add_rms_norm"), 1U);  // x1 and h2; x2 is the output
  ASSERT_TRUE(ctx.param_data.contains("fused_w0"));
  // The merged weight is the row-concatenation of wq, wk, wv.
  const auto cat = ctx.param_data.at("fused_w0").to_floats();
  auto want = std::get<Tensor>(named.at("wq")).to_floats();
  for (const char* w : {"wk", "wv"}) {
    const auto rows = std::get<Tensor>(named.at(w)).to_floats();
    want.insert(want.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(cat, want);
  // One GEMM over more rows may round its dot products differently.
  EXPECT_TRUE(close_results(*g, *after, named, ctx, 1e-5));
}

TEST(passes_fusion, without_frozen_params_only_rope_silu_mul_and_add_rms_norm_fuse_bitwise) {
  const auto g = golden_input("pattern_fusion.ir");
  const NamedInputs named = random_inputs(*g, 4);
  passes::PassContext ctx = param_context(*g, named, /*frozen=*/false);
  const auto after = run_pass(*g, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*after, "linear"), 7U);
  EXPECT_EQ(count_op(*after, "silu_mul"), 1U);
  EXPECT_EQ(count_op(*after, "add_rms_norm"), 1U);
  EXPECT_EQ(ctx.param_data.size(), g->inputs().size() - 2);  // no new param (x and pos are not)
  EXPECT_TRUE(same_results(*g, *after, named, &ctx));
}

TEST(passes_fusion, rope_of_adjacent_head_slices_is_one_rope_bitwise) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", meta({2, 6, 4}), ir::InputKind::input);
  g.add_sym_input("pos");
  const auto sl = [&](std::int64_t a, std::int64_t b) {
    return add(g, "slice", {x},
               {{"dim", SymInt(1)}, {"start", SymInt(a)}, {"end", SymInt(b)}, {"step", SymInt(1)}});
  };
  const std::vector<ir::NamedAttr> attrs = {
      {"pos0", SymInt::symbol("pos")}, {"theta", 10000.0}, {"style", SymInt(1)}};
  ir::Value* q = add(g, "rope", {sl(0, 4)}, attrs);
  ir::Value* k = add(g, "rope", {sl(4, 6)}, attrs);
  ir::Value* qq = add(g, "mul_scalar", {q}, {{"value", 2.0}});
  g.outputs = {add(g, "attention", {qq, k, k}, {{"seq_len", SymInt(2)}, {"scale", 0.5}})};
  passes::PassContext ctx;
  const auto after = run_pass(g, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*after, "rope"), 1U);
  EXPECT_TRUE(same_results(g, *after, random_inputs(g, 5)));
  // Different attributes (theta) or a rope result that is a graph output: no merge.
  ir::Graph h;
  ir::Value* y = h.add_input("y", meta({2, 6, 4}), ir::InputKind::input);
  const auto sl2 = [&](std::int64_t a, std::int64_t b) {
    return add(h, "slice", {y},
               {{"dim", SymInt(1)}, {"start", SymInt(a)}, {"end", SymInt(b)}, {"step", SymInt(1)}});
  };
  ir::Value* r1 =
      add(h, "rope", {sl2(0, 3)}, {{"pos0", SymInt(0)}, {"theta", 10000.0}, {"style", SymInt(0)}});
  ir::Value* r2 =
      add(h, "rope", {sl2(3, 6)}, {{"pos0", SymInt(0)}, {"theta", 500.0}, {"style", SymInt(0)}});
  h.outputs = {r1, r2};
  const auto same = run_pass(h, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*same, "rope"), 2U);
}

TEST(passes_fusion, silu_with_another_reader_is_not_fused) {
  ir::Graph g;
  ir::Value* a = g.add_input("a", meta({3, 5}), ir::InputKind::input);
  ir::Value* b = g.add_input("b", meta({3, 5}), ir::InputKind::input);
  ir::Value* s = add(g, "silu", {a});
  ir::Value* m = add(g, "mul", {b, s});  // silu on the right
  g.outputs = {m, s};
  passes::PassContext ctx;
  EXPECT_EQ(count_op(*run_pass(g, "pattern_fusion_pass", ctx), "silu_mul"), 0U);
  g.outputs = {m};
  const auto after = run_pass(g, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*after, "silu_mul"), 1U);
  EXPECT_TRUE(same_results(g, *after, random_inputs(g, 6)));
}

TEST(passes_fusion, add_rms_norm_golden_graph_fuses_where_sound_and_agrees_bitwise) {
  const auto g = golden_input("add_rms_norm.ir");
  passes::PassContext ctx;
  const auto after = run_pass(*g, "pattern_fusion_pass", ctx);
  EXPECT_EQ(count_op(*after, "add_rms_norm"), 3U);  // %s1, %s2, %hs (the file says why)
  EXPECT_EQ(count_op(*after, "rms_norm"), 6U);
  for (std::uint32_t seed = 8; seed < 12; ++seed) {
    EXPECT_TRUE(same_results(*g, *after, random_inputs(*g, seed)));
  }
}

// s = add(x, r); n = rms_norm(s, w); out = mul(s, n): both halves are read.
// In every floating dtype and at last dims around the 8-lane blocks, the
// fused graph is bitwise the unfused one; then the in-place pass runs on the
// result too (nothing may write over a half that is read later).
TEST(passes_fusion, add_rms_norm_agrees_bitwise_across_dtypes_and_shapes) {
  const std::vector<std::vector<SymInt>> shapes = {{7},      {2, 8},  {3, 33},
                                                   {1, 288}, {5, 64}, {SymInt::symbol("s0"), 33}};
  std::uint32_t seed = 100;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& shape : shapes) {
      for (const bool sum_read : {true, false}) {
        ir::Graph g;
        const SymShape sym{std::span<const SymInt>(shape)};
        ir::Value* x = g.add_input("x", meta(sym, dtype), ir::InputKind::input);
        ir::Value* r = g.add_input("r", meta(sym, dtype), ir::InputKind::input);
        ir::Value* w = g.add_input("w", meta({shape.back()}, dtype), ir::InputKind::param);
        ir::Value* s = add(g, "add", {x, r}, {}, "s");
        ir::Value* n = add(g, "rms_norm", {s, w}, {{"eps", 1e-5}}, "n");
        g.outputs = {sum_read ? add(g, "mul", {s, n}, {}, "out") : add(g, "neg", {n}, {}, "out")};
        passes::PassContext ctx;
        const auto after = run_pass(g, "pattern_fusion_pass", ctx);
        const std::string trace = ir::print(g) + ir::print(*after);
        EXPECT_EQ(count_op(*after, "add_rms_norm"), 1U) << trace;
        EXPECT_EQ(count_op(*after, "add"), 0U) << trace;
        EXPECT_EQ(count_op(*after, "slice"), sum_read ? 2U : 1U) << trace;
        EXPECT_TRUE(same_results(g, *after, random_inputs(g, ++seed))) << trace;
        const auto in_place = run_pass(*after, "inplace_pass", ctx);
        EXPECT_TRUE(same_results(g, *in_place, random_inputs(g, ++seed))) << ir::print(*in_place);
      }
    }
  }
}

TEST(passes_fusion, fuse_elementwise_golden_graph_agrees_bitwise) {
  const auto g = golden_input("fuse_elementwise.ir");
  const NamedInputs named = random_inputs(*g, 7);
  passes::PassContext ctx;
  const auto after = run_pass(*g, "fuse_elementwise", ctx);
  EXPECT_GE(count_op(*after, "fused_elementwise"), 4U);
  EXPECT_TRUE(same_results(*g, *after, named));
}

// Random elementwise trees over broadcast inputs, in every floating dtype:
// the fused graph must be bitwise equal to the original.
TEST(passes_fusion, fuse_elementwise_random_trees_agree_bitwise) {
  const char* unary[] = {"neg", "exp",  "relu",       "silu",      "gelu",
                         "erf", "tanh", "sigmoid",    "hardswish", "hardsigmoid",
                         "cos", "sin",  "add_scalar", "mul_scalar"};
  const char* binary[] = {"add", "sub", "mul", "div"};
  std::mt19937 rng(42);
  std::size_t fused_total = 0;
  for (int iter = 0; iter < 60; ++iter) {
    const DType dtype = iter % 3 == 0 ? DType::f32 : iter % 3 == 1 ? DType::f16 : DType::bf16;
    ir::Graph g;
    std::vector<ir::Value*> pool = {g.add_input("x", meta({4, 6}, dtype), ir::InputKind::input),
                                    g.add_input("r", meta({6}, dtype), ir::InputKind::input),
                                    g.add_input("c", meta({4, 1}, dtype), ir::InputKind::input)};
    const int steps = 3 + static_cast<int>(rng() % 30);
    for (int i = 0; i < steps; ++i) {
      // Mostly extend the newest value: long single-use chains, some fan-out.
      ir::Value* v = rng() % 4 != 0 ? pool.back() : pool[rng() % pool.size()];
      if (rng() % 2 == 0) {
        const std::string name = unary[rng() % std::size(unary)];
        std::vector<ir::NamedAttr> attrs;
        if (name == "add_scalar" || name == "mul_scalar")
          attrs.push_back({"value", 0.25 * (rng() % 9)});
        pool.push_back(add(g, name, {v}, attrs));
      } else {
        ir::Value* w = pool[rng() % pool.size()];
        pool.push_back(add(g, binary[rng() % std::size(binary)], {v, w}));
      }
    }
    g.outputs = {pool.back()};
    if (rng() % 3 == 0) g.outputs.push_back(pool[pool.size() / 2]);
    passes::PassContext ctx;
    const auto after = run_pass(g, "fuse_elementwise", ctx);
    fused_total += count_op(*after, "fused_elementwise");
    EXPECT_LE(after->nodes().size(), g.nodes().size());
    EXPECT_TRUE(same_results(g, *after, random_inputs(g, static_cast<std::uint32_t>(iter))))
        << "iteration " << iter << "\n"
        << ir::print(g) << ir::print(*after);
  }
  EXPECT_GT(fused_total, 60U);
}

TEST(passes_fusion, fuse_elementwise_leaves_chains_over_written_tensors_alone) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", meta({4}), ir::InputKind::mutated);
  ir::Value* e = add(g, "exp", {x});
  ir::Value* src = g.add_input("s", meta({4}), ir::InputKind::input);
  add(g, "copy_", {x, src});
  g.outputs = {add(g, "neg", {e})};
  passes::PassContext ctx;
  const auto after = run_pass(g, "fuse_elementwise", ctx);
  EXPECT_EQ(count_op(*after, "fused_elementwise"), 0U);
}

}  // namespace
}  // namespace sgtest

// remove_noop_ops: which nodes go, which stay, and equal interpreter results
// (by value: adding 0 may turn -0.0 into +0.0).
#include "pass_test_util.h"

namespace sgtest {
namespace {

using ir::InputKind;

std::vector<ir::NamedAttr> slice_attrs(SymInt dim, SymInt start, SymInt end, SymInt step = 1) {
  return {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}};
}

TEST(passes_remove_noop_ops, RemovesIdentityViews) {
  ir::Graph g("g");
  const SymInt s0 = SymInt::symbol("s0");
  ir::Value* x = g.add_input("x", meta({s0, 4}), InputKind::input);
  ir::Value* h = add(g, "relu", {x}, {}, "h");
  ir::Value* v = add(g, "view", {h}, {{"shape", std::vector<SymInt>{s0, 4}}});
  ir::Value* t = add(g, "transpose", {v}, {{"dim0", SymInt(1)}, {"dim1", SymInt(-1)}});
  ir::Value* p = add(g, "permute", {t}, {{"dims", dims({0, 1})}});
  ir::Value* s = add(g, "slice", {p}, slice_attrs(0, 0, s0));
  ir::Value* s2 = add(g, "slice", {s}, slice_attrs(-1, 0, 4));
  g.outputs = {add(g, "exp", {s2}, {}, "y")};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(op_names(*out), (std::vector<std::string>{"relu", "exp"}));
  EXPECT_EQ(out->nodes().back()->operands.at(0)->name, "h");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_remove_noop_ops, KeepsViewsThatChangeSomething) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({4, 4}), InputKind::input);
  ir::Value* h = add(g, "relu", {x});
  g.outputs = {
      add(g, "view", {h}, {{"shape", dims({16})}}),
      add(g, "transpose", {h}, {{"dim0", SymInt(0)}, {"dim1", SymInt(1)}}),
      add(g, "permute", {h}, {{"dims", dims({1, 0})}}),
      add(g, "slice", {h}, slice_attrs(0, 0, 4, 2)),
      add(g, "slice", {h}, slice_attrs(0, 1, 4)),
      add(g, "slice", {h}, slice_attrs(1, 0, 3)),
  };
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(out->nodes().size(), g.nodes().size());
}

TEST(passes_remove_noop_ops, RemovesArithmeticIdentities) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* h = add(g, "neg", {x}, {}, "h");
  ir::Value* a = add(g, "add", {h, full(g, dims({1}), -0.0)});
  ir::Value* b = add(g, "mul", {full(g, dims({3, 4}), 1.0), a});
  ir::Value* c = add(g, "add_scalar", {b}, {{"value", -0.0}});
  ir::Value* d = add(g, "mul_scalar", {c}, {{"value", 1.0}});
  ir::Value* e = add(g, "add", {d, full(g, dims({4}), -0.0)});
  g.outputs = {add(g, "exp", {e}, {}, "y")};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(count_op(*out, "add") + count_op(*out, "mul") + count_op(*out, "add_scalar") +
                count_op(*out, "mul_scalar"),
            0U);
  EXPECT_EQ(out->nodes().back()->operands.at(0)->name, "h");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_remove_noop_ops, RemovesAddOfEitherZeroOnIntegers) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3}, DType::i64), InputKind::input);
  ir::Value* h = add(g, "add", {x, x}, {}, "h");
  ir::Value* a = add(g, "add", {h, full(g, dims({3}), 0.0, DType::i64)});
  g.outputs = {add(g, "add", {full(g, dims({1}), -0.0, DType::i64), a}, {}, "y")};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(count_op(*out, "add"), 1U);  // h itself
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

// x + +0.0 is -0.0 + +0.0 = +0.0 where x is -0.0, and rsqrt then gives +inf
// instead of -inf: found by passes_property.
TEST(passes_remove_noop_ops, KeepsAddOfPositiveZeroOnFloats) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* z = add(g, "mul_scalar", {x}, {{"value", -0.0}});  // -0.0 where x > 0
  ir::Value* a = add(g, "add_scalar", {z}, {{"value", 0.0}});
  ir::Value* b = add(g, "add", {full(g, dims({4}), 0.0), z});
  g.outputs = {add(g, "rsqrt", {a}), add(g, "rsqrt", {b})};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(out->nodes().size(), g.nodes().size());
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_remove_noop_ops, KeepsArithmeticThatChangesSomething) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({4}), InputKind::input);
  ir::Value* h = add(g, "neg", {x});
  g.outputs = {
      add(g, "add", {h, full(g, dims({3, 4}), 0.0)}),  // broadcasts h to [3,4]
      add(g, "add", {h, full(g, dims({4}), 1.0)}),    add(g, "mul", {h, full(g, dims({4}), 0.0)}),
      add(g, "mul_scalar", {h}, {{"value", 2.0}}),    add(g, "add_scalar", {h}, {{"value", 1e-30}}),
  };
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(out->nodes().size(), g.nodes().size());
}

TEST(passes_remove_noop_ops, RemovesContiguousOfContiguousValues) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* cx = add(g, "contiguous", {x});  // a graph input may be strided: kept
  ir::Value* h = add(g, "relu", {cx}, {}, "h");
  ir::Value* ch = add(g, "contiguous", {h});
  ir::Value* t = add(g, "transpose", {ch}, {{"dim0", SymInt(0)}, {"dim1", SymInt(1)}});
  ir::Value* ct = add(g, "contiguous", {t}, {}, "ct");  // a real copy: kept
  g.outputs = {add(g, "view", {ct}, {{"shape", dims({12})}}, "y")};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(op_names(*out),
            (std::vector<std::string>{"contiguous", "relu", "transpose", "contiguous", "view"}));
  EXPECT_EQ(out->nodes().front()->operands.at(0)->name, "x");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

TEST(passes_remove_noop_ops, NeverTurnsAnOutputIntoAnInput) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* v = add(g, "view", {x}, {{"shape", dims({3, 4})}});
  ir::Value* c = add(g, "contiguous", {x});
  ir::Value* a = add(g, "add_scalar", {v}, {{"value", 0.0}});  // would alias x's storage
  g.outputs = {v, c, a};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(out->nodes().size(), 3U);
  for (const ir::Value* o : out->outputs) EXPECT_FALSE(o->is_input());
}

TEST(passes_remove_noop_ops, KeepsCopiesOfWrittenTensors) {
  ir::Graph g("g");
  ir::Value* cache = g.add_input("cache", meta({2, 3}), InputKind::mutated);
  ir::Value* x = g.add_input("x", meta({2, 3}), InputKind::input);
  ir::Value* snapshot = add(g, "contiguous", {cache});  // must copy: cache changes below
  add(g, "copy_", {cache, x});
  ir::Value* h = add(g, "relu", {x});
  ir::Value* y = add(g, "mul_scalar", {h}, {{"value", 1.0}});  // y is written below
  add(g, "fill_", {y}, {{"value", 3.0}});
  g.outputs = {add(g, "neg", {snapshot}), h, y};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(out->nodes().size(), g.nodes().size());
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

// Found by passes_property (seed 14950094578263905335): a `full` -0.0 written
// through a slice no longer holds -0.0, so adding it is no identity.
TEST(passes_remove_noop_ops, KeepsArithmeticWithWrittenConstants) {
  ir::Graph g("g");
  ir::Value* x = g.add_input("x", meta({3, 4}), InputKind::input);
  ir::Value* h = add(g, "neg", {x});
  ir::Value* zeros = full(g, dims({3, 4}), -0.0);
  ir::Value* rows = add(g, "slice", {zeros},
                        {{"dim", SymInt(0)},
                         {"start", SymInt(0)},
                         {"end", SymInt(3)},
                         {"step", SymInt(1)}});  // a whole-tensor view: removed
  add(g, "fill_", {rows}, {{"value", 1.0}});
  ir::Value* ones = full(g, dims({3, 4}), 1.0);
  add(g, "copy_", {ones, x});
  g.outputs = {add(g, "add", {h, zeros}), add(g, "mul", {ones, h})};
  auto out = run_pass(g, "remove_noop_ops");
  EXPECT_EQ(count_op(*out, "slice"), 0U);
  EXPECT_EQ(count_op(*out, "add"), 1U);
  EXPECT_EQ(count_op(*out, "mul"), 1U);
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
}

// Note [Grouped heads read in place]: repeat_kv's copies of the kv heads, read
// only by a heads-first sdpa, give way to the kv heads themselves.
ir::Value* repeat_heads(ir::Graph& g, ir::Value* x, std::int64_t r) {
  const SymShape& s = x->meta.shape;
  const std::int64_t b = *s[0].maybe_value(), hkv = *s[1].maybe_value(), n = *s[2].maybe_value(),
                     d = *s[3].maybe_value();
  ir::Value* u = add(g, "unsqueeze", {x}, {{"dim", SymInt(2)}});
  ir::Value* e = add(g, "expand", {u}, {{"shape", dims({b, hkv, r, n, d})}});
  ir::Value* c = add(g, "contiguous", {e});
  return add(g, "view", {c}, {{"shape", dims({b, hkv * r, n, d})}});
}

ir::Value* sdpa_mask(ir::Graph& g, ir::Value* q, ir::Value* k, ir::Value* v, ir::Value* mask) {
  return add(g, "sdpa_mask", {q, k, v, mask}, {{"heads", std::int64_t{8}}, {"scale", 0.5}}, "y");
}

// q [b, 8, 3, 4], k/v caches [b, 2, 5, 4] and a mask [1, 1, 3, 5]; `kc_kind`
// marks a cache the graph writes.
struct Attention {
  ir::Value *q, *kc, *vc, *mask;
};
Attention attention_inputs(ir::Graph& g, std::int64_t b, InputKind kc_kind = InputKind::input) {
  return {g.add_input("q", meta({b, 8, 3, 4}), InputKind::input),
          g.add_input("kc", meta({b, 2, 5, 4}), kc_kind),
          g.add_input("vc", meta({b, 2, 5, 4}), InputKind::input),
          g.add_input("mask", meta({1, 1, 3, 5}), InputKind::input)};
}

TEST(passes_remove_noop_ops, ReadsGroupedHeadsInPlace) {
  ir::Graph g("g");
  const Attention a = attention_inputs(g, 2);
  ir::Value* k = repeat_heads(g, a.kc, 4);
  ir::Value* v = repeat_heads(g, a.vc, 4);
  g.outputs = {sdpa_mask(g, a.q, k, v, a.mask)};
  auto out = run_pass(g, "remove_noop_ops");
  const ir::Node& attention = *out->nodes().back();
  EXPECT_EQ(attention.operands.at(1)->name, "kc");
  EXPECT_EQ(attention.operands.at(2)->name, "vc");
  EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
  passes::PassContext ctx;
  passes::find_pass("dce").run(*out, ctx);
  EXPECT_EQ(count_op(*out, "contiguous"), 0U);
}

TEST(passes_remove_noop_ops, KeepsGroupedHeadCopiesItCannotDrop) {
  // A write into the cache between the copy and the attention: the copy holds
  // the values from before it.
  {
    ir::Graph g("g");
    const Attention a = attention_inputs(g, 1, InputKind::mutated);
    ir::Value* k = repeat_heads(g, a.kc, 4);
    ir::Value* v = repeat_heads(g, a.vc, 4);
    add(g, "fill_", {a.kc}, {{"value", 3.0}});
    g.outputs = {sdpa_mask(g, a.q, k, v, a.mask)};
    auto out = run_pass(g, "remove_noop_ops");
    EXPECT_EQ(out->nodes().back()->operands.at(1)->name, k->name);
    EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
  }
  // Only k broadcast (v has all its heads): k and v must keep one shape.
  {
    ir::Graph g("g");
    ir::Value* q = g.add_input("q", meta({1, 8, 3, 4}), InputKind::input);
    ir::Value* kc = g.add_input("kc", meta({1, 2, 5, 4}), InputKind::input);
    ir::Value* v = g.add_input("v", meta({1, 8, 5, 4}), InputKind::input);
    ir::Value* mask = g.add_input("mask", meta({1, 1, 3, 5}), InputKind::input);
    ir::Value* k = repeat_heads(g, kc, 4);
    g.outputs = {sdpa_mask(g, q, k, v, mask)};
    auto out = run_pass(g, "remove_noop_ops");
    EXPECT_EQ(out->nodes().back()->operands.at(1)->name, k->name);
  }
  // The copy read elsewhere too: the attention reads the kv heads, the copy
  // stays for its other reader.
  {
    ir::Graph g("g");
    const Attention a = attention_inputs(g, 1);
    ir::Value* k = repeat_heads(g, a.kc, 4);
    ir::Value* v = repeat_heads(g, a.vc, 4);
    g.outputs = {sdpa_mask(g, a.q, k, v, a.mask), add(g, "exp", {k})};
    auto out = run_pass(g, "remove_noop_ops");
    passes::PassContext ctx;
    passes::find_pass("dce").run(*out, ctx);
    EXPECT_EQ(count_op(*out, "contiguous"), 1U);
    EXPECT_TRUE(same_results(g, *out, random_inputs(g)));
  }
}

}  // namespace
}  // namespace sgtest

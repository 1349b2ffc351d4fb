// Property: every pass preserves every bit of what the interpreter computes
// (outputs and the final contents of written inputs) on random small graphs
// with random inputs. The graphs mix elementwise math, constants, identity views, copies
// and in-place writes (to a `mutated` input and to temporaries).
// rapidcheck/gtest.h needs gtest included first.
// clang-format off
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
// clang-format on

#include "pass_test_util.h"

namespace sgtest {
namespace {

using ir::InputKind;

const ir::Value* root_of(const ir::Value* v) {
  while (v->producer != nullptr && v->producer->op->schema.alias_of >= 0) {
    v = v->producer->operands.at(static_cast<std::size_t>(v->producer->op->schema.alias_of));
  }
  return v;
}

template <typename T>
T pick(const std::vector<T>& options) {
  return options.at(*rc::gen::inRange<std::size_t>(0, options.size()));
}

std::unique_ptr<ir::Graph> random_graph() {
  auto g = std::make_unique<ir::Graph>("random");
  std::vector<ir::Value*> pool = {
      g->add_input("x", meta({3, 4}), InputKind::input),
      g->add_input("w", meta({3, 4}), InputKind::param),
      g->add_input("v", meta({4}), InputKind::param),
      g->add_input("cache", meta({3, 4}), InputKind::mutated),
  };
  const std::vector<std::vector<SymInt>> shapes = {{3, 4}, {1, 4}, {4}, {1}, {3, 1}};
  const std::vector<double> values = {0.0, -0.0, 1.0, 2.0, -0.5, 0.25};
  const int n = *rc::gen::inRange(2, 20);
  for (int i = 0; i < n; ++i) {
    ir::Value* a = pick(pool);
    ir::Value* b = pick(pool);
    ir::Value* made = nullptr;
    switch (*rc::gen::inRange(0, 9)) {
      case 0:
      case 1:
        made = add(*g, pick<std::string>({"add", "sub", "mul", "div"}), {a, b});
        break;
      case 2:
        made = add(*g, pick<std::string>({"add_scalar", "mul_scalar"}), {a},
                   {{"value", pick(values)}});
        break;
      case 3:
        made = add(*g, pick<std::string>({"neg", "exp", "relu", "silu", "gelu", "sqrt", "rsqrt"}),
                   {a});
        break;
      case 4:
        made = full(*g, pick(shapes), pick(values));
        break;
      case 5:
        made = add(*g, "contiguous", {a});
        break;
      case 6: {
        const auto& s = a->meta.shape;
        if (*rc::gen::arbitrary<bool>()) {
          made = add(*g, "view", {a}, {{"shape", std::vector<SymInt>(s.begin(), s.end())}});
        } else {
          made =
              add(*g, "slice", {a},
                  {{"dim", SymInt(0)}, {"start", SymInt(0)}, {"end", s[0]}, {"step", SymInt(1)}});
        }
        break;
      }
      case 7:
      case 8: {
        // Write in place into the mutated input or a temporary, never x or a param.
        const ir::Value* root = root_of(a);
        if (root->is_input() && root->kind != InputKind::mutated) break;
        if (*rc::gen::arbitrary<bool>()) {
          made = add(*g, "fill_", {a}, {{"value", pick(values)}});
        } else if (sinkgraph::broadcast_shapes(a->meta.shape, b->meta.shape, "copy_") ==
                   a->meta.shape) {
          made = add(*g, "copy_", {a, b});
        }
        break;
      }
      default:
        break;
    }
    if (made != nullptr) pool.push_back(made);
  }
  // The last value made, and maybe more.
  g->outputs.push_back(pool.back());
  const int outs = *rc::gen::inRange(0, 3);
  for (int i = 0; i < outs; ++i) g->outputs.push_back(pick(pool));
  return g;
}

void check_pass(const std::vector<std::string>& names) {
  const auto g = random_graph();
  const NamedInputs inputs = random_inputs(*g, *rc::gen::arbitrary<std::uint32_t>());
  passes::PassContext ctx;
  ctx.frozen_parameter = *rc::gen::arbitrary<bool>();
  for (const char* p : {"w", "v"}) ctx.param_data[p] = std::get<Tensor>(inputs.at(p));
  auto out = g->clone();
  passes::PassManager pm;
  for (const auto& name : names) pm.add(passes::find_pass(name));
  pm.run(*out, ctx);
  RC_CLASSIFY(out->nodes().size() < g->nodes().size(), "removed nodes");
  RC_CLASSIFY(out->inputs().size() > g->inputs().size(), "folded params");
  RC_ASSERT(out->inputs().size() >= g->inputs().size());
  RC_ASSERT(out->nodes().size() <= g->nodes().size());
  for (std::size_t i = 0; i < out->outputs.size(); ++i) {  // no output newly becomes an input
    RC_ASSERT(!out->outputs[i]->is_input() || g->outputs[i]->is_input());
  }
  const auto result = same_results(*g, *out, inputs, &ctx);
  if (!result)
    RC_FAIL(std::string(result.message()) + "\nbefore:\n" + ir::print(*g) + "after:\n" +
            ir::print(*out));
}

RC_GTEST_PROP(passes_property, DcePreservesResults, ()) { check_pass({"dce"}); }

RC_GTEST_PROP(passes_property, CsePreservesResults, ()) { check_pass({"cse"}); }

RC_GTEST_PROP(passes_property, ConstantFoldingPreservesResults, ()) {
  check_pass({"constant_folding"});
}

RC_GTEST_PROP(passes_property, RemoveNoopOpsPreservesResults, ()) {
  check_pass({"remove_noop_ops"});
}

// The in-place passes change where results live, never what they are: the
// interpreter follows their hints.
RC_GTEST_PROP(passes_property, InPlacePassesPreserveResults, ()) {
  check_pass({"inplace_pass", "input_inplace_pass", "remove_cat_ops"});
}

RC_GTEST_PROP(passes_property, InPlacePassesAfterCleanupPreserveResults, ()) {
  check_pass({"constant_folding", "remove_noop_ops", "cse", "dce", "input_inplace_pass",
              "inplace_pass", "dce", "cse", "remove_noop_ops"});
}

RC_GTEST_PROP(passes_property, AllPassesPreserveResults, ()) {
  check_pass({"constant_folding", "remove_noop_ops", "cse", "dce"});
}

}  // namespace
}  // namespace sgtest

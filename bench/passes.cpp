// Pass cost against graph size (hostile input issue): every pass over chains
// of 10^3, 10^4 and 10^5 nodes. A near-linear pass costs about the same per
// node at every size; a quadratic one costs 10x more per node at each step.
//
// The chain mixes what each pass acts on: elementwise operators (in-place
// reuse, fusion), a copy into a mutated input (input_inplace_pass), no-ops
// (remove_noop_ops: `mul_scalar(x, 1)`), duplicates (cse), constants
// (constant_folding: `full` then `add_scalar`) and dead branches (dce).
#include "sinkgraph/passes.h"

#include <benchmark/benchmark.h>

#include "sinkgraph/ir.h"
#include "sinkgraph/op_registry.h"

namespace sg = sinkgraph;

namespace {

const sg::OpDef& op(const char* name) { return sg::OpRegistry::instance().get(name); }

std::unique_ptr<sg::ir::Graph> chain(std::int64_t n) {
  auto g = std::make_unique<sg::ir::Graph>("chain");
  const sg::TensorMeta meta{sg::DType::f32, sg::SymShape{64}, sg::DeviceType::cpu};
  sg::ir::Value* x = g->add_input("x", meta, sg::ir::InputKind::input);
  sg::ir::Value* out = g->add_input("out", meta, sg::ir::InputKind::mutated);
  const char* unary[] = {"relu", "neg", "exp", "silu"};
  for (std::int64_t i = 0; i < n; ++i) {
    switch (i % 8) {
      case 0:  // a no-op
        x = g->add_node(op("mul_scalar"), {x}, {{"value", 1.0}})->result();
        break;
      case 1: {  // a duplicate, then a use of both
        sg::ir::Value* a = g->add_node(op("neg"), {x}, {})->result();
        sg::ir::Value* b = g->add_node(op("neg"), {x}, {})->result();
        x = g->add_node(op("add"), {a, b}, {})->result();
        i += 2;
        break;
      }
      case 2: {  // a constant folded into the chain
        sg::ir::Value* c = g->add_node(op("full"), {},
                                       {{"shape", std::vector<sg::SymInt>{64}},
                                        {"value", 0.5},
                                        {"dtype", sg::DType::f32}})
                               ->result();
        sg::ir::Value* c2 = g->add_node(op("add_scalar"), {c}, {{"value", 1.0}})->result();
        x = g->add_node(op("mul"), {x, c2}, {})->result();
        i += 2;
        break;
      }
      case 3:  // a dead branch
        (void)g->add_node(op("exp"), {x}, {});
        break;
      default:
        x = g->add_node(op(unary[i % 4]), {x}, {})->result();
        break;
    }
  }
  (void)g->add_node(op("copy_"), {out, x}, {});
  g->outputs.push_back(x);
  return g;
}

void run_pass(benchmark::State& state, const char* name) {
  const sg::passes::Pass& pass = sg::passes::find_pass(name);
  const std::int64_t n = state.range(0);
  for (auto _ : state) {
    state.PauseTiming();
    auto g = chain(n);
    sg::passes::PassContext ctx;
    state.ResumeTiming();
    pass.run(*g, ctx);
    benchmark::DoNotOptimize(g);
    state.PauseTiming();
    g.reset();
    state.ResumeTiming();
  }
  state.counters["per_node"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}

#define SG_PASS_BENCH(pass)                                           \
  void BM_##pass(benchmark::State& state) { run_pass(state, #pass); } \
  BENCHMARK(BM_##pass)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond)

SG_PASS_BENCH(dce);
SG_PASS_BENCH(cse);
SG_PASS_BENCH(constant_folding);
SG_PASS_BENCH(remove_noop_ops);
SG_PASS_BENCH(inplace_pass);
SG_PASS_BENCH(input_inplace_pass);
SG_PASS_BENCH(remove_cat_ops);
SG_PASS_BENCH(pattern_fusion_pass);
SG_PASS_BENCH(fuse_elementwise);

// Memory planning (max-autotune, at capture) over the same chains.
void BM_plan_memory(benchmark::State& state) {
  const auto g = chain(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(sg::passes::plan_memory(*g, {}, /*assign=*/true).arena_bytes);
  }
  state.counters["per_node"] = benchmark::Counter(
      static_cast<double>(state.range(0)),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_plan_memory)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond);

// The verifier runs after every pass (PassManager): it must be linear too.
void BM_verify(benchmark::State& state) {
  const auto g = chain(state.range(0));
  for (auto _ : state) sg::ir::verify(*g, "chain");
  state.counters["per_node"] = benchmark::Counter(
      static_cast<double>(state.range(0)),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_verify)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

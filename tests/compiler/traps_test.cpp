// The silent-mismatch traps of graph replay (tinygrad's test_jit_footguns):
// each is shown caught, or shown happening exactly as documented.
//
// Caught or refused, with their regression tests in replay_safety_test.cpp:
//  - an output overwritten by a later replay: the stale-output error (trap 2);
//  - another thread's call overwriting your output: the stale-output error,
//    never its values (clone_output avoids it);
//  - a transposed view at the same address: a contiguity/stride guard re-traces
//    and in-place inputs' strides are in the graph key;
//  - arguments aliasing each other (f(b, b)): guarded, traced as one input;
//    overlapping views that are not the same view are refused;
//  - a weight reassigned on a model that lists named_parameters(): re-traced
//    (not listed: trap 6 below, documented);
//  - a symbolic size compared with == while tracing: refused;
//  - an in-place write to a frozen param: refused;
//  - a new KV cache every call: a key per address set, and one warning once
//    re-captures pile up.
#include <gtest/gtest.h>

#include "../trace/models.h"
#include "helpers.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"

namespace {

namespace sg = sinkgraph;
using sgtest::reduce_overhead;

// Trap 1: a value baked in at capture. A plain integer is specialized and
// guarded (a new value re-traces); a sym that feeds a shape is in the graph
// key (a new value captures a new graph). Neither silently reuses the old value.
TEST(compiler_traps, values_are_never_silently_baked_in) {
  const auto head = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(a[0]);
    return {sg::ops::mul_scalar(sg::ops::slice(x, 0, 0, std::get<sg::SymInt>(a[1])),
                                static_cast<double>(std::get<std::int64_t>(a[2])))};
  };
  auto fn = sg::compile(head, sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3, 4}, {4});
  EXPECT_EQ((*fn)({x, sg::SymInt(2), std::int64_t{10}})[0].to_floats(),
            (std::vector<float>{10, 20}));
  EXPECT_EQ((*fn)({x, sg::SymInt(3), std::int64_t{10}})[0].to_floats(),
            (std::vector<float>{10, 20, 30}));
  EXPECT_EQ((*fn)({x, sg::SymInt(3), std::int64_t{-1}})[0].to_floats(),
            (std::vector<float>{-1, -2, -3}));
  EXPECT_EQ(fn->num_traces(), 2);         // the integer changed once
  EXPECT_EQ(fn->counters().captured, 3);  // n=2, n=3, then n=3 in the new trace
}

// Trap 2: outputs overwritten by the next replay. Caught: using a stale output
// raises (details in captured_graph_test.cpp).
TEST(compiler_traps, overwritten_outputs_are_caught) {
  const sgtest::Mlp mlp;
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(reduce_overhead()));
  const sg::Tensor a = (*fn)({sgtest::random_tensor({2, 64}, 1)})[0];
  const sg::Tensor b = (*fn)({sgtest::random_tensor({2, 64}, 2)})[0];
  EXPECT_THROW((void)a.to_floats(), sg::Error);
  EXPECT_NO_THROW((void)b.to_floats());
}

// Trap 3: inputs changed behind the graph's back. User inputs are copied in
// the replay's own queue entry, so a later in-place write never reaches a
// replay already enqueued; mutated inputs and params are read in place, so
// eager writes between calls are seen. Documented, and shown here.
TEST(compiler_traps, inputs_changed_between_calls_behave_as_in_eager) {
  const sgtest::AttentionBlock block;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(std::cref(block), sg::get_backend(c));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 3);
  const sg::Tensor kc = sg::ops::zeros({16, 4, 8}), vc = sg::ops::zeros({16, 4, 8});
  const sg::Tensor first = (*fn)({x, sg::SymInt(0), kc, vc})[0];
  sg::ops::fill_(x, 0.25);  // enqueued after the replay's copy of x
  const sg::Tensor kc_e = sg::ops::zeros({16, 4, 8}), vc_e = sg::ops::zeros({16, 4, 8});
  const sg::Tensor x0 = sgtest::random_tensor({1, 32}, 3);
  EXPECT_EQ(first.to_floats(),
            block(std::vector<sg::Arg>{x0, sg::SymInt(0), kc_e, vc_e})[0].to_floats());
  // An eager write into the cache between calls is seen by the next replay.
  sg::ops::fill_(sg::ops::narrow(vc, 0, 0, 1), 3.0);
  sg::ops::fill_(sg::ops::narrow(vc_e, 0, 0, 1), 3.0);
  const auto got = (*fn)({x, sg::SymInt(1), kc, vc})[0].to_floats();
  EXPECT_EQ(got, block(std::vector<sg::Arg>{x, sg::SymInt(1), kc_e, vc_e})[0].to_floats());
  // So is an in-place write to a param: params are never copied.
  sg::ops::fill_(block.wo, 0.0);
  for (const float v : (*fn)({x, sg::SymInt(2), kc, vc})[0].to_floats()) EXPECT_EQ(v, 0.0F);
}

// Trap 4: host-side state in the traced function runs once, at trace time,
// not on every replay. Documented; shown here.
TEST(compiler_traps, host_side_state_updates_only_when_tracing) {
  int host_calls = 0;
  const auto body = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    ++host_calls;  // a host-side side effect: not part of the graph
    return {sg::ops::relu(std::get<sg::Tensor>(a[0]))};
  };
  auto fn = sg::compile(body, sg::get_backend(reduce_overhead()));
  for (int i = 0; i < 5; ++i)
    (void)(*fn)({sgtest::random_tensor({4}, static_cast<std::uint32_t>(i))});
  EXPECT_EQ(host_calls, 1);
  EXPECT_EQ(fn->counters().replayed, 5);
}

// Trap 5: clone_input=false (TorchAir's behaviour). The graph reads the first
// caller's tensor directly; a later call with another tensor is copied INTO
// the first caller's tensor, overwriting it. Documented; shown here.
TEST(compiler_traps, clone_input_false_overwrites_the_first_callers_tensor) {
  sg::CompilerConfig c = reduce_overhead();
  c.clone_input = false;
  c.clone_output = true;
  const auto body = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), 2.0)};
  };
  auto fn = sg::compile(body, sg::get_backend(c));
  const sg::Tensor first = sg::Tensor::from_floats({1, 2}, {2});
  const sg::Tensor second = sg::Tensor::from_floats({5, 6}, {2});
  EXPECT_EQ((*fn)({first})[0].to_floats(), (std::vector<float>{2, 4}));
  EXPECT_EQ((*fn)({second})[0].to_floats(), (std::vector<float>{10, 12}));  // right answer...
  EXPECT_EQ(first.to_floats(), (std::vector<float>{5, 6}));  // ...but `first` was overwritten
  // With the default clone_input=true the caller's tensors are never written.
  auto safe = sg::compile(body, sg::get_backend(reduce_overhead()));
  const sg::Tensor one = sg::Tensor::from_floats({1, 2}, {2});
  (void)(*safe)({one});
  (void)(*safe)({sg::Tensor::from_floats({7, 8}, {2})});
  EXPECT_EQ(one.to_floats(), (std::vector<float>{1, 2}));
}

// Trap 6: a weight reassigned on a model object that does not list its
// parameters. The tracer lifted the tensor it saw; the graph keeps reading it.
// Documented; shown here. A model with named_parameters() (sgtest::Mlp), or
// TraceOptions::parameters, is guarded instead (replay_safety_test.cpp).
TEST(compiler_traps, a_reassigned_weight_of_an_unlisted_model_is_used_stale) {
  struct Unlisted {
    sg::Tensor w = sgtest::random_tensor({4, 4}, 1);
    std::vector<sg::Tensor> operator()(std::span<const sg::Arg> a) const {
      return {sg::ops::matmul(std::get<sg::Tensor>(a[0]), w)};
    }
  } model;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(std::cref(model), sg::get_backend(c));
  const sg::Tensor x = sgtest::random_tensor({2, 4}, 2);
  const auto before = (*fn)({x})[0].to_floats();
  model.w = sgtest::random_tensor({4, 4}, 3);
  EXPECT_EQ((*fn)({x})[0].to_floats(), before);  // still the old weight
  EXPECT_NE(model(std::vector<sg::Arg>{x})[0].to_floats(), before);
}

// Trap 7: a host value the traced function reads from a C++ variable is a
// constant of the graph: changing the variable later changes nothing.
// Documented; shown here. Pass it as an argument (a plain int64 is guarded,
// a SymInt feeds the graph) instead.
TEST(compiler_traps, a_captured_host_variable_is_baked_in) {
  double scale = 2.0;
  const auto body = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), scale)};
  };
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(body, sg::get_backend(c));
  const sg::Tensor x = sg::Tensor::from_floats({1, 2}, {2});
  EXPECT_EQ((*fn)({x})[0].to_floats(), (std::vector<float>{2, 4}));
  scale = 3.0;
  EXPECT_EQ((*fn)({x})[0].to_floats(), (std::vector<float>{2, 4}));  // not {3, 6}
}

}  // namespace

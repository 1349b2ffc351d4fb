// reduce-overhead: capture once per graph key, replay with one launch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "../trace/models.h"
#include "helpers.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/log.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/stream.h"

namespace {

namespace sg = sinkgraph;
using sgtest::error_of;
using sgtest::reduce_overhead;

std::shared_ptr<sg::CompiledFunction> compile_mlp(const sgtest::Mlp& mlp,
                                                  sg::CompilerConfig c = reduce_overhead(),
                                                  bool dynamic = false) {
  sg::TraceOptions options;
  options.graph_name = "mlp";
  if (dynamic) options.dynamic_dims[0] = {0};
  return sg::compile(std::cref(mlp), sg::get_backend(c), options);
}

TEST(compiler_capture, mlp_replay_equals_eager_bitwise_and_follows_its_input) {
  const sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp);
  std::vector<float> previous;
  for (std::uint32_t i = 0; i < 5; ++i) {
    const sg::Tensor x = sgtest::random_tensor({4, 64}, 100 + i);
    const std::vector<float> got = (*fn)({x})[0].to_floats();
    EXPECT_EQ(got, mlp(std::vector<sg::Arg>{x})[0].to_floats()) << "call " << i;
    EXPECT_NE(got, previous) << "a new input must change the output";
    previous = got;
  }
  const sg::GraphCounters c = fn->counters();
  EXPECT_EQ(c.captured, 1);
  EXPECT_EQ(c.replayed, 5);
  EXPECT_NE(fn->explain().find("capture: first call"), std::string::npos) << fn->explain();
}

TEST(compiler_capture, replay_does_no_host_work_beyond_one_queue_entry) {
  const sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp);
  const sg::Tensor x = sgtest::random_tensor({4, 64}, 1);
  const std::vector<float> want = (*fn)({x})[0].to_floats();  // captures
  sg::Stream& stream = sg::current_stream();
  stream.synchronize();
  stream.reset_counters();
  const sg::DispatchCounters before = sg::dispatch_counters();
  const sg::AllocatorStats alloc_before = sg::cpu().allocator().stats();
  std::vector<sg::Tensor> out;
  for (int i = 0; i < 100; ++i) out = (*fn)({x});
  const sg::DispatchCounters after = sg::dispatch_counters();
  const sg::AllocatorStats alloc_after = sg::cpu().allocator().stats();
  EXPECT_EQ(after.dispatches, before.dispatches);
  EXPECT_EQ(after.shape_fns, before.shape_fns);
  EXPECT_EQ(after.launches, before.launches);
  EXPECT_EQ(alloc_after.num_allocs, alloc_before.num_allocs);
  EXPECT_EQ(alloc_after.num_frees, alloc_before.num_frees);
  EXPECT_EQ(stream.counters().launches, 100U) << "exactly one queue entry per replay";
  EXPECT_EQ(out[0].to_floats(), want);
}

TEST(compiler_capture, decode_graph_with_an_updatable_position_captures_once) {
  const sgtest::AttentionBlock block;
  sg::TraceOptions options;
  options.graph_name = "decode";
  options.arg_names = {"x", "pos", "kc", "vc"};
  auto fn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()), options);
  const sg::Tensor kc = sg::ops::zeros({16, 4, 8}), vc = sg::ops::zeros({16, 4, 8});
  const sg::Tensor kc_e = sg::ops::zeros({16, 4, 8}), vc_e = sg::ops::zeros({16, 4, 8});
  for (std::int64_t step = 0; step < 100; ++step) {
    const std::int64_t pos = step % 16;
    if (pos == 0 && step > 0) {  // start the cache over, in both worlds
      sg::ops::fill_(kc, 0), sg::ops::fill_(vc, 0), sg::ops::fill_(kc_e, 0),
          sg::ops::fill_(vc_e, 0);
    }
    const sg::Tensor x = sgtest::random_tensor({1, 32}, 1000 + static_cast<std::uint32_t>(step));
    const auto got = (*fn)({x, sg::SymInt(pos), kc, vc})[0].to_floats();
    const auto want = block(std::vector<sg::Arg>{x, sg::SymInt(pos), kc_e, vc_e})[0].to_floats();
    ASSERT_EQ(got, want) << "step " << step;
  }
  EXPECT_EQ(fn->counters().captured, 1);
  EXPECT_EQ(fn->counters().replayed, 100);
  EXPECT_NE(fn->explain(true).find("updatable pos"), std::string::npos) << fn->explain(true);
}

// Batched decoding's operators take each row's position as an i64 tensor:
// a graph input copied into its static buffer per replay, so positions
// that differ per row and per step never re-capture, in reduce-overhead and
// max-autotune (where they run their kernels between generated regions).
TEST(compiler_capture, batched_decode_positions_are_tensor_inputs_and_never_recapture) {
  constexpr std::int64_t kRows = 3, kHeads = 4, kHead = 8, kCache = 12;
  const sg::Tensor wq = sgtest::random_tensor({kHeads * kHead, 32}, 3);
  const sg::Tensor wk = sgtest::random_tensor({kHeads * kHead, 32}, 4);
  const auto block = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    namespace o = sg::ops;
    const auto& x = std::get<sg::Tensor>(a[0]);    // [B, 32]
    const auto& pos = std::get<sg::Tensor>(a[1]);  // [B] i64
    const auto& kc = std::get<sg::Tensor>(a[2]);   // [B, S, H, D]
    const auto& vc = std::get<sg::Tensor>(a[3]);
    const sg::SymShape heads{kRows, kHeads, kHead};
    const sg::Tensor q = o::rope_rows(o::view(o::linear(x, wq), heads), pos);
    const sg::Tensor k = o::rope_rows(o::view(o::linear(x, wk), heads), pos);
    o::index_copy_rows_(kc, pos, k);
    o::index_copy_rows_(vc, pos, o::view(o::linear(x, wq), heads));
    return {o::silu(o::attention_rows(q, kc, vc, pos))};
  };
  for (const sg::Mode mode : {sg::Mode::reduce_overhead, sg::Mode::max_autotune}) {
    sg::CompilerConfig config = reduce_overhead();
    config.mode = mode;
    sg::TraceOptions options;
    options.graph_name = "batched_decode";
    auto fn = sg::compile(block, sg::get_backend(config), options);
    const sg::Tensor kc = sg::ops::zeros({kRows, kCache, kHeads, kHead}),
                     vc = sg::ops::zeros({kRows, kCache, kHeads, kHead});
    const sg::Tensor kc_e = sg::ops::zeros({kRows, kCache, kHeads, kHead}),
                     vc_e = sg::ops::zeros({kRows, kCache, kHeads, kHead});
    for (std::int64_t step = 0; step < 10; ++step) {
      // Rows at different positions, each advancing; row 1 starts late.
      const sg::Tensor pos =
          sg::Tensor::from_ints({step, std::max<std::int64_t>(step - 4, 0), step + 2}, {kRows});
      const sg::Tensor x =
          sgtest::random_tensor({kRows, 32}, 500 + static_cast<std::uint32_t>(step));
      const auto got = (*fn)({x, pos, kc, vc})[0].to_floats();
      const auto want = block(std::vector<sg::Arg>{x, pos, kc_e, vc_e})[0].to_floats();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        // reduce-overhead runs the eager kernels (bitwise); max-autotune's
        // generated linears round differently (Note [Generated code and
        // float rounding]).
        const float tol = mode == sg::Mode::reduce_overhead ? 0.0F : 1e-4F;
        ASSERT_LE(std::fabs(got[i] - want[i]), tol * (1.0F + std::fabs(want[i])))
            << "step " << step << ", element " << i;
      }
    }
    EXPECT_EQ(fn->counters().captured, 1) << fn->explain();
    EXPECT_EQ(fn->counters().replayed, 10);
  }
}

TEST(compiler_capture, sampling_offset_is_patched_per_replay) {
  // Note [Counter-based sampling]: the draw depends on an updatable offset,
  // so one capture serves every position and each replay draws as eager does.
  const auto body = [](std::span<const sg::Arg> args) {
    const auto& logits = std::get<sg::Tensor>(args[0]);
    return std::vector<sg::Tensor>{
        sg::ops::sample(sg::ops::mul_scalar(logits, 2.0), 0.8, 42, std::get<sg::SymInt>(args[1]))};
  };
  sg::TraceOptions options;
  options.arg_names = {"logits", "pos"};
  auto fn = sg::compile(body, sg::get_backend(reduce_overhead()), options);
  const sg::Tensor logits = sgtest::random_tensor({8, 50}, 7);
  std::set<std::vector<std::int64_t>> distinct;
  for (std::int64_t pos = 0; pos < 20; ++pos) {
    const auto got = (*fn)({logits, sg::SymInt(pos)})[0].to_ints();
    EXPECT_EQ(got, body(std::vector<sg::Arg>{logits, sg::SymInt(pos)})[0].to_ints()) << pos;
    distinct.insert(got);
  }
  EXPECT_EQ(fn->counters().captured, 1);
  EXPECT_GT(distinct.size(), 15U);  // the position changes the draw
  EXPECT_NE(fn->explain(true).find("updatable pos"), std::string::npos) << fn->explain(true);
}

TEST(compiler_capture, fifty_replays_queued_with_one_synchronize_are_all_right) {
  const sgtest::AttentionBlock block;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(std::cref(block), sg::get_backend(c));
  const sg::Tensor kc = sg::ops::zeros({16, 4, 8}), vc = sg::ops::zeros({16, 4, 8});
  std::vector<sg::Tensor> inputs, outputs;
  for (std::int64_t pos = 0; pos < 16; ++pos) {  // fill the cache: no host reads in between
    inputs.push_back(sgtest::random_tensor({1, 32}, 50 + static_cast<std::uint32_t>(pos)));
    outputs.push_back((*fn)({inputs.back(), sg::SymInt(pos), kc, vc})[0]);
  }
  for (int i = 16; i < 50; ++i) {  // then 34 more steps at varying positions
    const std::int64_t pos = 15 - (i % 16);
    inputs.push_back(sgtest::random_tensor({1, 32}, 50 + static_cast<std::uint32_t>(i)));
    outputs.push_back((*fn)({inputs.back(), sg::SymInt(pos), kc, vc})[0]);
  }
  sg::current_stream().synchronize();
  const sg::Tensor kc_e = sg::ops::zeros({16, 4, 8}), vc_e = sg::ops::zeros({16, 4, 8});
  for (int i = 0; i < 50; ++i) {
    const std::int64_t pos = i < 16 ? i : 15 - (i % 16);
    const auto want = block(
        std::vector<sg::Arg>{inputs[static_cast<std::size_t>(i)], sg::SymInt(pos), kc_e, vc_e});
    ASSERT_EQ(outputs[static_cast<std::size_t>(i)].to_floats(), want[0].to_floats())
        << "replay " << i;
  }
}

TEST(compiler_capture, a_moved_mutated_input_recaptures) {
  const sgtest::AttentionBlock block;
  auto fn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
  const sg::Tensor kc1 = sg::ops::zeros({16, 4, 8}), vc = sg::ops::zeros({16, 4, 8});
  (void)(*fn)({x, sg::SymInt(0), kc1, vc});
  const sg::Tensor kc2 = sg::ops::zeros({16, 4, 8});
  const sg::Tensor kc_e = sg::ops::zeros({16, 4, 8}), vc_e = sg::ops::zeros({16, 4, 8});
  const auto got = (*fn)({x, sg::SymInt(0), kc2, vc})[0].to_floats();
  EXPECT_EQ(got, block(std::vector<sg::Arg>{x, sg::SymInt(0), kc_e, vc_e})[0].to_floats());
  EXPECT_EQ(kc2.to_floats(), kc_e.to_floats()) << "the new cache was written";
  const sg::GraphCounters c = fn->counters();
  EXPECT_EQ(c.captured, 2);
  EXPECT_EQ(c.recapture_due_to_mutated_input_change, 1);
  EXPECT_NE(fn->explain().find("mutated input %a2 is at"), std::string::npos) << fn->explain();
}

TEST(compiler_capture, a_moved_param_is_a_new_key_or_an_error_when_frozen) {
  sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  (void)(*fn)({x});
  mlp.w1.relocate_();
  EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  EXPECT_EQ(fn->counters().recapture_due_to_parameter_change, 1);
  EXPECT_EQ(fn->counters().captured, 2);

  sg::CompilerConfig frozen = reduce_overhead();
  frozen.frozen_parameter = true;
  auto ffn = compile_mlp(mlp, frozen);
  (void)(*ffn)({x});
  mlp.w2.relocate_();
  const std::string err = error_of([&] { (void)(*ffn)({x}); });
  EXPECT_NE(err.find("frozen_parameter"), std::string::npos) << err;
  EXPECT_NE(err.find("moved"), std::string::npos) << err;
}

TEST(compiler_capture, capture_limit_then_eager_with_one_warning_and_the_counter) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.capture_limit = 2;
  auto fn = compile_mlp(mlp, c, /*dynamic=*/true);
  testing::internal::CaptureStderr();
  for (const std::int64_t rows : {1, 2, 1, 2, 3, 4, 3}) {
    const sg::Tensor x = sgtest::random_tensor({rows, 64}, static_cast<std::uint32_t>(rows));
    EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats()) << rows;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const sg::GraphCounters counters = fn->counters();
  EXPECT_EQ(counters.captured, 2);
  EXPECT_EQ(counters.replayed, 4);
  EXPECT_EQ(counters.eager_fallback_due_to_capture_limit, 3);
  EXPECT_NE(err.find("capture_limit (2) reached"), std::string::npos) << err;
  EXPECT_EQ(err.find("capture_limit", err.find("capture_limit") + 1), std::string::npos)
      << "warn once";
}

// At info, the log says what the explain report says, as it happens: each
// trace, capture, re-capture and fallback (issue 14, SINKGRAPH_LOG=info).
TEST(compiler_capture, info_log_reports_traces_captures_recaptures_and_fallbacks) {
  std::vector<std::string> lines;
  const sg::LogLevel saved = sg::log_level();
  sg::set_log_level(sg::LogLevel::info);
  sg::set_log_handler([&](sg::LogLevel, std::string_view m) { lines.emplace_back(m); });
  const auto contains = [&](const std::string& a, const std::string& b) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    });
  };
  {
    const sgtest::Mlp mlp;
    sg::CompilerConfig c = reduce_overhead();
    c.capture_limit = 2;
    auto fn = compile_mlp(mlp, c, /*dynamic=*/true);
    for (const std::int64_t rows : {1, 2, 1, 3}) {
      (void)(*fn)({sgtest::random_tensor({rows, 64}, 1)})[0].to_floats();
    }
    const sgtest::AttentionBlock block;
    sg::TraceOptions options;
    options.graph_name = "attn";
    auto attn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()), options);
    const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
    for (int i = 0; i < 2; ++i) {  // a new cache: a new key, captured again
      (void)(*attn)({x, sg::SymInt(0), sg::ops::zeros({16, 4, 8}), sg::ops::zeros({16, 4, 8})});
    }
  }
  sg::set_log_handler({});
  sg::set_log_level(saved);
  EXPECT_TRUE(contains("function @mlp", "traced: first call"));
  EXPECT_TRUE(contains("graph @mlp", "capture: first call"));
  EXPECT_TRUE(contains("graph @mlp", "fallback: graph @mlp: capture_limit (2) reached"));
  EXPECT_TRUE(contains("graph @attn: call 2: capture:", "mutated input"));
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_GE(lines.size(), 6U) << all;
}

// Issue 11, point 8: each mutated-input address set is its own key within
// capture_limit, so two KV caches used in turn replay two graphs instead of
// re-capturing on every call (80 calls were 80 captures before).
TEST(compiler_capture, alternating_mutated_inputs_replay_one_graph_each) {
  const sgtest::AttentionBlock block;
  auto fn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
  const sg::Tensor k1 = sg::ops::zeros({16, 4, 8}), v1 = sg::ops::zeros({16, 4, 8});
  const sg::Tensor k2 = sg::ops::zeros({16, 4, 8}), v2 = sg::ops::zeros({16, 4, 8});
  const sg::Tensor ek1 = sg::ops::zeros({16, 4, 8}), ev1 = sg::ops::zeros({16, 4, 8});
  const sg::Tensor ek2 = sg::ops::zeros({16, 4, 8}), ev2 = sg::ops::zeros({16, 4, 8});
  for (int step = 0; step < 30; ++step) {
    const bool first = step % 2 == 0;
    const sg::SymInt pos(step / 2);
    const auto got = (*fn)({x, pos, first ? k1 : k2, first ? v1 : v2})[0].to_floats();
    const auto want =
        block(std::vector<sg::Arg>{x, pos, first ? ek1 : ek2, first ? ev1 : ev2})[0].to_floats();
    ASSERT_EQ(got, want) << "step " << step;
  }
  EXPECT_EQ(fn->counters().captured, 2);
  EXPECT_EQ(fn->counters().replayed, 30);
  EXPECT_EQ(fn->counters().recapture_due_to_mutated_input_change, 1);
}

// A re-capture storm (a new cache every call) warns once, naming the cause.
TEST(compiler_capture, a_recapture_storm_warns_once) {
  const sgtest::AttentionBlock block;
  auto fn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 20; ++i) {
    (void)(*fn)({x, sg::SymInt(0), sg::ops::zeros({16, 4, 8}), sg::ops::zeros({16, 4, 8})});
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("re-captured 8 times"), std::string::npos) << err;
  EXPECT_NE(err.find("mutated input"), std::string::npos) << err;
  EXPECT_EQ(err.find("re-captured", err.find("re-captured") + 1), std::string::npos) << err;
}

TEST(compiler_capture,
     new_mutated_addresses_count_toward_the_limit_and_force_recapture_captures_every_call) {
  const sgtest::AttentionBlock block;
  sg::CompilerConfig c = reduce_overhead();
  c.capture_limit = 1;
  auto fn = sg::compile(std::cref(block), sg::get_backend(c));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {  // a new cache each call: a new key each call
    (void)(*fn)({x, sg::SymInt(0), sg::ops::zeros({16, 4, 8}), sg::ops::zeros({16, 4, 8})});
  }
  (void)testing::internal::GetCapturedStderr();
  EXPECT_EQ(fn->counters().captured, 1);
  EXPECT_EQ(fn->counters().eager_fallback_due_to_capture_limit, 2);

  sg::CompilerConfig f = reduce_overhead();
  f.force_recapture = true;
  const sgtest::Mlp mlp;
  auto ffn = compile_mlp(mlp, f);
  for (int i = 0; i < 4; ++i) (void)(*ffn)({sgtest::random_tensor({2, 64}, 1)});
  EXPECT_EQ(ffn->counters().captured, 4);
  EXPECT_EQ(ffn->counters().recapture_due_to_force_recapture, 3);
}

TEST(compiler_capture, stale_outputs_raise_and_clone_output_survives) {
  const sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp, reduce_overhead(), /*dynamic=*/true);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  const sg::Tensor first = (*fn)({x})[0];
  const sg::Tensor second = (*fn)({x})[0];  // same key: overwrites first
  const std::string err = error_of([&] { (void)first.to_floats(); });
  EXPECT_NE(err.find("graph @mlp"), std::string::npos) << err;
  EXPECT_NE(err.find("clone_output"), std::string::npos) << err;
  EXPECT_THROW((void)sg::ops::relu(first), sg::Error);
  EXPECT_THROW((void)sg::ops::view(first, {128}), sg::Error);
  EXPECT_NO_THROW((void)second.to_floats());

  (void)(*fn)({sgtest::random_tensor({3, 64}, 2)});  // another key, same pool
  EXPECT_THROW((void)second.to_floats(), sg::Error);

  // Output k fed into replay k+1 is legal: it is copied in first.
  const sgtest::Mlp square;  // 64 -> 64, so outputs can be inputs
  auto chain = compile_mlp(square);
  sg::Tensor y = (*chain)({x})[0];
  sg::Tensor want = square(std::vector<sg::Arg>{x})[0];
  for (int i = 0; i < 3; ++i) {
    y = (*chain)({y})[0];
    want = square(std::vector<sg::Arg>{want})[0];
  }
  EXPECT_EQ(y.to_floats(), want.to_floats());

  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto cloned = compile_mlp(mlp, c);
  const sg::Tensor a = (*cloned)({x})[0];
  const sg::Tensor b = (*cloned)({sgtest::random_tensor({2, 64}, 9)})[0];
  EXPECT_EQ(a.to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  EXPECT_NE(a.to_floats(), b.to_floats());
}

// A test-only operator whose composite reads its input on the host: what a
// captured function must not do.
sg::Tensor host_peek(std::span<const sg::Tensor* const> t, std::span<const sg::ScalarValue>) {
  (void)t[0]->to_floats();
  return sg::ops::relu(*t[0]);
}
sg::TensorMeta same_shape(const sg::ShapeArgs& args) { return args.tensors[0]; }

// Registers a test-only operator of one tensor, shaped like it, computed by
// `composite`.
const sg::OpDef& register_test_op(const char* name, sg::CompositeFn composite) {
  sg::OpDef d;
  d.schema.name = name;
  d.schema.args = {{"x"}};
  d.shape_fn = same_shape;
  d.composite = composite;
  sg::OpRegistry::instance().add(d);
  return sg::OpRegistry::instance().get(name);
}

const sg::OpDef& peek_op() {
  static const sg::OpDef& def = register_test_op("test_host_peek", host_peek);
  return def;
}

TEST(compiler_capture, host_reads_during_capture_fail_under_global_and_pass_under_relaxed) {
  const auto body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const sg::Tensor* t[] = {&std::get<sg::Tensor>(args[0])};
    return {sg::run_op(peek_op(), t, {})};
  };
  const sg::Tensor x = sg::Tensor::from_floats({-1, 2}, {2});
  auto strict = sg::compile(body, sg::get_backend(reduce_overhead()));
  const std::string err = error_of([&] { (void)(*strict)({x}); });
  EXPECT_NE(err.find("test_host_peek"), std::string::npos) << err;
  EXPECT_NE(err.find("capture_error_mode=global"), std::string::npos) << err;
  EXPECT_FALSE(sg::current_stream().is_capturing()) << "a failed capture ends the capture";

  sg::CompilerConfig relaxed = reduce_overhead();
  relaxed.capture_error_mode = sg::CaptureErrorMode::relaxed;
  auto lenient = sg::compile(body, sg::get_backend(relaxed));
  EXPECT_EQ((*lenient)({x})[0].to_floats(), (std::vector<float>{0, 2}));
}

TEST(compiler_capture, two_keys_of_one_graph_share_pool_memory) {
  const sgtest::Mlp mlp;
  const auto reserved = [&](bool share) {
    sg::CompilerConfig c = reduce_overhead();
    c.reuse_graph_pool_in_same_fx = share;
    auto fn = compile_mlp(mlp, c, /*dynamic=*/true);
    (void)(*fn)({sgtest::random_tensor({8, 64}, 1)});
    (void)(*fn)({sgtest::random_tensor({6, 64}, 2)});
    EXPECT_EQ(fn->counters().captured, 2);
    return fn->counters().pool_reserved_bytes;
  };
  const std::int64_t shared = reserved(true);
  const std::int64_t separate = reserved(false);
  EXPECT_LT(shared, separate) << "shared " << shared << " B, separate " << separate << " B";
}

TEST(compiler_capture, a_second_key_borrows_the_first_keys_memory_and_both_stay_correct) {
  // Note [Pool checkpoints]: the second key's kernels reuse what the first key
  // holds (its output included), so the pool grows only by the second key's
  // static input; alternating keys still matches eager.
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = compile_mlp(mlp, c, /*dynamic=*/true);
  const sg::Tensor big = sgtest::random_tensor({8, 64}, 1);
  const sg::Tensor small = sgtest::random_tensor({6, 64}, 2);
  (void)(*fn)({big});
  const std::int64_t one_key = fn->counters().pool_reserved_bytes;
  (void)(*fn)({small});
  const std::int64_t two_keys = fn->counters().pool_reserved_bytes;
  EXPECT_EQ(fn->counters().captured, 2);
  EXPECT_LE(two_keys - one_key, 6 * 64 * 4) << "one key " << one_key << " B, two " << two_keys;
  for (int i = 0; i < 6; ++i) {
    const sg::Tensor x = sgtest::random_tensor({i % 2 == 0 ? 8 : 6, 64}, 10 + i);
    EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats()) << i;
  }
  EXPECT_EQ(fn->counters().captured, 2);

  // Without clone_output, key 6's replay overwrote key 8's output: reading it raises.
  sg::CompilerConfig stamped = reduce_overhead();
  auto g = compile_mlp(mlp, stamped, /*dynamic=*/true);
  const sg::Tensor out8 = (*g)({big})[0];
  const std::vector<float> want6 = mlp(std::vector<sg::Arg>{small})[0].to_floats();
  EXPECT_EQ((*g)({small})[0].to_floats(), want6);
  EXPECT_THROW((void)out8.to_floats(), sg::Error);
}

TEST(compiler_capture, two_host_threads_calling_one_function_get_correct_results) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = compile_mlp(mlp, c);
  // Inputs and eager references first: under capture_error_mode=global, a host
  // read on any thread while the other one captures is an error, by design.
  std::vector<std::vector<sg::Tensor>> inputs(2);
  std::vector<std::vector<std::vector<float>>> want(2);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 20; ++i) {
      const sg::Tensor x = sgtest::random_tensor({2, 64}, static_cast<std::uint32_t>(t * 100 + i));
      inputs[t].push_back(x);
      want[t].push_back(mlp(std::vector<sg::Arg>{x})[0].to_floats());
    }
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if ((*fn)({inputs[t][i]})[0].to_floats() != want[t][i]) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fn->counters().captured, 1);
  EXPECT_EQ(fn->counters().replayed, 40);
}

// A test-only operator whose composite, while its graph is being captured,
// runs g_during_capture: on another host thread that it waits for (a
// deterministic interleaving of the two), or on the capturing thread.
std::function<void()> g_during_capture;
bool g_on_capturing_thread = false;

sg::Tensor rendezvous(std::span<const sg::Tensor* const> t, std::span<const sg::ScalarValue>) {
  if (g_during_capture && sg::any_capture_active()) {
    if (g_on_capturing_thread) {
      g_during_capture();
    } else {
      std::thread other(g_during_capture);
      other.join();
    }
  }
  return sg::ops::relu(*t[0]);
}

const sg::OpDef& rendezvous_op() {
  static const sg::OpDef& def = register_test_op("test_rendezvous", rendezvous);
  return def;
}

sg::TracedFn rendezvous_body() {
  return [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    const sg::Tensor* t[] = {&std::get<sg::Tensor>(args[0])};
    return {sg::ops::neg(sg::run_op(rendezvous_op(), t, {}))};
  };
}

// Note [Captures run on a side stream]: eager work of another thread during a
// capture runs (and is not recorded into the graph).
TEST(compiler_capture, another_threads_eager_work_during_a_capture_runs_and_is_not_captured) {
  const sgtest::Mlp mlp;
  const sg::Tensor y = sgtest::random_tensor({2, 64}, 7);
  const std::vector<float> want_y = mlp(std::vector<sg::Arg>{y})[0].to_floats();
  std::vector<float> got_y;
  g_during_capture = [&] { got_y = mlp(std::vector<sg::Arg>{y})[0].to_floats(); };
  sg::CompilerConfig c = reduce_overhead();
  c.capture_error_mode = sg::CaptureErrorMode::thread_local_;  // the other thread may read
  auto fn = sg::compile(rendezvous_body(), sg::get_backend(c));
  const sg::Tensor x = sg::Tensor::from_floats({-1, 2}, {2});
  EXPECT_EQ((*fn)({x})[0].to_floats(), (std::vector<float>{-0.0F, -2}));
  g_during_capture = nullptr;
  EXPECT_EQ(fn->counters().captured, 1);
  EXPECT_EQ(got_y, want_y);
  // Replays run exactly the two captured kernels (relu, neg), not the mlp's.
  const sg::Tensor x2 = sg::Tensor::from_floats({3, -4}, {2});
  EXPECT_EQ((*fn)({x2})[0].to_floats(), (std::vector<float>{-3, -0.0F}));
  EXPECT_NE(fn->explain().find(": 2 nodes"), std::string::npos) << fn->explain();
}

TEST(compiler_capture, calling_a_captured_function_inside_a_capture_is_an_error) {
  const sgtest::Mlp mlp;
  auto inner = compile_mlp(mlp);
  const sg::Tensor y = sgtest::random_tensor({2, 64}, 7);
  g_during_capture = [&] { (void)(*inner)({y}); };
  g_on_capturing_thread = true;
  auto outer = sg::compile(rendezvous_body(), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sg::Tensor::from_floats({-1, 2}, {2});
  const std::string err = error_of([&] { (void)(*outer)({x}); });
  g_during_capture = nullptr;
  g_on_capturing_thread = false;
  EXPECT_NE(err.find("graph @mlp: called while this thread captures graph @"), std::string::npos)
      << err;
  // Both still work: the failed capture left nothing behind.
  EXPECT_EQ((*outer)({x})[0].to_floats(), (std::vector<float>{-0.0F, -2}));
  EXPECT_EQ((*inner)({y})[0].to_floats(), mlp(std::vector<sg::Arg>{y})[0].to_floats());
  EXPECT_EQ(inner->counters().captured, 1);
}

TEST(compiler_capture, warmup_iters_and_reset) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.warmup_iters = 2;
  auto fn = compile_mlp(mlp, c);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  const auto before = sg::dispatch_counters().dispatches;
  EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  // Three interpretations of 3 nodes: two warm-ups and the capture.
  EXPECT_GE(sg::dispatch_counters().dispatches - before, 9U);
  EXPECT_GT(fn->counters().pool_reserved_bytes, 0);
  fn->reset();
  EXPECT_EQ(fn->counters().pool_reserved_bytes, 0);
  EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  EXPECT_EQ(fn->counters().captured, 2);
}

}  // namespace

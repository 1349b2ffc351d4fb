// Capture and replay safety (issue 11): every case here was silently wrong, a
// use of freed memory or a hang before its fix. Each test names its point.
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "../trace/models.h"
#include "helpers.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/stream.h"

namespace {

namespace sg = sinkgraph;
using sgtest::error_of;
using sgtest::reduce_overhead;

// A kernel that holds its stream until the host opens the gate: work queued
// behind it on that stream is pending for as long as the test wants.
std::atomic<bool> g_gate{true};
void gate_kernel(const sg::ArgBlock& /*args*/, sg::KernelContext& /*ctx*/) {
  while (!g_gate.load(std::memory_order_acquire)) std::this_thread::yield();
}
void close_gate_on(sg::Stream& stream) {
  g_gate.store(false, std::memory_order_release);
  sg::ArgBlock args;
  args.num_tensors = 0;
  args.num_scalars = 0;
  stream.launch(gate_kernel, args, "test_gate");
}
void open_gate() { g_gate.store(true, std::memory_order_release); }

// Runs body(t) on `n` host threads, each on a stream of its own, and joins.
void on_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      const auto stream = sg::cpu().create_stream();
      const sg::StreamGuard guard(*stream);
      body(t);
    });
  }
  for (auto& th : threads) th.join();
}

std::shared_ptr<sg::CompiledFunction> compile_mlp(const sgtest::Mlp& mlp,
                                                  sg::CompilerConfig c = reduce_overhead()) {
  sg::TraceOptions options;
  options.graph_name = "mlp";
  return sg::compile(std::cref(mlp), sg::get_backend(c), options);
}

std::vector<float> eager(const sgtest::Mlp& mlp, const sg::Tensor& x) {
  return mlp(std::vector<sg::Arg>{x})[0].to_floats();
}

// Point 1: reset() freed the graph's pool after waiting only for the last
// replay; a reader of an output queued on a busy stream then read freed
// memory. Pool memory now returns to the device only after the reader ran.
TEST(replay_safety, reset_keeps_pool_memory_until_a_queued_reader_ran) {
  const sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  const std::vector<float> want = eager(mlp, x);
  const auto reader_stream = sg::cpu().create_stream();
  sg::Tensor copy;
  {
    sg::Tensor out = (*fn)({x})[0];
    const sg::StreamGuard on_reader(*reader_stream);
    close_gate_on(*reader_stream);
    copy = sg::ops::mul_scalar(out, 1.0);  // queued behind the gate
  }                                        // the caller drops the output
  fn->reset();
  EXPECT_GT(sg::cpu().allocator().deferred_bytes(), 0) << "the pool's memory is held back";
  // Churn: fresh allocations of the same sizes, filled, while the reader waits.
  std::vector<sg::Tensor> churn;
  for (int i = 0; i < 16; ++i) {
    churn.push_back(sg::ops::full({2, 256}, 99.0));
    churn.push_back(sg::ops::full({2, 64}, 99.0));
  }
  open_gate();
  reader_stream->synchronize();
  const sg::StreamGuard on_reader(*reader_stream);
  EXPECT_EQ(copy.to_floats(), want);
  EXPECT_EQ(sg::cpu().allocator().deferred_bytes(), 0) << "released once the reader ran";
}

// Point 1, within one pool: the next replay (or a re-capture) overwrote an
// output that a reader on another, busy stream had not read yet.
TEST(replay_safety, the_next_replay_waits_for_a_reader_on_another_stream) {
  for (const bool force_recapture : {false, true}) {
    const sgtest::Mlp mlp;
    sg::CompilerConfig c = reduce_overhead();
    c.force_recapture = force_recapture;
    auto fn = compile_mlp(mlp, c);
    const sg::Tensor x1 = sgtest::random_tensor({2, 64}, 1);
    const sg::Tensor x2 = sgtest::random_tensor({2, 64}, 2);
    const std::vector<float> want1 = eager(mlp, x1), want2 = eager(mlp, x2);
    const auto reader_stream = sg::cpu().create_stream();
    const sg::Tensor out1 = (*fn)({x1})[0];
    sg::Tensor copy;
    {
      const sg::StreamGuard on_reader(*reader_stream);
      close_gate_on(*reader_stream);
      copy = sg::ops::mul_scalar(out1, 1.0);
    }
    const sg::Tensor out2 = (*fn)({x2})[0];  // launched while the reader waits
    open_gate();
    reader_stream->synchronize();
    EXPECT_EQ(out2.to_floats(), want2) << force_recapture;
    const sg::StreamGuard on_reader(*reader_stream);
    EXPECT_EQ(copy.to_floats(), want1) << "force_recapture " << force_recapture;
  }
}

// A graph output used as another graph's input holds that graph's next
// replay back until the copy into the second graph ran.
TEST(replay_safety, an_output_fed_to_another_graph_is_copied_before_it_is_overwritten) {
  const sgtest::Mlp mlp;
  auto f = compile_mlp(mlp);
  const auto g = sg::compile(
      [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
        return {sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), 2.0)};
      },
      sg::get_backend(reduce_overhead()));
  const sg::Tensor x1 = sgtest::random_tensor({2, 64}, 1);
  const sg::Tensor x2 = sgtest::random_tensor({2, 64}, 2);
  std::vector<float> want = eager(mlp, x1);
  for (auto& v : want) v *= 2;
  const auto other = sg::cpu().create_stream();
  sg::Tensor doubled;
  const sg::Tensor y = (*f)({x1})[0];
  {
    const sg::StreamGuard on_other(*other);
    close_gate_on(*other);
    doubled = (*g)({y})[0];
  }
  (void)(*f)({x2});  // must wait for g's copy of y
  open_gate();
  other->synchronize();
  const sg::StreamGuard on_other(*other);
  EXPECT_EQ(doubled.to_floats(), want);
}

// Two graphs feeding each other from two threads: a replay takes its holds
// on input pools only after its own pool's turn, so neither waits for a pool
// while holding the other's (a deadlock otherwise). Values are right or the
// documented stale-output error.
TEST(replay_safety, graphs_feeding_each_other_from_two_threads_neither_deadlock_nor_mix) {
  const auto scale = [](double k) {
    return [k](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
      return {sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), k)};
    };
  };
  auto f = sg::compile(scale(2.0), sg::get_backend(reduce_overhead()));
  auto g = sg::compile(scale(3.0), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sg::Tensor::from_floats({1, 2, 3, 4}, {4});
  (void)(*f)({x});
  (void)(*g)({x});
  std::atomic<int> wrong{0};
  on_threads(2, [&](int t) {
    auto& first = t == 0 ? f : g;
    auto& second = t == 0 ? g : f;
    for (int i = 0; i < 300; ++i) {
      try {
        const auto got = (*second)({(*first)({x})[0]})[0].to_floats();
        if (got != std::vector<float>{6, 12, 18, 24}) wrong.fetch_add(1);
      } catch (const sg::Error& e) {
        if (std::string(e.what()).find("overwritten") == std::string::npos) wrong.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

// Point 2: an output that is a view of a mutated input (a slice of the KV
// cache) or of a param was stamped with a pointer to the pool that nothing
// kept alive (ASan: heap-use-after-free once the function died), and the
// caller's own cache was reported overwritten by the next call.
TEST(replay_safety, views_of_inputs_are_the_callers_views_and_never_stale) {
  const sg::Tensor w = sgtest::random_tensor({4, 8}, 3);
  const auto body = [&](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& cache = std::get<sg::Tensor>(a[0]);
    const auto& pos = std::get<sg::SymInt>(a[1]);
    sg::ops::index_copy_(cache, pos, sg::ops::narrow(w, 0, 0, 1));
    return {sg::ops::narrow(cache, 0, 0, 2), sg::ops::narrow(w, 0, 1, 2),
            sg::ops::relu(sg::ops::narrow(cache, 0, 0, 2))};
  };
  sg::Tensor cache = sg::ops::zeros({4, 8});
  sg::Tensor first_slice, param_view;
  {
    auto fn = sg::compile(body, sg::get_backend(reduce_overhead()));
    const auto r0 = (*fn)({cache, sg::SymInt(0)});
    first_slice = r0[0];
    param_view = r0[1];
    EXPECT_FALSE(first_slice.is_stamped());
    EXPECT_TRUE(first_slice.shares_storage(cache));
    EXPECT_EQ(first_slice.data_ptr(), cache.data_ptr());
    EXPECT_FALSE(param_view.is_stamped());
    EXPECT_TRUE(r0[2].is_stamped()) << "a fresh result lives in the pool";
    const auto r1 = (*fn)({cache, sg::SymInt(1)});
    // The next call wrote the caller's cache; the slice is the cache, not stale.
    EXPECT_EQ(first_slice.to_floats(), r1[0].to_floats());
  }  // the compiled function dies
  const std::vector<float> row = sg::ops::narrow(w, 0, 0, 1).to_floats();
  std::vector<float> want(row);
  want.insert(want.end(), row.begin(), row.end());
  EXPECT_EQ(first_slice.to_floats(), want);
  EXPECT_EQ(param_view.to_floats(), sg::ops::narrow(w, 0, 1, 2).to_floats());
}

// Point 3: two host threads sharing one function, each on its own stream,
// got the other's result or garbage without an error: the stale check ran
// before the synchronize and the copy; with clone_output the copy ran on the
// caller's stream, outside the replay the next one waits for. A caller now
// gets its own result or the stale-output error, never another call's values.
void threads_get_their_own_results(bool clone_output) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = clone_output;
  auto fn = compile_mlp(mlp, c);
  constexpr int kThreads = 2, kCalls = 150;
  std::vector<std::vector<sg::Tensor>> inputs(kThreads);
  std::vector<std::vector<std::vector<float>>> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCalls; ++i) {
      const sg::Tensor x = sgtest::random_tensor({2, 64}, static_cast<std::uint32_t>(t * 1000 + i));
      inputs[t].push_back(x);
      want[t].push_back(eager(mlp, x));
    }
  }
  (void)(*fn)({inputs[0][0]});  // capture before the threads start
  std::atomic<int> wrong{0}, stale{0}, right{0};
  on_threads(kThreads, [&](int t) {
    for (int i = 0; i < kCalls; ++i) {
      try {
        const auto got = (*fn)({inputs[t][i]})[0].to_floats();
        (got == want[t][i] ? right : wrong).fetch_add(1);
      } catch (const sg::Error& e) {
        if (std::string(e.what()).find("overwritten") == std::string::npos) throw;
        stale.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "right " << right << ", stale " << stale;
  if (clone_output) {
    EXPECT_EQ(stale.load(), 0);
  }
  EXPECT_EQ(right + stale, kThreads * kCalls);
}

TEST(replay_safety, threads_on_their_own_streams_get_their_own_results) {
  threads_get_their_own_results(false);
}

TEST(replay_safety, threads_on_their_own_streams_with_clone_output_always_get_results) {
  threads_get_their_own_results(true);
}

// Point 4: a call while the user captures on his own stream raised, and every
// later call hung: the replay's ordering ticket had been taken before the
// launch that threw. The error is raised before anything is taken.
TEST(replay_safety, an_error_inside_a_users_capture_leaves_the_function_usable) {
  const sgtest::Mlp mlp;
  auto fn = compile_mlp(mlp);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  (void)(*fn)({x});
  const auto stream = sg::cpu().create_stream();
  stream->begin_capture(sg::cpu().allocator().create_pool("user's pool"));
  std::string err;
  {
    const sg::StreamGuard guard(*stream);
    err = error_of([&] { (void)(*fn)({x}); });
  }
  (void)stream->end_capture();
  EXPECT_NE(err.find("captures a graph"), std::string::npos) << err;
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*fn)({x})[0].to_floats(), eager(mlp, x));
}

// Point 4, at the runtime layer: a refused GraphExec::launch takes no ticket.
TEST(replay_safety, a_refused_graph_launch_takes_no_ticket) {
  const auto capturing = sg::cpu().create_stream();
  const auto pool = sg::cpu().allocator().create_pool("graph");
  const sg::Tensor a = sg::Tensor::from_floats({1, 2}, {2});
  capturing->begin_capture(pool);
  sg::Tensor b;
  {
    const sg::StreamGuard guard(*capturing);
    b = sg::ops::mul_scalar(a, 3.0);
  }
  const auto exec = capturing->end_capture().instantiate();
  const auto order = std::make_shared<sg::ReplayOrder>();
  const auto other = sg::cpu().create_stream();
  other->begin_capture(pool);  // a capture on this thread forbids launches elsewhere
  EXPECT_THROW(exec->launch(sg::current_stream(), {}, {}, order), sg::Error);
  (void)other->end_capture();
  exec->launch(sg::current_stream(), {}, {}, order);
  exec->launch(sg::current_stream(), {}, {}, order);
  sg::current_stream().synchronize();  // hangs if the refused launch took a ticket
  EXPECT_EQ(b.to_floats(), (std::vector<float>{3, 6}));
}

// Point 5a: strides. A transposed view at the same address was treated as the
// original tensor.
TEST(replay_safety, a_transposed_view_at_the_same_address_is_not_the_original) {
  const auto body = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& dst = std::get<sg::Tensor>(a[0]);
    const auto& src = std::get<sg::Tensor>(a[1]);
    sg::ops::copy_(dst, sg::ops::mul_scalar(src, 2.0));
    return {sg::ops::add(dst, src)};
  };
  for (const bool clone_input : {true, false}) {
    sg::CompilerConfig c = reduce_overhead();
    c.clone_input = clone_input;
    c.clone_output = true;
    auto fn = sg::compile(body, sg::get_backend(c));
    const sg::Tensor base = sgtest::random_tensor({4, 4}, 5);
    const sg::Tensor src = sgtest::random_tensor({4, 4}, 6);
    const sg::Tensor dst = sg::ops::zeros({4, 4});
    (void)(*fn)({dst, src});
    const sg::Tensor dst_t = sg::ops::transpose(dst, 0, 1);  // same address, other strides
    const sg::Tensor src_t = sg::ops::transpose(src, 0, 1);
    const auto got = (*fn)({dst_t, src_t})[0].to_floats();
    const sg::Tensor e_dst = sg::ops::transpose(sg::ops::zeros({4, 4}), 0, 1);
    const auto want = body(std::vector<sg::Arg>{e_dst, src_t})[0].to_floats();
    EXPECT_EQ(got, want) << "clone_input " << clone_input;
    EXPECT_EQ(sg::ops::contiguous(dst_t).to_floats(), sg::ops::contiguous(e_dst).to_floats());
  }
}

// Point 5b: arguments that alias each other, f(b, b) after tracing f(a, b).
TEST(replay_safety, aliased_arguments_retrace_as_one_input_or_are_refused) {
  const auto body = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& dst = std::get<sg::Tensor>(a[0]);
    const auto& src = std::get<sg::Tensor>(a[1]);
    sg::ops::copy_(dst, sg::ops::mul_scalar(src, 2.0));
    return {sg::ops::add(dst, src)};
  };
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(body, sg::get_backend(c));
  (void)(*fn)({sg::ops::zeros({4}), sgtest::random_tensor({4}, 1)});
  const sg::Tensor b = sgtest::random_tensor({4}, 2);
  const sg::Tensor b_eager = sgtest::random_tensor({4}, 2);
  const auto got = (*fn)({b, b})[0].to_floats();
  EXPECT_EQ(got, body(std::vector<sg::Arg>{b_eager, b_eager})[0].to_floats());  // 4b, not 3b
  EXPECT_EQ(fn->num_traces(), 2);
  // Overlapping views that are not the same view cannot be separate inputs.
  const sg::Tensor whole = sgtest::random_tensor({6}, 3);
  const std::string err = error_of([&] {
    (void)(*fn)({sg::ops::narrow(whole, 0, 0, 4), sg::ops::narrow(whole, 0, 2, 4)});
  });
  EXPECT_NE(err.find("overlapping memory"), std::string::npos) << err;
}

// Three disjoint views of one buffer and one of another: the guards find,
// per argument, the first earlier one on its storage (first_sharers), so
// the same pattern replays and another one (the last view moved to the
// first buffer, or the third to its own) traces anew.
TEST(replay_safety, disjoint_views_of_one_buffer_are_guarded_by_their_first_sharer) {
  const auto body = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    sg::Tensor acc = sg::ops::mul_scalar(std::get<sg::Tensor>(a[0]), 1.0);
    for (std::size_t i = 1; i < a.size(); ++i)
      acc = sg::ops::add(sg::ops::mul_scalar(acc, 2.0), std::get<sg::Tensor>(a[i]));
    return {acc};
  };
  sg::CompilerConfig c = reduce_overhead();
  c.clone_output = true;
  auto fn = sg::compile(body, sg::get_backend(c));
  const auto call = [&](const sg::Tensor& w, const sg::Tensor& other, bool last_on_w) {
    const std::vector<sg::Arg> args{
        sg::ops::narrow(w, 0, 0, 2), sg::ops::narrow(other, 0, 0, 2), sg::ops::narrow(w, 0, 2, 2),
        last_on_w ? sg::ops::narrow(w, 0, 4, 2) : sg::ops::narrow(other, 0, 2, 2)};
    EXPECT_EQ((*fn)(args)[0].to_floats(), body(args)[0].to_floats());
  };
  call(sgtest::random_tensor({6}, 1), sgtest::random_tensor({4}, 2), true);
  call(sgtest::random_tensor({6}, 3), sgtest::random_tensor({4}, 4), true);
  EXPECT_EQ(fn->num_traces(), 1);
  call(sgtest::random_tensor({6}, 5), sgtest::random_tensor({4}, 6), false);
  EXPECT_EQ(fn->num_traces(), 2);
  call(sgtest::random_tensor({6}, 7), sgtest::random_tensor({4}, 8), true);
  EXPECT_EQ(fn->num_traces(), 2);
}

// Point 5c: a weight reassigned on the model object after tracing: the graph
// kept the old tensor. Params are guarded on the model's own tensors.
TEST(replay_safety, a_reassigned_weight_retraces) {
  sgtest::Mlp mlp;
  auto fn = sg::compile(mlp, sg::get_backend(reduce_overhead()));  // named_parameters()
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  EXPECT_EQ((*fn)({x})[0].to_floats(), eager(mlp, x));
  mlp.w1 = sgtest::random_tensor({64, 256}, 42);
  EXPECT_EQ((*fn)({x})[0].to_floats(), eager(mlp, x));
  EXPECT_EQ(fn->num_traces(), 2);
  EXPECT_NE(fn->explain().find("parameter 'w1' was reassigned"), std::string::npos)
      << fn->explain();
}

// Point 5d: comparing a symbolic SymInt with == was silently false, so the
// branch it decided was baked into the graph.
TEST(replay_safety, comparing_a_symbolic_size_while_tracing_is_an_error) {
  const auto body = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(a[0]);
    if (x.sym_size(0) == sg::SymInt(3)) return {sg::ops::neg(x)};
    return {sg::ops::relu(x)};
  };
  sg::TraceOptions options;
  options.dynamic_dims[0] = {0};
  auto fn = sg::compile(body, sg::get_backend(reduce_overhead()), options);
  const std::string err = error_of([&] { (void)(*fn)({sgtest::random_tensor({3, 4}, 1)}); });
  EXPECT_NE(err.find("comparing the symbolic size s0 with 3"), std::string::npos) << err;
  // Decidable comparisons still answer: s0 + 1 is never s0.
  const auto decidable = [](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const auto& x = std::get<sg::Tensor>(a[0]);
    EXPECT_FALSE(x.sym_size(0) + 1 == x.sym_size(0));
    EXPECT_TRUE(x.sym_size(0) == x.sym_size(0));
    return {sg::ops::relu(x)};
  };
  auto ok = sg::compile(decidable, sg::get_backend(reduce_overhead()), options);
  EXPECT_NO_THROW((void)(*ok)({sgtest::random_tensor({3, 4}, 1)}));
}

// Point 6: frozen_parameter folded a param's values, then ignored an in-place
// write to it. Every in-place operator bumps a version counter, and a frozen
// graph checks its params' versions on every call.
TEST(replay_safety, writing_a_frozen_param_in_place_is_an_error) {
  sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.frozen_parameter = true;
  auto fn = compile_mlp(mlp, c);
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 1);
  (void)(*fn)({x});
  const std::uint64_t before = mlp.w2.storage()->version();
  sg::ops::fill_(sg::ops::narrow(mlp.w2, 0, 0, 1), 0.5);  // through a view
  EXPECT_GT(mlp.w2.storage()->version(), before);
  const std::string err = error_of([&] { (void)(*fn)({x}); });
  EXPECT_NE(err.find("%p1 was written in place"), std::string::npos) << err;
  EXPECT_NE(err.find("frozen_parameter"), std::string::npos) << err;
  // Without frozen_parameter the write is simply seen.
  auto live = compile_mlp(mlp);
  (void)(*live)({x});
  sg::ops::fill_(mlp.w1, 0.25);
  EXPECT_EQ((*live)({x})[0].to_floats(), eager(mlp, x));
}

// Point 7: reset() kept counting keys, so a graph that had reached
// capture_limit ran eagerly forever, even after a reset.
TEST(replay_safety, reset_forgets_the_keys_counted_toward_the_limit) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = reduce_overhead();
  c.capture_limit = 1;
  sg::TraceOptions options;
  options.dynamic_dims[0] = {0};
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(c), options);
  testing::internal::CaptureStderr();
  (void)(*fn)({sgtest::random_tensor({1, 64}, 1)});
  (void)(*fn)({sgtest::random_tensor({2, 64}, 2)});  // over the limit: eager from now on
  (void)testing::internal::GetCapturedStderr();
  EXPECT_EQ(fn->counters().eager_fallback_due_to_capture_limit, 1);
  fn->reset();
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 3);
  EXPECT_EQ((*fn)({x})[0].to_floats(), eager(mlp, x));
  EXPECT_EQ((*fn)({x})[0].to_floats(), eager(mlp, x));
  EXPECT_EQ(fn->counters().captured, 2);
  EXPECT_EQ(fn->counters().replayed, 3);
  EXPECT_EQ(fn->counters().eager_fallback_due_to_capture_limit, 1);
}

// Point 9: a kernel error inside a replay named `graph_replay`, not the
// operator and node that failed.
TEST(replay_safety, a_kernel_error_in_a_replay_names_the_operator_and_node) {
  const sgtest::AttentionBlock block;
  auto fn = sg::compile(std::cref(block), sg::get_backend(reduce_overhead()));
  const sg::Tensor x = sgtest::random_tensor({1, 32}, 1);
  const sg::Tensor kc = sg::ops::zeros({16, 4, 8}), vc = sg::ops::zeros({16, 4, 8});
  (void)(*fn)({x, sg::SymInt(0), kc, vc})[0].to_floats();
  const std::string err = error_of([&] {
    (void)(*fn)({x, sg::SymInt(20), kc, vc})[0].to_floats();
  });
  EXPECT_NE(err.find("index_copy_"), std::string::npos) << err;
  EXPECT_NE(err.find("node #"), std::string::npos) << err;
  EXPECT_NE(err.find("of graph @main"), std::string::npos) << err;
  EXPECT_NE(err.find("destination rows"), std::string::npos) << err;
  // The stream and the function stay usable.
  const sg::Tensor ke = sg::ops::zeros({16, 4, 8}), ve = sg::ops::zeros({16, 4, 8});
  (void)block(std::vector<sg::Arg>{x, sg::SymInt(0), ke, ve});
  EXPECT_EQ((*fn)({x, sg::SymInt(1), kc, vc})[0].to_floats(),
            block(std::vector<sg::Arg>{x, sg::SymInt(1), ke, ve})[0].to_floats());
}

// Found by the stress test: eager matrix products on two streams at once
// (two stream workers inside OpenBLAS together) silently computed garbage.
// Note [OpenBLAS is not reentrant] in src/kernels/cpu/linalg.cpp.
TEST(replay_safety, eager_matmuls_on_two_streams_at_once_are_right) {
  const sgtest::Mlp mlp;
  std::vector<sg::Tensor> xs;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(sgtest::random_tensor({2, 64}, static_cast<std::uint32_t>(i + 1)));
    want.push_back(eager(mlp, xs.back()));
  }
  std::atomic<int> wrong{0};
  on_threads(2, [&](int t) {
    for (int i = 0; i < 4000; ++i) {
      const auto k = static_cast<std::size_t>((i * 7 + t) % 8);
      if (eager(mlp, xs[k]) != want[k]) wrong.fetch_add(1);
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace

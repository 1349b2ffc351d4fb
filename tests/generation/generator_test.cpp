// Generation as a library (include/sinkgraph/generate.h): one Generator
// serving many calls gives what a fresh one gives, stop ids, streaming,
// errors mid-call, several host threads, and the shipped model's reference.
#include <atomic>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "models/test_files.h"
#include "sinkgraph/error.h"
#include "sinkgraph/generate.h"

namespace {

namespace sg = sinkgraph;
namespace fs = std::filesystem;

constexpr sg::Mode kModes[] = {sg::Mode::eager, sg::Mode::reduce_overhead, sg::Mode::max_autotune};

// Small enough to be quick, large enough that greedy ids vary.
const sg::models::LlamaModel& model() {
  static const sg::models::LlamaModel m =
      sg::models::random_model(sg::models::LlamaConfig{48, 96, 2, 6, 2, 97, 64, 1e-5, 500.0,
                                                       sg::ops::RopeStyle::interleaved, false},
                               5);
  return m;
}

sg::GenerateOptions request(std::vector<std::int64_t> prompt, std::int64_t steps) {
  sg::GenerateOptions o;
  o.prompt = std::move(prompt);
  o.steps = steps;
  return o;
}

// What a fresh generator gives: the reference every reused one must equal.
std::vector<std::int64_t> fresh(const sg::GenerateOptions& o, sg::Mode mode) {
  return sg::generate(model(), o, {mode}).ids;
}

TEST(generation_generator, one_generator_serves_many_calls_as_fresh_ones_and_replays_them) {
  for (const sg::Mode mode : kModes) {
    SCOPED_TRACE(sg::mode_name(mode));
    sg::Generator gen(model(), {mode});
    // Short, then longer (the cache grows), then short again, a sampled one,
    // a prompt of another length, and the first once more.
    std::vector<sg::GenerateOptions> calls = {request({1}, 6),     request({1, 9, 4}, 40),
                                              request({2}, 6),     request({1, 9, 4}, 40),
                                              request({7, 7}, 12), request({1}, 6)};
    calls[2].temperature = 0.8;
    calls[2].seed = 3;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const sg::GenerateResult r = gen.generate(calls[i]);
      EXPECT_EQ(r.ids, fresh(calls[i], mode)) << "call " << i;
      if (mode != sg::Mode::eager && i == 3) {
        // Call 1 grew the cache to 43 positions; the cache is an input of
        // both functions, so the keys so far are decode on each cache and
        // prefill (length 1, first cache), (3, grown), (1, grown). Call 3
        // has call 1's work and replays its graphs: nothing more captured.
        EXPECT_EQ(r.decode_counters.captured, 2) << "one decode graph per cache";
        EXPECT_EQ(r.prefill_counters.captured, 3) << "one prefill graph per length and cache";
      }
    }
    // Batches on the same generator: each prompt's ids are its ids alone.
    sg::BatchOptions b;
    b.prompts = {{1}, {1, 9, 4}, {5, 6, 7, 8}};
    b.steps = 10;
    for (int round = 0; round < 2; ++round) {
      const sg::BatchResult r = gen.generate_batch(b);
      for (std::size_t p = 0; p < b.prompts.size(); ++p) {
        EXPECT_EQ(r.ids[p], fresh(request(b.prompts[p], b.steps), mode)) << "prompt " << p;
      }
      if (mode != sg::Mode::eager && round == 1) {
        EXPECT_EQ(r.batch_buckets_captured, 0);
      }
    }
    EXPECT_EQ(gen.generate(calls[0]).ids, fresh(calls[0], mode)) << "after the batches";
  }
}

TEST(generation_generator, stop_ids_end_a_sequence_after_the_first_one_generated) {
  const std::vector<std::int64_t> all = fresh(request({1, 2}, 30), sg::Mode::eager);
  ASSERT_GE(all.size(), 10U);
  // Two stop ids; the sequence ends at whichever comes first.
  const std::int64_t a = all[6], b = all[9];
  std::size_t first = 0;
  while (all[first] != a && all[first] != b) ++first;
  const std::vector<std::int64_t> want(all.begin(), all.begin() + static_cast<long>(first) + 1);
  for (const sg::Mode mode : kModes) {
    sg::Generator gen(model(), {mode});
    auto o = request({1, 2}, 30);
    o.stop_ids = {b, a};
    EXPECT_EQ(gen.generate(o).ids, want) << sg::mode_name(mode);
    sg::BatchOptions batch;
    batch.prompts = {{1, 2}, {1, 2}};
    batch.steps = 30;
    batch.stop_ids = {b, a};
    const sg::BatchResult r = gen.generate_batch(batch);
    EXPECT_EQ(r.ids[0], want) << sg::mode_name(mode);
    EXPECT_EQ(r.ids[1], want) << sg::mode_name(mode);
  }
  sg::Generator gen(model());
  auto o = request({1}, 4);
  o.stop_ids = {97};
  EXPECT_THROW((void)gen.generate(o), sg::Error);
}

TEST(generation_generator, streaming_reports_every_id_in_order_on_the_calling_thread) {
  for (const sg::Mode mode : kModes) {
    sg::Generator gen(model(), {mode});
    std::vector<std::int64_t> streamed;
    const auto caller = std::this_thread::get_id();
    auto o = request({3, 1}, 20);
    o.on_token = [&](std::int64_t id) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      streamed.push_back(id);
    };
    const sg::GenerateResult r = gen.generate(o);
    EXPECT_FALSE(r.chained_on_device);
    EXPECT_EQ(streamed, r.ids);
    EXPECT_EQ(r.ids, fresh(request({3, 1}, 20), mode)) << sg::mode_name(mode);

    sg::BatchOptions b;
    b.prompts = {{3, 1}, {4}, {5, 5, 5}};
    b.steps = 8;
    std::vector<std::vector<std::int64_t>> per_prompt(3);
    b.on_token = [&](std::size_t p, std::int64_t id) { per_prompt.at(p).push_back(id); };
    EXPECT_EQ(gen.generate_batch(b).ids, per_prompt) << sg::mode_name(mode);
  }
}

// A callback that throws ends the call with its exception; the generator
// gives right answers afterwards, one sequence or many.
TEST(generation_generator, an_exception_from_the_callback_ends_the_call_and_the_generator_goes_on) {
  for (const sg::Mode mode : kModes) {
    SCOPED_TRACE(sg::mode_name(mode));
    sg::Generator gen(model(), {mode});
    auto o = request({1, 9}, 30);
    int seen = 0;
    o.on_token = [&](std::int64_t) {
      if (++seen == 5) throw std::runtime_error("stop here");
    };
    EXPECT_THROW((void)gen.generate(o), std::runtime_error);
    EXPECT_EQ(seen, 5);
    sg::BatchOptions b;
    b.prompts = {{1}, {2, 3}};
    b.steps = 20;
    b.on_token = [&](std::size_t, std::int64_t) {
      if (++seen == 12) throw std::runtime_error("stop the batch");
    };
    EXPECT_THROW((void)gen.generate_batch(b), std::runtime_error);
    EXPECT_EQ(gen.generate(request({1, 9}, 30)).ids, fresh(request({1, 9}, 30), mode));
    b.on_token = nullptr;
    const sg::BatchResult r = gen.generate_batch(b);
    EXPECT_EQ(r.ids[0], fresh(request({1}, 20), mode));
    EXPECT_EQ(r.ids[1], fresh(request({2, 3}, 20), mode));
  }
}

// A callback that calls its own generator would wait for itself: an error
// from the inner call (which the outer one passes on), and the generator
// goes on.
TEST(generation_generator, a_callback_calling_its_own_generator_is_an_error_not_a_hang) {
  sg::Generator gen(model());
  auto o = request({1, 9}, 10);
  o.on_token = [&](std::int64_t) { (void)gen.generate(request({2}, 3)); };
  try {
    (void)gen.generate(o);
    FAIL() << "expected an error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a call of the same generator"), std::string::npos)
        << e.what();
  }
  sg::BatchOptions b;
  b.prompts = {{1}};
  b.steps = 4;
  b.on_token = [&](std::size_t, std::int64_t) { (void)gen.generate_batch(b); };
  EXPECT_THROW((void)gen.generate_batch(b), sg::Error);
  // Another generator may be called from the callback.
  sg::Generator other(model());
  std::vector<std::int64_t> inner;
  o.on_token = [&](std::int64_t) {
    if (inner.empty()) inner = other.generate(request({2}, 3)).ids;
  };
  EXPECT_EQ(gen.generate(o).ids, fresh(request({1, 9}, 10), sg::Mode::reduce_overhead));
  EXPECT_EQ(inner, fresh(request({2}, 3), sg::Mode::reduce_overhead));
}

// Four host threads share one generator (calls run one at a time) and each
// gets its own prompts' ids.
TEST(generation_generator, several_threads_share_one_generator_and_each_gets_its_own_ids) {
  for (const sg::Mode mode : {sg::Mode::reduce_overhead, sg::Mode::max_autotune}) {
    sg::Generator gen(model(), {mode});
    std::vector<std::vector<std::int64_t>> want(4);
    for (std::size_t t = 0; t < 4; ++t) {
      want[t] = fresh(request({static_cast<std::int64_t>(t + 1), 2}, 16), mode);
    }
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 10; ++i) {
          const auto o = request({static_cast<std::int64_t>(t + 1), 2}, 16);
          if (i % 3 == 2) {
            sg::BatchOptions b;
            b.prompts = {o.prompt};
            b.steps = o.steps;
            if (gen.generate_batch(b).ids[0] != want[t]) ++wrong;
          } else if (gen.generate(o).ids != want[t]) {
            ++wrong;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0) << sg::mode_name(mode);
  }
}

// A quantized model (Note [Quantized weights]), Q8_0 and Q4_0: four host
// threads, each with its own generator over the same blocks and then all on
// one, in both graph modes (max-autotune generates the quantized products),
// give the ids eager gives on the same blocks; the model object itself may
// be gone by then (the generators hold its tensors).
TEST(generation_generator, a_quantized_model_from_several_threads_gives_eagers_ids) {
  for (const auto format : {sg::ops::QuantFormat::q8_0, sg::ops::QuantFormat::q4_0}) {
    SCOPED_TRACE(sg::ops::quant_format_name(format));
    auto q = std::make_unique<sg::models::LlamaModel>(sg::models::quantize_model(
        sg::models::random_model(sg::models::LlamaConfig{64, 128, 2, 4, 2, 97, 64, 1e-5, 500.0,
                                                         sg::ops::RopeStyle::interleaved, false},
                                 11),
        format));
    ASSERT_TRUE(sg::models::is_quantized(*q));
    std::vector<std::vector<std::int64_t>> want(4);
    for (std::size_t t = 0; t < 4; ++t) {
      want[t] =
          sg::generate(*q, request({static_cast<std::int64_t>(t + 1), 2}, 24), {sg::Mode::eager})
              .ids;
    }
    for (const sg::Mode mode : {sg::Mode::reduce_overhead, sg::Mode::max_autotune}) {
      SCOPED_TRACE(sg::mode_name(mode));
      std::vector<std::unique_ptr<sg::Generator>> own;
      for (int t = 0; t < 4; ++t)
        own.push_back(std::make_unique<sg::Generator>(*q, sg::GeneratorConfig{mode}));
      sg::Generator shared(*q, {mode});
      std::atomic<int> wrong{0};
      std::vector<std::thread> threads;
      for (std::size_t t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          const auto o = request({static_cast<std::int64_t>(t + 1), 2}, 24);
          for (int i = 0; i < 4; ++i) {
            if (own[t]->generate(o).ids != want[t]) ++wrong;
            if (shared.generate(o).ids != want[t]) ++wrong;
          }
        });
      }
      for (auto& th : threads) th.join();
      EXPECT_EQ(wrong.load(), 0);
    }
    sg::Generator last(*q, {sg::Mode::max_autotune});
    q.reset();
    EXPECT_EQ(last.generate(request({3, 2}, 24)).ids, want[2]);
  }
}

TEST(generation_generator, bad_configs_and_requests_are_clear_errors) {
  EXPECT_THROW(sg::Generator(model(), {sg::Mode::eager, 0}), sg::Error);
  sg::GeneratorConfig c;
  c.capture_sizes = {4, 2};
  EXPECT_THROW(sg::Generator(model(), c), sg::Error);
  sg::Generator gen(model());
  auto o = request({1}, 4);
  o.temperature = -1;
  EXPECT_THROW((void)gen.generate(o), sg::Error);
  EXPECT_THROW((void)gen.generate(request({}, 4)), sg::Error);
  EXPECT_THROW((void)gen.generate(request({1}, 64)), sg::Error);  // beyond seq_len 64
  sg::BatchOptions b;
  EXPECT_THROW((void)gen.generate_batch(b), sg::Error);  // no prompts
  b.prompts = {{1}, {}};
  EXPECT_THROW((void)gen.generate_batch(b), sg::Error);
  // Refused requests leave the generator as it was.
  EXPECT_EQ(gen.generate(request({1}, 5)).ids, fresh(request({1}, 5), sg::Mode::reduce_overhead));
}

// The shipped model through one generator, twice: the 200 reference ids.
TEST(generation_generator, stories260k_gives_the_reference_ids_on_every_call) {
  const fs::path dir = fs::path(SG_SHARED_DIR) / "models" / "stories260K";
  if (!fs::exists(dir / "stories260K.bin")) GTEST_SKIP() << dir << " is absent";
  const auto want = sgtest::stories_reference_ids(dir);
  sg::Generator gen(sg::models::load_llama2c((dir / "stories260K.bin").string()));
  for (int call = 0; call < 2; ++call) {
    auto o = request({1}, 200);
    const sg::GenerateResult r = gen.generate(o);
    EXPECT_EQ(r.ids, want) << "call " << call;
    EXPECT_EQ(r.decode_counters.captured, 1);
    EXPECT_EQ(r.decode_counters.replayed, 199 * (call + 1));
  }
}

}  // namespace

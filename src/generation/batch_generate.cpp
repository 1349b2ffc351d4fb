#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "state.h"

namespace sinkgraph {

// Note [Continuous batching]
// The KV cache has one slot per sequence decoded together (max_batch of
// them, rounded up to a bucket). A prompt joins when a slot is free: it is
// prefilled alone, through the prefill function (one graph per prompt
// length, as for one prompt), into a scratch single-sequence cache whose
// first P positions are then copied into its slot; its first id comes from
// that prefill. Each decode step then runs every live sequence at once
// through the batched decode function (Note [Batched decoding]): row b is
// slot b, positions arrive as an i64 tensor, and the step runs the smallest
// capture size >= the highest live slot + 1, rows of free slots padded
// (token 0 at position 0 of their own slot: computed and discarded). The
// batch size is a shape, so each bucket is one graph key, captured on first
// use; positions never re-capture. A sequence that meets its steps or its
// stop id frees its slot at once, and the next waiting prompt takes the
// lowest free slot before the next step. The host reads every step's ids
// (it must, to see stop ids and free slots). Rows never mix (batch-invariant
// kernels), so a prompt's ids are the ones it gets alone; sampling draws
// from (prompt_seed(seed, index), position), so they do not depend on the
// batch either.

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Live {
  std::size_t prompt = 0;  // index into options.prompts
  std::int64_t token = 0;  // the next token to feed
  std::int64_t pos = 0;    // its position
  bool active = false;
};

}  // namespace

std::uint64_t prompt_seed(std::uint64_t seed, std::size_t index) {
  return seed + 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(index);
}

BatchResult Generator::generate_batch(const BatchOptions& options) {
  State& state = *state_;
  const models::LlamaModel& model = state.model;
  const GeneratorConfig& config = state.config;
  const models::LlamaConfig& c = model.config();
  SG_CHECK(!options.prompts.empty(), "generate: no prompts (the prompts file has no lines)");
  SG_CHECK(options.steps >= 1, "generate: --steps must be >= 1, got ", options.steps);
  SG_CHECK(std::isfinite(options.temperature) && options.temperature >= 0,
           "generate: temperature must be a finite value >= 0, got ", options.temperature);
  check_stop_ids(options.stop_ids, c.vocab_size);
  std::int64_t longest = 0, prompt_tokens = 0;
  for (std::size_t i = 0; i < options.prompts.size(); ++i) {
    const auto& p = options.prompts[i];
    const auto n = static_cast<std::int64_t>(p.size());
    SG_CHECK(n >= 1, "generate: prompt ", i + 1, " is empty");
    SG_CHECK(n <= c.max_seq_len && options.steps <= c.max_seq_len - n, "generate: prompt ", i + 1,
             " (", n, " tokens) plus --steps ", options.steps, " exceeds the model's seq_len ",
             c.max_seq_len);
    for (const std::int64_t id : p) {
      SG_CHECK(id >= 0 && id < c.vocab_size, "generate: prompt ", i + 1, " (line ", i + 1, "): id ",
               id, " is out of range for a vocabulary of ", c.vocab_size);
    }
    longest = std::max(longest, n);
    prompt_tokens += n;
  }
  const std::int64_t positions = longest + options.steps;
  const auto& sizes = config.capture_sizes;
  const std::int64_t slots = state.slots;

  const State::Call call(state);
  BatchResult result;
  result.mode = config.mode;
  result.prompt_tokens = prompt_tokens;
  result.max_batch = config.max_batch;
  result.graph_memory_budget = config.graph_memory_budget;
  result.ids.resize(options.prompts.size());
  Stream& stream = current_stream();
  stream.synchronize();
  cpu().allocator().reset_peak();

  state.compile_batch_decode();
  const std::shared_ptr<CompiledFunction>& prefill = state.prefill;
  const std::shared_ptr<CompiledFunction>& decode = state.batch_decode;
  const TracedFn& prefill_fn = state.fn;
  const TracedFn& decode_fn = state.batched_fn;

  // Both caches are the generator's, kept for later calls (Note [One
  // generator, many calls]).
  const Tensor kv = state.batch_cache(positions);
  const Tensor scratch = state.cache(positions);  // one prompt's prefill
  result.kv_cache_bytes = (kv.numel() + scratch.numel()) * static_cast<std::int64_t>(sizeof(float));
  result.model = model_facts(model);

  // The next id from one row of logits ([1, vocab]) fed at `pos`.
  const auto pick = [&](const Tensor& row, std::size_t prompt, std::int64_t pos) {
    if (options.temperature <= 0) return ops::argmax(row).to_ints()[0];
    return ops::sample(row, options.temperature,
                       static_cast<std::int64_t>(prompt_seed(options.seed, prompt)), pos)
        .to_ints()[0];
  };
  const auto finished = [&](std::size_t prompt) {
    const auto& ids = result.ids[prompt];
    return static_cast<std::int64_t>(ids.size()) >= options.steps ||
           (!ids.empty() && is_stop(options.stop_ids, ids.back()));
  };

  std::deque<std::size_t> waiting;
  for (std::size_t i = 0; i < options.prompts.size(); ++i) waiting.push_back(i);
  std::vector<Live> live(static_cast<std::size_t>(slots));
  // Fills free slots (lowest first) from the waiting prompts: prefill alone,
  // copy the prompt's cache rows into the slot, keep it if it goes on.
  const auto admit = [&] {
    for (std::int64_t s = 0; s < config.max_batch && !waiting.empty(); ++s) {
      Live& slot = live[static_cast<std::size_t>(s)];
      if (slot.active) continue;
      const std::size_t index = waiting.front();
      waiting.pop_front();
      const auto& prompt = options.prompts[index];
      const auto n = static_cast<std::int64_t>(prompt.size());
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Arg> args{Tensor::from_ints(prompt, {n}), SymInt(0), scratch};
      const Tensor logits = prefill ? (*prefill)(args)[0] : prefill_fn(args)[0];
      const Tensor last = n == 1 ? logits : ops::slice(logits, 0, n - 1, n);
      const Tensor bad = ops::count_nonfinite(last);  // Note [Non-finite logits]
      ops::copy_(ops::narrow(ops::squeeze(ops::narrow(kv, 0, s, 1), 0), 2, 0, n),
                 ops::narrow(scratch, 2, 0, n));
      const std::int64_t first = pick(last, index, n - 1);
      check_finite_logits(bad.to_ints()[0], n - 1, c.vocab_size);
      result.ids[index].push_back(first);
      if (options.on_token) options.on_token(index, first);
      result.prefill_seconds += seconds_since(t0);
      if (finished(index)) {
        --s;  // the slot is still free
        continue;
      }
      slot = {index, result.ids[index].back(), n, true};
    }
  };

  // One decode step over `bucket` rows. A bucket not captured yet is
  // captured unless the buckets' pools have reached graph_memory_budget;
  // then it, and any later new bucket, runs eagerly (warned once).
  std::vector<std::int64_t> tokens, pos;
  const auto step = [&](std::int64_t bucket) {
    const std::vector<Arg> args{Tensor::from_ints(tokens, {bucket}),
                                Tensor::from_ints(pos, {bucket}), kv};
    const bool listed = std::binary_search(sizes.begin(), sizes.end(), bucket);
    const bool known = state.bucket_pool_bytes.contains(bucket);
    bool graph = decode && listed && !state.eager_buckets.contains(bucket);
    if (graph && !known && config.graph_memory_budget > 0 &&
        decode->counters().pool_reserved_bytes >= config.graph_memory_budget) {
      graph = false;
      state.eager_buckets.insert(bucket);
      result.notes.push_back(fmt::format(
          "graph_memory_budget: the bucket graphs' pools hold {} bytes of the {} allowed; bucket "
          "{} runs eagerly",
          decode->counters().pool_reserved_bytes, config.graph_memory_budget, bucket));
    }
    if (!graph) return decode_fn(args)[0];
    const std::int64_t pool_before = decode->counters().pool_reserved_bytes;
    const std::int64_t captured_before = decode->counters().captured;
    Tensor logits = (*decode)(args)[0];
    if (decode->counters().captured > captured_before) {
      state.bucket_pool_bytes[bucket] = decode->counters().pool_reserved_bytes - pool_before;
      ++result.batch_buckets_captured;
    }
    return logits;
  };
  if (config.warmup_buckets && decode) {
    // Every bucket the slots can use not captured by an earlier call,
    // smallest first (so a budget leaves the largest eager). Rows at position
    // 0 write their slots' position 0, which each prompt's prefill overwrites
    // before the slot is read.
    for (const std::int64_t bucket : sizes) {
      if (bucket > slots) break;
      if (state.bucket_pool_bytes.contains(bucket) || state.eager_buckets.contains(bucket)) {
        continue;
      }
      tokens.assign(static_cast<std::size_t>(bucket), 0);
      pos.assign(static_cast<std::size_t>(bucket), 0);
      (void)step(bucket);
    }
    stream.synchronize();
  }

  admit();
  while (true) {
    std::int64_t highest = -1, active = 0;
    for (std::int64_t s = 0; s < slots; ++s) {
      if (live[static_cast<std::size_t>(s)].active) highest = s, ++active;
    }
    if (highest < 0) break;
    const auto bucket_it = std::lower_bound(sizes.begin(), sizes.end(), highest + 1);
    const std::int64_t bucket = bucket_it == sizes.end() ? highest + 1 : *bucket_it;
    tokens.assign(static_cast<std::size_t>(bucket), 0);
    pos.assign(static_cast<std::size_t>(bucket), 0);
    for (std::int64_t s = 0; s <= highest; ++s) {
      const Live& l = live[static_cast<std::size_t>(s)];
      if (l.active)
        tokens[static_cast<std::size_t>(s)] = l.token, pos[static_cast<std::size_t>(s)] = l.pos;
    }
    const auto t0 = std::chrono::steady_clock::now();
    // A bucket past the capture sizes runs eagerly (it would be a new key).
    const Tensor logits = step(bucket);
    const Tensor bad_rows = ops::count_nonfinite(logits);
    std::vector<std::int64_t> next;
    if (options.temperature <= 0) next = ops::argmax(logits).to_ints();
    const std::vector<std::int64_t> bad = bad_rows.to_ints();
    for (std::int64_t s = 0; s <= highest; ++s) {
      Live& l = live[static_cast<std::size_t>(s)];
      if (!l.active) continue;
      check_finite_logits(bad[static_cast<std::size_t>(s)], l.pos, c.vocab_size);
      const std::int64_t id = options.temperature <= 0
                                  ? next[static_cast<std::size_t>(s)]
                                  : pick(ops::slice(logits, 0, s, s + 1), l.prompt, l.pos);
      result.ids[l.prompt].push_back(id);
      if (options.on_token) options.on_token(l.prompt, id);
      ++result.decode_tokens;
      l.token = id;
      ++l.pos;
      if (finished(l.prompt)) l.active = false;
    }
    result.decode_seconds += seconds_since(t0);
    ++result.decode_steps;
    result.step_buckets.emplace_back(bucket, active);
    admit();
  }

  stream.synchronize();
  result.bucket_pool_bytes = state.bucket_pool_bytes;
  result.peak_allocated_bytes = cpu().allocator().stats().peak_allocated_bytes;
  FunctionReports reports = report_functions(prefill.get(), decode.get());
  result.prefill_counters = reports.prefill;
  result.decode_counters = reports.decode;
  result.explain = std::move(reports.explain);
  result.explain_full = std::move(reports.explain_full);
  return result;
}

double BatchResult::decode_tokens_per_s() const {
  return decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0.0;
}

std::string BatchResult::stats_json() const {
  const BatchResult& r = *this;
  std::int64_t generated = 0;
  for (const auto& i : r.ids) generated += static_cast<std::int64_t>(i.size());
  const double decode_tps = decode_tokens_per_s();
  nlohmann::json j;
  j["mode"] = mode_name(r.mode);
  j["prompts"] = r.ids.size();
  j["prompt_tokens"] = r.prompt_tokens;
  j["generated_tokens"] = generated;
  j["prefill_tokens_per_s"] =
      r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prefill_seconds : 0.0;
  j["decode_tokens_per_s"] = decode_tps;
  j["decode_us_per_token"] = decode_tps > 0 ? 1e6 / decode_tps : 0.0;
  j["decode_steps"] = r.decode_steps;
  j["batch_buckets_captured"] = r.batch_buckets_captured;
  nlohmann::json buckets = nlohmann::json::object();
  for (const auto& [bucket, bytes] : r.bucket_pool_bytes) buckets[std::to_string(bucket)] = bytes;
  j["bucket_pool_bytes"] = buckets;
  add_counter_stats(j, r.prefill_counters, r.decode_counters, r.peak_allocated_bytes,
                    r.kv_cache_bytes, r.model);
  j["max_batch"] = r.max_batch;
  j["graph_memory_budget"] = r.graph_memory_budget;
  return j.dump();
}

std::string BatchResult::bucket_report() const {
  const BatchResult& r = *this;
  std::string out = "== decode buckets ==\n";
  std::size_t i = 0;
  while (i < r.step_buckets.size()) {
    std::size_t j = i;
    while (j + 1 < r.step_buckets.size() && r.step_buckets[j + 1] == r.step_buckets[i]) ++j;
    const auto [bucket, active] = r.step_buckets[i];
    out += fmt::format("steps {}-{}: bucket {} ({} live{})\n", i, j, bucket, active,
                       bucket > active ? fmt::format(", {} padded", bucket - active) : "");
    i = j + 1;
  }
  return out;
}

}  // namespace sinkgraph

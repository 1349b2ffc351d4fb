#include <algorithm>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "state.h"

namespace sinkgraph {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The next token from the last row of `logits` ([rows, vocab]), picked on the
// stream: greedy is the first maximum, sampling a draw from softmax(logits /
// T) keyed by (seed, position) (Note [Counter-based sampling]), so the same
// seed gives the same ids whether the host waits for each token or not.
Tensor pick(const Tensor& logits, const GenerateOptions& options, std::int64_t position) {
  const std::int64_t rows = logits.size(0);
  const Tensor last = rows == 1 ? logits : ops::slice(logits, 0, rows - 1, rows);
  if (options.temperature <= 0) return ops::argmax(last);
  return ops::sample(last, options.temperature, static_cast<std::int64_t>(options.seed), position);
}

// Note [Non-finite logits]
// A model whose weights or config overflow float (a weight near float's
// largest value, a rope_theta that rounds badly) gives NaN or infinite
// logits, and argmax or sample would still pick an id from them: a silent
// wrong answer. So every step's logits are counted on the stream
// (ops::count_nonfinite, launched right after the step and before the pick)
// and the count is read with the step's next host read: the id in the
// step-by-step loop, the final synchronize when tokens chain on the device.
// The check adds one small kernel per step and no synchronisation; a
// non-zero count is an error naming the position whose logits it was.
void check_finite(const Tensor& counts, std::int64_t first_position, std::int64_t vocab) {
  const std::vector<std::int64_t> c = counts.to_ints();
  for (std::size_t r = 0; r < c.size(); ++r) {
    check_finite_logits(c[r], first_position + static_cast<std::int64_t>(r), vocab);
  }
}

}  // namespace

void check_finite_logits(std::int64_t nonfinite, std::int64_t position, std::int64_t vocab) {
  SG_CHECK(nonfinite == 0, "generate: the logits at position ", position, " are not finite (",
           nonfinite, " of ", vocab,
           " values are NaN or infinite): the model's weights or config overflow float, and no id "
           "is picked from them");
}

GenerateResult Generator::generate(const GenerateOptions& options) {
  State& state = *state_;
  const models::LlamaModel& model = state.model;
  const models::LlamaConfig& c = model.config();
  const auto p = static_cast<std::int64_t>(options.prompt.size());
  SG_CHECK(p >= 1, "generate: the prompt needs at least one token id");
  SG_CHECK(options.steps >= 1, "generate: --steps must be >= 1, got ", options.steps);
  // Compared without adding: steps near INT64_MAX must not overflow.
  SG_CHECK(p <= c.max_seq_len && options.steps <= c.max_seq_len - p, "generate: prompt (", p,
           " tokens) plus steps (", options.steps, ") is beyond the model's seq_len ",
           c.max_seq_len);
  SG_CHECK(std::isfinite(options.temperature) && options.temperature >= 0,
           "generate: temperature must be a finite value >= 0, got ", options.temperature);
  SG_CHECK(options.forced_ids.empty() ||
               static_cast<std::int64_t>(options.forced_ids.size()) >= options.steps - 1,
           "generate: teacher forcing needs ", options.steps - 1,
           " ids (one per decode step), got ", options.forced_ids.size());
  for (const std::int64_t id : options.forced_ids) {
    SG_CHECK(id >= 0 && id < c.vocab_size, "generate: forced id ", id,
             " is out of range for a vocabulary of ", c.vocab_size);
  }
  check_stop_ids(options.stop_ids, c.vocab_size);
  for (std::size_t i = 0; i < options.prompt.size(); ++i) {
    SG_CHECK(options.prompt[i] >= 0 && options.prompt[i] < c.vocab_size, "generate: prompt id ",
             options.prompt[i], " at index ", i, " is out of range for a vocabulary of ",
             c.vocab_size);
  }

  const State::Call call(state);
  GenerateResult result;
  result.mode = state.config.mode;
  result.prompt_tokens = p;
  Stream& stream = current_stream();
  stream.synchronize();
  cpu().allocator().reset_peak();
  // Tracing is switched off however the call ends.
  struct TracingOff {
    Stream* stream = nullptr;
    ~TracingOff() {
      if (stream != nullptr) stream->set_tracing(false);
    }
  } tracing_off;
  if (options.trace) {
    (void)stream.take_spans();
    stream.set_tracing(true);
    tracing_off.stream = &stream;
  }
  state.compile_prefill_and_decode();
  const std::shared_ptr<CompiledFunction>& prefill = state.prefill;
  const std::shared_ptr<CompiledFunction>& decode = state.decode;
  std::int64_t captures_seen =
      prefill ? prefill->counters().captured + decode->counters().captured : 0;
  // Host spans of each step; a step that captured a graph says so.
  const auto mark = [&](const std::string& name, std::int64_t start) {
    if (!options.trace) return;
    std::string label = name;
    if (prefill) {
      const std::int64_t captures = prefill->counters().captured + decode->counters().captured;
      if (captures > captures_seen) label += " [capture]";
      captures_seen = captures;
    }
    result.trace.push_back({label, "host: steps", start, now_ns()});
  };

  const TracedFn& fn = state.fn;
  const auto run = [&](const std::shared_ptr<CompiledFunction>& compiled, const Tensor& tokens,
                       std::int64_t pos, const Tensor& kv) {
    const std::vector<Arg> args{tokens, SymInt(pos), kv};
    return compiled ? (*compiled)(args)[0] : fn(args)[0];
  };

  // Sized by the work asked for, not the model's max_seq_len (a model may
  // allow a million positions; 4 tokens need 5 rows); kept for later calls.
  const Tensor kv = state.cache(p + options.steps);
  result.kv_cache_bytes = kv.numel() * static_cast<std::int64_t>(dtype_size(kv.dtype()));
  result.model = model_facts(model);

  // Prefill: the whole prompt in one call.
  auto t0 = std::chrono::steady_clock::now();
  std::int64_t span_start = now_ns();
  const Tensor prompt = Tensor::from_ints(options.prompt, {p});
  const Tensor prompt_logits = run(prefill, prompt, 0, kv);
  const Tensor prompt_bad = ops::count_nonfinite(prompt_logits);
  if (options.keep_logits) result.logits = prompt_logits.to_floats();
  Tensor token = pick(prompt_logits, options, p - 1);
  std::int64_t next = token.to_ints()[0];
  check_finite(prompt_bad, p - prompt_logits.size(0), c.vocab_size);
  result.prefill_seconds = seconds_since(t0);
  mark("prefill", span_start);
  result.ids.push_back(next);
  if (options.on_token) options.on_token(next);

  // Decode: one token per step. The first step is not timed (it captures).
  const bool on_device = options.chain_on_device && options.stop_ids.empty() &&
                         !options.keep_logits && options.forced_ids.empty() && !options.on_token;
  result.chained_on_device = on_device;
  std::chrono::steady_clock::time_point decode_start;
  if (on_device) {
    // The token never visits the host: argmax or sample runs on the stream
    // right after the step and is the next step's input (a replay copies it
    // into the graph's static buffer). Events between steps time each step on
    // the device.
    std::vector<Tensor> picked, bad;
    std::vector<Event> done(static_cast<std::size_t>(std::max<std::int64_t>(options.steps, 1)));
    done[0].record(stream);
    for (std::int64_t step = 1; step < options.steps; ++step) {
      if (step == 2) decode_start = std::chrono::steady_clock::now();
      span_start = now_ns();
      const Tensor logits = run(decode, token, p + step - 1, kv);
      bad.push_back(ops::count_nonfinite(logits));
      token = pick(logits, options, p + step - 1);
      done[static_cast<std::size_t>(step)].record(stream);
      picked.push_back(token);
      mark(step == 1 ? "decode 1 (first step)" : "decode " + std::to_string(step), span_start);
      if (step >= 2) ++result.timed_decode_steps;
    }
    stream.synchronize();
    if (result.timed_decode_steps > 0) result.decode_seconds = seconds_since(decode_start);
    for (std::size_t i = 0; i < bad.size(); ++i) {
      check_finite(bad[i], p + static_cast<std::int64_t>(i), c.vocab_size);
    }
    for (const Tensor& t : picked) result.ids.push_back(t.to_ints()[0]);
    for (std::int64_t step = 1; step < options.steps; ++step) {
      result.step_us.push_back(1e3 * done[static_cast<std::size_t>(step - 1)].elapsed_ms(
                                         done[static_cast<std::size_t>(step)]));
    }
  } else {
    for (std::int64_t step = 1; step < options.steps; ++step) {
      if (is_stop(options.stop_ids, next)) break;
      if (step == 2) decode_start = std::chrono::steady_clock::now();
      span_start = now_ns();
      const auto step_start = std::chrono::steady_clock::now();
      const std::int64_t feed = options.forced_ids.empty()
                                    ? next
                                    : options.forced_ids[static_cast<std::size_t>(step - 1)];
      const Tensor logits = run(decode, Tensor::from_ints({feed}, {1}), p + step - 1, kv);
      const Tensor bad = ops::count_nonfinite(logits);
      if (options.keep_logits) {
        const std::vector<float> row = logits.to_floats();
        result.logits.insert(result.logits.end(), row.begin(), row.end());
      }
      next = pick(logits, options, p + step - 1).to_ints()[0];
      check_finite(bad, p + step - 1, c.vocab_size);
      mark(step == 1 ? "decode 1 (first step)" : "decode " + std::to_string(step), span_start);
      result.ids.push_back(next);
      if (options.on_token) options.on_token(next);
      result.step_us.push_back(1e6 * seconds_since(step_start));
      if (step >= 2) ++result.timed_decode_steps;
    }
  }
  if (!on_device && result.timed_decode_steps > 0) {
    result.decode_seconds = seconds_since(decode_start);
  }

  stream.synchronize();
  result.peak_allocated_bytes = cpu().allocator().stats().peak_allocated_bytes;
  FunctionReports reports = report_functions(prefill.get(), decode.get());
  result.prefill_counters = reports.prefill;
  result.decode_counters = reports.decode;
  result.explain = std::move(reports.explain);
  result.explain_full = std::move(reports.explain_full);
  if (options.trace) {
    stream.set_tracing(false);
    tracing_off.stream = nullptr;
    for (const KernelSpan& s : stream.take_spans()) {
      result.trace.push_back({s.name, s.host ? "host: launches" : "device: stream " + stream.name(),
                              s.start_ns, s.end_ns});
    }
  }
  return result;
}

double GenerateResult::decode_tokens_per_s() const {
  return decode_seconds > 0 ? static_cast<double>(timed_decode_steps) / decode_seconds : 0.0;
}

std::string GenerateResult::stats_json() const {
  const double decode_tps = decode_tokens_per_s();
  nlohmann::json j;
  j["mode"] = mode_name(mode);
  j["prompt_tokens"] = prompt_tokens;
  j["generated_tokens"] = ids.size();
  j["prefill_tokens_per_s"] =
      prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
  j["decode_tokens_per_s"] = decode_tps;
  j["decode_us_per_token"] = decode_tps > 0 ? 1e6 / decode_tps : 0.0;
  add_counter_stats(j, prefill_counters, decode_counters, peak_allocated_bytes, kv_cache_bytes,
                    model);
  return j.dump();
}

std::string GenerateResult::chrome_trace_json() const {
  // Complete ("X") events in microseconds, one thread id per track.
  nlohmann::json events = nlohmann::json::array();
  std::vector<std::string> tracks;
  std::int64_t origin = 0;
  for (const auto& e : trace) origin = origin == 0 ? e.start_ns : std::min(origin, e.start_ns);
  for (const auto& e : trace) {
    auto it = std::find(tracks.begin(), tracks.end(), e.track);
    if (it == tracks.end()) {
      tracks.push_back(e.track);
      it = tracks.end() - 1;
    }
    const auto tid = static_cast<int>(it - tracks.begin()) + 1;
    const bool replay = e.name.rfind("graph_replay", 0) == 0;
    events.push_back(
        {{"name", e.name},
         {"cat", replay ? "replay" : (e.track.rfind("device", 0) == 0 ? "kernel" : "host")},
         {"ph", "X"},
         {"pid", 1},
         {"tid", tid},
         {"ts", static_cast<double>(e.start_ns - origin) / 1e3},
         {"dur", static_cast<double>(std::max<std::int64_t>(e.end_ns - e.start_ns, 0)) / 1e3}});
  }
  for (std::size_t i = 0; i < tracks.size(); ++i) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", static_cast<int>(i) + 1},
                      {"args", {{"name", tracks[i]}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace sinkgraph

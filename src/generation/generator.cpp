#include <algorithm>
#include <utility>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "state.h"

namespace sinkgraph {

// Note [One generator, many calls]
// A server calls generate again and again on one model. So a Generator
// compiles the model's functions once, on first use, and keeps them: the
// prefill (a graph key per prompt length) and the one-sequence decode for
// generate, the batched decode (a key per batch bucket) for generate_batch,
// all on one backend and so one graph pool. It keeps the KV caches too:
// each is sized by the first call's work (prompt + steps positions, not the
// model's max_seq_len) and grown, to at least twice its size and at most
// max_seq_len, when a later call needs more. The cache is a mutated input,
// so its address is in the decode graph's key: a call that fits the cache
// replays the graphs earlier calls captured, and doubling bounds the keys a
// run of ever longer calls creates. Rows a call never wrote are never read
// (attention reads pos0 + P positions; each prefill writes its rows first),
// so what an earlier call left in the cache does not reach this one: a
// call's ids are those of a fresh generator (tested). A call holds the
// generator's mutex throughout: the caches and the graphs' static inputs
// are shared, so callers on several threads run one after another (use a
// generator per thread to run them at once; their weights can be shared).
// A call made from inside a call on the same thread (an on_token callback
// calling its generator) is an error, not a wait on itself.
// The counters a result reports are the compiled functions', over the
// generator's life.

Generator::State::State(models::LlamaModel m, GeneratorConfig c)
    : model(std::move(m)),
      config(std::move(c)),
      fn(model.as_function()),
      batched_fn(model.as_batched_function()) {
  const auto& sizes = config.capture_sizes;
  SG_CHECK(config.max_batch >= 1, "generate: max_batch must be >= 1, got ", config.max_batch);
  SG_CHECK(!sizes.empty(), "generate: capture_sizes needs at least one size");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SG_CHECK(sizes[i] >= 1 && (i == 0 || sizes[i] > sizes[i - 1]),
             "generate: capture_sizes must be increasing sizes >= 1");
  }
  SG_CHECK(config.graph_memory_budget >= 0, "generate: graph_memory_budget must be >= 0, got ",
           config.graph_memory_budget);
  // Slots: max_batch, rounded up to the bucket that holds them.
  const auto holding = std::lower_bound(sizes.begin(), sizes.end(), config.max_batch);
  slots = holding == sizes.end() ? config.max_batch : *holding;
  if (config.mode == Mode::eager) return;
  CompilerConfig compiler;
  compiler.mode = config.mode;
  // The weights are never modified or moved after compiling, so they are
  // frozen; max-autotune's projection merge needs it (Note [Merged weights
  // are copies] in src/passes/pattern_fusion.cpp).
  if (config.mode == Mode::max_autotune) compiler.frozen_parameter = true;
  // Every capture here is the generator's own step function, no user code,
  // so "global" would guard nothing, and it made a generator capturing on
  // one thread fail another generator's step on another thread (its
  // non-finite check allocates outside that capture): thread_local, as the
  // Python front end (Note [Captures from Python threads] in
  // python/sinkgraph/config.py).
  compiler.capture_error_mode = CaptureErrorMode::thread_local_;
  compiler.capture_limit =
      std::max<std::int64_t>(compiler.capture_limit, static_cast<std::int64_t>(sizes.size()));
  compiler.capture_sizes = sizes;
  compiler.graph_memory_budget = config.graph_memory_budget;
  backend = get_backend(compiler);
}

void Generator::State::compile_prefill_and_decode() {
  if (!backend || prefill) return;
  TraceOptions p;
  p.graph_name = "prefill";
  p.arg_names = {"tokens", "pos0", "kv_cache"};
  p.dynamic_dims[0] = {0};
  p.parameters = [this] { return model.named_parameters(); };
  // max-autotune keeps its post-pass graphs beside its generated code, so a
  // restart skips tracing and the passes as well as the compiler (Note
  // [Saved graphs] in src/compiler/saved_graphs.cpp).
  if (config.mode == Mode::max_autotune) p.cache_key = model.trace_key();
  prefill = compile(fn, backend, p);
  TraceOptions d;
  d.graph_name = "decode";
  d.arg_names = {"token", "pos", "kv_cache"};
  d.parameters = p.parameters;
  d.cache_key = p.cache_key;
  decode = compile(fn, backend, d);
}

void Generator::State::compile_batch_decode() {
  compile_prefill_and_decode();
  if (!backend || batch_decode) return;
  TraceOptions d;
  d.graph_name = "decode";
  d.arg_names = {"tokens", "pos", "kv_cache"};
  d.parameters = [this] { return model.named_parameters(); };
  batch_decode = compile(batched_fn, backend, d);
}

Generator::State::Call::Call(State& s) : state_(s), lock_(s.mutex, std::defer_lock) {
  SG_CHECK(state_.owner.load() != std::this_thread::get_id(),
           "generate: called from inside a call of the same generator (an on_token callback?); "
           "it would wait for itself: use another generator");
  lock_.lock();
  state_.owner.store(std::this_thread::get_id());
}

Generator::State::Call::~Call() { state_.owner.store(std::thread::id{}); }

namespace {

// The positions a cache of `have` rows grows to for a call needing `need`.
std::int64_t grown(std::int64_t have, std::int64_t need, std::int64_t max_seq_len) {
  if (have == 0) return need;
  return std::min(max_seq_len, std::max(need, 2 * have));
}

}  // namespace

const Tensor& Generator::State::cache(std::int64_t positions) {
  const std::int64_t have = kv.defined() ? kv.size(2) : 0;
  if (have < positions) kv = model.new_kv_cache(grown(have, positions, model.config().max_seq_len));
  return kv;
}

const Tensor& Generator::State::batch_cache(std::int64_t positions) {
  const std::int64_t have = batch_kv.defined() ? batch_kv.size(3) : 0;
  if (have < positions) {
    batch_kv =
        model.new_batched_kv_cache(slots, grown(have, positions, model.config().max_seq_len));
  }
  return batch_kv;
}

Generator::Generator(models::LlamaModel model, GeneratorConfig config)
    : state_(std::make_unique<State>(std::move(model), std::move(config))) {}

Generator::~Generator() = default;

const models::LlamaModel& Generator::model() const { return state_->model; }
const GeneratorConfig& Generator::config() const { return state_->config; }

GenerateResult generate(const models::LlamaModel& model, const GenerateOptions& options,
                        const GeneratorConfig& config) {
  return Generator(model, config).generate(options);
}

BatchResult generate_batch(const models::LlamaModel& model, const BatchOptions& options,
                           const GeneratorConfig& config) {
  return Generator(model, config).generate_batch(options);
}

void check_stop_ids(const std::vector<std::int64_t>& ids, std::int64_t vocab) {
  for (const std::int64_t id : ids) {
    SG_CHECK(id >= 0 && id < vocab, "generate: stop id ", id,
             " is out of range for a vocabulary of ", vocab, " (it could never be generated)");
  }
}

bool is_stop(const std::vector<std::int64_t>& stop_ids, std::int64_t id) {
  return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
}

ModelFacts model_facts(const models::LlamaModel& model) {
  return {model.weight_bytes(), model.tensor_parallel().size};
}

FunctionReports report_functions(const CompiledFunction* prefill, const CompiledFunction* decode) {
  FunctionReports r;
  if (prefill == nullptr || decode == nullptr) return r;
  r.prefill = prefill->counters();
  r.decode = decode->counters();
  r.explain =
      "== prefill ==\n" + prefill->explain(false) + "== decode ==\n" + decode->explain(false);
  r.explain_full =
      "== prefill ==\n" + prefill->explain(true) + "== decode ==\n" + decode->explain(true);
  return r;
}

void add_counter_stats(nlohmann::json& j, const GraphCounters& prefill, const GraphCounters& decode,
                       std::int64_t peak_allocated_bytes, std::int64_t kv_cache_bytes,
                       const ModelFacts& model) {
  GraphCounters sum = prefill;
  sum += decode;
  j["captured"] = sum.captured;
  j["replayed"] = sum.replayed;
  j["prefill_captured"] = prefill.captured;
  j["decode_captured"] = decode.captured;
  j["recapture_due_to_mutated_input_change"] = sum.recapture_due_to_mutated_input_change;
  j["recapture_due_to_parameter_change"] = sum.recapture_due_to_parameter_change;
  j["recapture_due_to_force_recapture"] = sum.recapture_due_to_force_recapture;
  j["eager_fallback_due_to_capture_limit"] = sum.eager_fallback_due_to_capture_limit;
  j["pool_reserved_bytes"] = sum.pool_reserved_bytes;
  j["peak_allocated_bytes"] = peak_allocated_bytes;
  j["kv_cache_bytes"] = kv_cache_bytes;
  // max-autotune's code generation: kernels in the decode graph, and regions
  // of both functions served by the compile cache.
  j["codegen_kernels"] = decode.codegen_kernels;
  j["compile_cache_hits"] = sum.compile_cache_hits;
  j["threads"] = num_threads();
  j["weight_bytes"] = model.weight_bytes;
  j["tp_size"] = model.tp_size;
}

}  // namespace sinkgraph

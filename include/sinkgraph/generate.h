#pragma once
// Generation as a library: a Llama model's prefill + decode loop in one of the
// three modes, one prompt or many decoded together (Note [Continuous batching]
// in src/generation/batch_generate.cpp). `sinkgraph generate` is a shell over
// this header, and so is the Python package's `sinkgraph.Generator`.
//
//   sinkgraph::Generator gen(sinkgraph::models::load_model("stories260K.bin"));
//   sinkgraph::GenerateOptions o;
//   o.prompt = {1};
//   o.steps = 64;
//   o.on_token = [](std::int64_t id) { ... };  // streaming
//   const sinkgraph::GenerateResult r = gen.generate(o);  // r.ids, r.decode_seconds, ...
//
// A Generator compiles the model's functions once and keeps them, with their
// graphs and the KV caches, for every later call (Note [One generator, many
// calls] in src/generation/generator.cpp).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sinkgraph/compiler.h"
#include "sinkgraph/export.h"
#include "sinkgraph/llama.h"

namespace sinkgraph {

// How a Generator compiles and batches; fixed for its lifetime.
struct SG_API GeneratorConfig {
  Mode mode = Mode::reduce_overhead;
  // Sequences decoded together by generate_batch (its KV cache's slots,
  // rounded up to the capture size that holds them).
  std::int64_t max_batch = 16;
  // The batch buckets and the bound on their pools (CompilerConfig's).
  std::vector<std::int64_t> capture_sizes = CompilerConfig{}.capture_sizes;
  std::int64_t graph_memory_budget = CompilerConfig{}.graph_memory_budget;
  // generate_batch captures every bucket before its first step, not on use.
  bool warmup_buckets = false;
};

// One prompt's request.
struct SG_API GenerateOptions {
  std::vector<std::int64_t> prompt{1};  // BOS
  std::int64_t steps = 128;             // ids to generate (fewer on a stop id)
  double temperature = 0.0;             // 0: greedy
  std::uint64_t seed = 0;
  // Generation stops after any of these ids (which is reported).
  std::vector<std::int64_t> stop_ids;
  bool keep_logits = false;  // every row run through the model (P + N - 1 rows)
  bool trace = false;        // record host launches and device spans
  // Tokens are always picked on the device (argmax, or the sample operator).
  // With no stop id, no kept logits and no teacher forcing, the picked token
  // is also fed straight into the next step: the host never waits for a
  // token, and reads all ids once at the end. false: the host reads each id
  // before the next step (the loop a stop id needs).
  bool chain_on_device = true;
  // Called with each generated id as soon as the host has it, on the thread
  // that called generate. Setting it makes the host read every token before
  // the next step: one wait per token, as a stop id does. An exception it
  // throws ends the call (the generator stays usable).
  std::function<void(std::int64_t)> on_token;
  // Teacher forcing (benchmarks and tests): decode step k feeds forced_ids[k-1]
  // instead of the token picked at step k-1; the picked ids are still reported.
  std::vector<std::int64_t> forced_ids;
};

struct SG_API TraceEvent {
  std::string name;
  std::string track;  // "host", "device: <stream>"
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// What a run reports of the model it ran: the weight bytes this process
// holds (its shard's under tensor parallelism) and the tensor-parallel size.
struct SG_API ModelFacts {
  std::int64_t weight_bytes = 0;
  std::int64_t tp_size = 1;
};
SG_API ModelFacts model_facts(const models::LlamaModel& model);

struct SG_API GenerateResult {
  Mode mode = Mode::reduce_overhead;
  std::int64_t prompt_tokens = 0;
  std::vector<std::int64_t> ids;  // generated ids only
  std::vector<float> logits;      // rows of vocab_size, when keep_logits
  double prefill_seconds = 0;
  double decode_seconds = 0;  // decode steps after the first
  std::int64_t timed_decode_steps = 0;
  // Per decode step (steps 1 .. N-1), microseconds: the time between the device
  // finishing step k-1 and step k on the chained path (events recorded on
  // the stream), else the host's wall time for the step.
  std::vector<double> step_us;
  bool chained_on_device = false;  // the token chained on the device (no host wait)
  // The generator's compiled functions, counted over its whole life.
  GraphCounters prefill_counters, decode_counters;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t kv_cache_bytes = 0;  // the KV cache this call used
  ModelFacts model;                 // weight_bytes and tp_size of the model run
  // The compiled functions' reports (empty in eager mode): decisions and one
  // line per device graph; explain_full adds every node of every device graph.
  std::string explain, explain_full;
  std::vector<TraceEvent> trace;
  std::vector<std::string> notes;  // what the user should know (warnings)

  // Decode tokens per second over the timed steps (0 when none were timed).
  [[nodiscard]] double decode_tokens_per_s() const;
  // The `generate --stats` JSON object, one line.
  [[nodiscard]] std::string stats_json() const;
  // Chrome trace event JSON of `trace` (Perfetto opens it).
  [[nodiscard]] std::string chrome_trace_json() const;
};

// Many prompts' request, decoded together (Note [Continuous batching]).
struct SG_API BatchOptions {
  std::vector<std::vector<std::int64_t>> prompts;
  std::int64_t steps = 128;  // per prompt
  double temperature = 0.0;  // 0: greedy
  std::uint64_t seed = 0;
  std::vector<std::int64_t> stop_ids;
  // Called with (prompt index, id) for each id as the host reads it (every
  // step's ids are read: the scheduler needs them), on the calling thread.
  std::function<void(std::size_t, std::int64_t)> on_token;
};

struct SG_API BatchResult {
  Mode mode = Mode::reduce_overhead;
  std::int64_t prompt_tokens = 0;              // over every prompt
  std::int64_t max_batch = 0;                  // the generator's
  std::int64_t graph_memory_budget = 0;        // the generator's
  std::vector<std::vector<std::int64_t>> ids;  // per prompt, in input order
  double prefill_seconds = 0;                  // every prompt's prefill
  double decode_seconds = 0;                   // every decode step
  std::int64_t decode_tokens = 0;              // ids the decode steps produced
  std::int64_t decode_steps = 0;
  // Bucket size -> the pool bytes its capture added (graphs share one pool).
  std::map<std::int64_t, std::int64_t> bucket_pool_bytes;
  std::int64_t batch_buckets_captured = 0;
  // Per decode step: the bucket it ran and its live sequences.
  std::vector<std::pair<std::int64_t, std::int64_t>> step_buckets;
  GraphCounters prefill_counters, decode_counters;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t kv_cache_bytes = 0;
  ModelFacts model;  // weight_bytes and tp_size of the model run
  std::string explain, explain_full;
  std::vector<std::string> notes;  // what the user should know (warnings)

  [[nodiscard]] double decode_tokens_per_s() const;
  // The `generate --prompts-file --stats` JSON object, one line.
  [[nodiscard]] std::string stats_json() const;
  // "steps 0-11: bucket 4 (3 live)" lines, one per run of equal steps.
  [[nodiscard]] std::string bucket_report() const;
};

// Note [One generator, many calls] in src/generation/generator.cpp.
class SG_API Generator {
 public:
  // `model` shares its weights with the caller's (tensors are handles).
  // Throws sinkgraph::Error for a bad config (max_batch < 1, capture sizes
  // empty or not increasing).
  explicit Generator(models::LlamaModel model, GeneratorConfig config = {});
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Runs prompt + steps. Throws sinkgraph::Error before any work when the
  // prompt plus steps exceed the model's max_seq_len or an id is out of
  // range. Calls from several threads run one at a time.
  GenerateResult generate(const GenerateOptions& options);
  // Runs every prompt for `steps` tokens (fewer on a stop id), at most
  // max_batch at once. Throws sinkgraph::Error before any work for bad
  // options (no prompts, an empty prompt, an id out of range, a prompt plus
  // steps beyond seq_len).
  BatchResult generate_batch(const BatchOptions& options);

  [[nodiscard]] const models::LlamaModel& model() const;
  [[nodiscard]] const GeneratorConfig& config() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One call on a fresh Generator (what `sinkgraph generate` runs).
SG_API GenerateResult generate(const models::LlamaModel& model, const GenerateOptions& options,
                               const GeneratorConfig& config = {});
SG_API BatchResult generate_batch(const models::LlamaModel& model, const BatchOptions& options,
                                  const GeneratorConfig& config = {});

// The seed sequence `index` samples with: `seed` itself for the first prompt
// (so one prompt samples as a single generate does), mixed for others.
SG_API std::uint64_t prompt_seed(std::uint64_t seed, std::size_t index);

// Throws when `nonfinite` (ops::count_nonfinite of the logits computed at
// `position`) is not 0 (Note [Non-finite logits] in src/generation/generate.cpp).
SG_API void check_finite_logits(std::int64_t nonfinite, std::int64_t position, std::int64_t vocab);

}  // namespace sinkgraph

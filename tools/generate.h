#pragma once
// The generation driver behind `sinkgraph generate`: prefill + decode loop of
// a Llama model in one of the three modes (DESIGN.md, "sinkgraph generate").
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sinkgraph/compiler.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::tools {

struct GenerateOptions {
  std::vector<std::int64_t> prompt{1};  // BOS
  std::int64_t steps = 128;
  Mode mode = Mode::reduce_overhead;
  double temperature = 0.0;  // 0: greedy
  std::uint64_t seed = 0;
  std::optional<std::int64_t> stop_id;
  bool keep_logits = false;  // every row run through the model (P + N - 1 rows)
  bool trace = false;        // record host launches and device spans
  // Tokens are always picked on the device (argmax, or the sample operator).
  // With no stop id, no kept logits and no teacher forcing, the picked token
  // is also fed straight into the next step: the host never waits for a
  // token, and reads all ids once at the end. false: the host reads each id
  // before the next step (the loop a stop id needs).
  bool chain_on_device = true;
  // Called with each generated id as soon as the host has it (`generate
  // --stream`). Setting it makes the host read every token before the next
  // step: one wait per token, as a stop id does.
  std::function<void(std::int64_t)> on_token;
  // Teacher forcing (benchmarks and tests): decode step k feeds forced_ids[k-1]
  // instead of the token picked at step k-1; the picked ids are still reported.
  std::vector<std::int64_t> forced_ids;
};

struct TraceEvent {
  std::string name;
  std::string track;  // "host", "device: <stream>"
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// What a run reports of the model it ran: the weight bytes this process
// holds (its shard's under tensor parallelism) and the tensor-parallel size.
struct ModelFacts {
  std::int64_t weight_bytes = 0;
  std::int64_t tp_size = 1;
};
ModelFacts model_facts(const models::LlamaModel& model);

// Throws when `nonfinite` (ops::count_nonfinite of the logits computed at
// `position`) is not 0 (Note [Non-finite logits] in generate.cpp).
void check_finite_logits(std::int64_t nonfinite, std::int64_t position, std::int64_t vocab);

struct GenerateResult {
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
  GraphCounters prefill_counters, decode_counters;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t kv_cache_bytes = 0;  // the KV cache: prompt + steps positions
  ModelFacts model;                 // weight_bytes and tp_size of the model run
  // The compiled functions' reports (empty in eager mode): decisions and one
  // line per device graph; explain_full adds every node of every device graph.
  std::string explain, explain_full;
  std::vector<TraceEvent> trace;
  std::vector<std::string> notes;  // what the user should know (on stderr)
};

// Runs prompt + steps. Throws sinkgraph::Error before any work when the
// prompt plus steps exceed the model's max_seq_len or an id is out of range.
GenerateResult generate(const models::LlamaModel& model, const GenerateOptions& options);

// The --stats JSON object, one line.
std::string stats_json(const GenerateOptions& options, const GenerateResult& result);

// Chrome trace event JSON (Perfetto opens it).
std::string chrome_trace_json(const GenerateResult& result);

}  // namespace sinkgraph::tools

#pragma once
// Batched generation behind `sinkgraph generate --prompts-file` (Note
// [Continuous batching] in batch_generate.cpp): many prompts decoded together
// in one step per token, a graph per batch bucket, sequences leaving and
// joining between steps.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "generate.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::tools {

struct BatchOptions {
  std::vector<std::vector<std::int64_t>> prompts;
  std::int64_t steps = 128;  // per prompt
  Mode mode = Mode::reduce_overhead;
  double temperature = 0.0;  // 0: greedy
  std::uint64_t seed = 0;
  std::optional<std::int64_t> stop_id;
  std::int64_t max_batch = 16;  // sequences decoded together
  // The batch buckets and the bound on their pools (CompilerConfig's).
  std::vector<std::int64_t> capture_sizes = CompilerConfig{}.capture_sizes;
  std::int64_t graph_memory_budget = CompilerConfig{}.graph_memory_budget;
  bool warmup_buckets = false;  // capture every bucket up front, not on first use
};

struct BatchResult {
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
};

// The seed sequence `index` samples with: `seed` itself for the first prompt
// (so one prompt samples as `generate --prompt-ids` does), mixed for others.
std::uint64_t prompt_seed(std::uint64_t seed, std::size_t index);

// Runs every prompt for `steps` tokens (fewer on its stop id). Throws
// sinkgraph::Error before any work for bad options (no prompts, an id out
// of range, a prompt plus steps beyond seq_len, max_batch < 1, bad buckets).
BatchResult generate_batched(const models::LlamaModel& model, const BatchOptions& options);

// The --stats JSON object, one line.
std::string batch_stats_json(const BatchOptions& options, const BatchResult& result);

// "steps 0-11: bucket 4 (3 live)" lines, one per run of equal steps.
std::string bucket_report(const BatchResult& result);

}  // namespace sinkgraph::tools

#pragma once
// What a Generator keeps between calls (Note [One generator, many calls] in
// generator.cpp), and what both loops report of their compiled functions.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sinkgraph/compiler.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/tensor.h"
#include "sinkgraph/trace.h"

namespace sinkgraph {

struct Generator::State {
  State(models::LlamaModel m, GeneratorConfig c);

  models::LlamaModel model;
  GeneratorConfig config;
  std::int64_t slots = 0;  // the batched cache's: max_batch rounded up to a bucket
  std::mutex mutex;        // one call at a time
  // The thread inside a call (Call below), so that a callback calling its
  // own generator is an error instead of waiting on itself forever.
  std::atomic<std::thread::id> owner{};

  // Holds `mutex` for one call.
  class Call {
   public:
    explicit Call(State& s);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    State& state_;
    std::unique_lock<std::mutex> lock_;
  };
  TracedFn fn, batched_fn;
  std::shared_ptr<Backend> backend;  // null in eager mode
  // Compiled on first use (null in eager mode): the prefill serves both
  // loops (a batch prefills each prompt alone into `kv`).
  std::shared_ptr<CompiledFunction> prefill, decode, batch_decode;
  Tensor kv;        // one sequence's cache; a batch's prefill scratch
  Tensor batch_kv;  // [slots, ...]: the batched decode's
  // Batch buckets: the pool bytes each capture added; those run eagerly
  // once graph_memory_budget was reached.
  std::map<std::int64_t, std::int64_t> bucket_pool_bytes;
  std::set<std::int64_t> eager_buckets;

  void compile_prefill_and_decode();
  void compile_batch_decode();
  // The one-sequence cache with at least `positions` rows, grown if needed.
  const Tensor& cache(std::int64_t positions);
  const Tensor& batch_cache(std::int64_t positions);
};

// Throws sinkgraph::Error for a stop id outside the vocabulary.
void check_stop_ids(const std::vector<std::int64_t>& ids, std::int64_t vocab);
bool is_stop(const std::vector<std::int64_t>& stop_ids, std::int64_t id);

// Adds to `j` the graph counters summed over both compiled functions, their
// captures, pools, peak memory, the KV cache, code generation, the thread
// count and `model`'s facts (weight_bytes, tp_size).
void add_counter_stats(nlohmann::json& j, const GraphCounters& prefill, const GraphCounters& decode,
                       std::int64_t peak_allocated_bytes, std::int64_t kv_cache_bytes,
                       const ModelFacts& model);

// The prefill and decode functions' counters and explain reports (both
// headed "== prefill ==", "== decode =="); empty in eager mode (null).
struct FunctionReports {
  GraphCounters prefill, decode;
  std::string explain, explain_full;
};
FunctionReports report_functions(const CompiledFunction* prefill, const CompiledFunction* decode);

}  // namespace sinkgraph

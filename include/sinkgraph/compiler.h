#pragma once
// The compile front end, mirroring TorchAir:
//   config = CompilerConfig{}; config.set("mode", "reduce-overhead");
//   backend = get_backend(config, decompositions);   // get_npu_backend(compiler_config=config)
//   fn = compile(model_fn, backend, trace_options);  // torch.compile(model, backend=...)
//   outputs = fn({x, pos, cache});                   // traces on first call per guard set
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sinkgraph/allocator.h"
#include "sinkgraph/export.h"
#include "sinkgraph/passes.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/trace.h"

namespace sinkgraph {

enum class Mode : std::uint8_t { eager, reduce_overhead, max_autotune };
SG_API const char* mode_name(Mode mode);          // "eager", "reduce-overhead", "max-autotune"
SG_API Mode parse_mode(const std::string& text);  // throws sinkgraph::Error

// Every option with TorchAir's name, meaning and default (each described
// below; set() takes them as text, and the Python package's CompilerConfig
// has the same names).
struct SG_API CompilerConfig {
  Mode mode = Mode::max_autotune;  // TorchAir's default
  bool force_eager = false;
  std::int64_t capture_limit = 64;
  bool force_recapture = false;
  CaptureErrorMode capture_error_mode = CaptureErrorMode::global;
  bool clone_input = true;
  bool clone_output = false;
  bool frozen_parameter = false;
  bool reuse_graph_pool_in_same_fx = true;
  std::shared_ptr<MemPool> use_graph_pool;  // none: a pool per compiled function
  std::int64_t warmup_iters = 0;
  bool inplace_pass = true;
  bool input_inplace_pass = true;
  bool pattern_fusion_pass = true;
  bool remove_noop_ops = true;
  bool remove_cat_ops = true;
  bool memory_planning = true;
  std::vector<passes::Pass> pre_passes;   // run before the built-in passes
  std::vector<passes::Pass> post_passes;  // run after them
  std::string debug_save;                 // folder: the IR after every pass
  std::string data_dump;                  // folder: every node's outputs from one eager run
  std::int64_t recompile_limit = 8;       // guard sets per compiled function
  // max-autotune only: generate C++ for the captured graph's regions (Note
  // [Generated regions] in src/codegen/region.cpp); false keeps every kernel.
  bool codegen = true;
  // The compile cache's folder; empty: SINKGRAPH_CACHE_DIR, else
  // $XDG_CACHE_HOME/sinkgraph (docs/codegen.md).
  std::string cache_dir;
  // Batched decoding (vLLM's and TorchAir's capture sizes): the batch
  // buckets a decode loop captures one graph each for, increasing; a step
  // with B sequences runs the smallest bucket >= B (tools/batch_generate.cpp).
  std::vector<std::int64_t> capture_sizes = {1, 2, 4, 8, 16, 32};
  // Bytes the buckets' graph pools may reach; 0: no bound. Once they reach
  // it no further bucket is captured: larger buckets run eagerly, with a
  // warning (the bucket whose capture crossed it keeps its graph).
  std::int64_t graph_memory_budget = 0;

  // Sets an option from text ("mode", "reduce-overhead"; "capture_limit", "4";
  // booleans "true"/"false"). Unknown names and invalid values throw
  // sinkgraph::Error naming the option and what is accepted.
  void set(const std::string& name, const std::string& value);
  [[nodiscard]] std::string get(const std::string& name) const;
  [[nodiscard]] static const std::vector<std::string>& option_names();
  [[nodiscard]] std::string str() const;  // every option, one per line
};

// Counters as TorchAir names them (summed over a compiled function's graphs).
struct SG_API GraphCounters {
  std::int64_t captured = 0;
  std::int64_t replayed = 0;
  std::int64_t recapture_due_to_mutated_input_change = 0;
  std::int64_t recapture_due_to_parameter_change = 0;
  std::int64_t recapture_due_to_force_recapture = 0;
  std::int64_t eager_fallback_due_to_capture_limit = 0;
  std::int64_t pool_reserved_bytes = 0;
  // Note [Memory planning] in passes.h, for the largest captured key: the
  // planned arena (0 unless max-autotune plans memory) and the liveness lower
  // bound of the graph's intermediates (every capturing mode).
  std::int64_t planned_arena_bytes = 0;
  std::int64_t liveness_lower_bound_bytes = 0;
  // max-autotune code generation, for the largest captured key: generated
  // kernels in its device graph; and compilations served by the compile cache.
  std::int64_t codegen_kernels = 0;
  std::int64_t compile_cache_hits = 0;
  GraphCounters& operator+=(const GraphCounters& o);
};

// Note [Stale outputs]
// A replay's outputs are views into the graph's pool, stamped with (pool,
// generation). Each replay into the pool bumps its generation, so using an
// output (as an operator input, a host read, a clone or a view) after a later
// replay raises an error naming the graph and both replays. Passing output k
// as an input of replay k+1 is legal: it is copied in before it is overwritten.

// How a call hands its work to the device.
struct CallOptions {
  // Return only once the call's work is complete, as a host read of its
  // outputs would wait. A replay on an idle stream then runs on the calling
  // thread, with no hand-off to the stream's worker (Note [Replays on the
  // caller] in device_graph.h). A kernel error raises from the call.
  bool wait = false;
};

// A compiled graph ready to run (TorchAir's concrete graphs).
class SG_API ConcreteGraph {
 public:
  virtual ~ConcreteGraph() = default;
  virtual std::vector<ir::RtValue> run(std::span<const ir::RtValue> inputs,
                                       const CallOptions& options) = 0;
  [[nodiscard]] virtual std::string kind() const = 0;  // "EagerGraph", "CapturedGraph"
  [[nodiscard]] virtual std::string explain() const = 0;
  [[nodiscard]] virtual const ir::Graph& graph() const = 0;
  [[nodiscard]] virtual GraphCounters counters() const { return {}; }
  // The captured device graphs as text (kernels, arguments, updatable slots, edges).
  [[nodiscard]] virtual std::string device_graph_text() const { return ""; }
  // Frees captured device graphs and their pool memory.
  virtual void reset() {}
};

// Chooses passes by mode and builds the concrete graph.
class SG_API GraphCompiler {
 public:
  explicit GraphCompiler(CompilerConfig config) : config_(std::move(config)) {}
  // The pass pipeline for the config's mode (names, in order).
  [[nodiscard]] std::vector<std::string> pipeline() const;
  std::unique_ptr<ConcreteGraph> compile(TracedGraph& traced) const;
  // The concrete graph for a graph that went through pipeline() already (one
  // loaded from saved graphs): runs no pass.
  [[nodiscard]] std::unique_ptr<ConcreteGraph> build(const TracedGraph& traced) const;

 private:
  CompilerConfig config_;
};

class SG_API Backend {
 public:
  Backend(CompilerConfig config, Decompositions decompositions)
      : config_(std::move(config)), decompositions_(std::move(decompositions)) {}
  [[nodiscard]] const CompilerConfig& config() const { return config_; }
  [[nodiscard]] const Decompositions& decompositions() const { return decompositions_; }
  std::unique_ptr<ConcreteGraph> compile(TracedGraph& traced) const {
    return GraphCompiler(config_).compile(traced);
  }

 private:
  CompilerConfig config_;
  Decompositions decompositions_;
};

SG_API std::shared_ptr<Backend> get_backend(const CompilerConfig& config,
                                            const Decompositions& custom_decompositions = {});

// The callable compile() returns. Safe to call from several threads; calls are
// serialized.
class SG_API CompiledFunction {
 public:
  CompiledFunction(TracedFn fn, std::shared_ptr<Backend> backend, TraceOptions options);
  std::vector<Tensor> operator()(std::span<const Arg> args) { return call(args, {}); }
  std::vector<Tensor> operator()(std::initializer_list<Arg> args) {
    return (*this)(std::span<const Arg>(args.begin(), args.size()));
  }
  // A call with options: `{.wait = true}` returns once the outputs are
  // complete, a replay running on the calling thread when it can.
  std::vector<Tensor> call(std::span<const Arg> args, const CallOptions& options);
  std::vector<Tensor> call(std::initializer_list<Arg> args, const CallOptions& options) {
    return call(std::span<const Arg>(args.begin(), args.size()), options);
  }

  // When and why each graph was traced and compiled, and what runs it.
  [[nodiscard]] std::string explain(bool with_device_graphs = false) const;
  [[nodiscard]] GraphCounters counters() const;
  // Frees every captured graph and its pool memory (the traces stay).
  void reset();
  [[nodiscard]] std::size_t num_graphs() const;
  [[nodiscard]] std::int64_t num_traces() const;
  // Calls that matched no guard set once recompile_limit was reached, and so
  // ran eagerly (the explain report's "eager calls past the recompile limit").
  [[nodiscard]] std::int64_t eager_calls() const;
  // The graph compiled for the i-th guard set.
  [[nodiscard]] const ir::Graph& graph(std::size_t i) const;

  // Note [Saved graphs] (src/compiler/saved_graphs.cpp): every guard set's
  // post-pass graph, its guards and how its inputs bind, as a JSON file
  // written atomically. Its params are written by name: a graph reading a
  // tensor the model does not list (TraceOptions::parameters), or one a pass
  // computed (frozen_parameter's folded weights), cannot be saved (throws
  // sinkgraph::Error naming it).
  void save(const std::string& path) const;
  // Adds the graphs of a saved file, which must come from a function with the
  // same graph name, the same graph-shaping options and passes, and the same
  // sinkgraph version; its params are found by name in the model's tensors.
  // Loaded graphs skip tracing and the passes: the first call whose guards
  // match (and no graph of this process's matches) takes one in, and only
  // then is it built, captured and counted against recompile_limit. Only
  // before the first call. Returns the number of graphs; throws
  // sinkgraph::Error, changing nothing, for a file that does not parse, does
  // not match, or disagrees with itself.
  std::size_t load(const std::string& path);

 private:
  struct Entry {
    TracedGraph traced;
    std::unique_ptr<ConcreteGraph> compiled;
    std::string reason;
    std::string loaded_from;  // the saved-graphs file it came from, if any
    std::int64_t calls = 0;
  };
  TracedFn fn_;
  std::shared_ptr<Backend> backend_;
  TraceOptions options_;
  mutable std::mutex mutex_;
  // The graphs this process's calls have used, traced or taken from saved_.
  std::vector<std::unique_ptr<Entry>> entries_;
  // Graphs read from saved files that no call has matched yet: checked, not
  // built, not counted against recompile_limit (Note [Saved graphs]).
  std::vector<std::unique_ptr<Entry>> saved_;
  // TraceOptions::cache_key's file; empty when off, or after it failed.
  std::string saved_path_;
  bool saved_checked_ = false;
  std::vector<std::string> log_;
  std::int64_t traces_ = 0;
  std::int64_t eager_calls_ = 0;
  bool limit_warned_ = false;

  // A call's work, launched (call() waits for it when asked).
  std::vector<Tensor> run(std::span<const Arg> args, const CallOptions& options);
  // The bodies of save() and load(), under mutex_ (saved_graphs.cpp).
  void save_locked(const std::string& path) const;
  std::size_t load_locked(const std::string& path);
  // The first graph of saved_ whose guards pass for `args`, built and moved
  // into entries_ (the caller checks recompile_limit); null when none passes.
  Entry* take_saved_graph_locked(std::span<const Arg> args);
  // TraceOptions::cache_key: finds saved graphs before the first call, and
  // keeps the file current after each trace. Problems warn once, never throw.
  void use_saved_graphs_locked();
  void update_saved_graphs_locked();
};

SG_API std::shared_ptr<CompiledFunction> compile(TracedFn fn, std::shared_ptr<Backend> backend,
                                                 TraceOptions options = {});

// A model object that lists its weights (`named_parameters()`, as PyTorch's
// modules do) compiles with each traced param guarded on the model's own
// tensor, so reassigning a weight re-traces (TraceOptions::parameters). The
// model must outlive the compiled function.
template <typename Model>
requires requires(const Model& m, std::span<const Arg> a) {
  { m.named_parameters() } -> std::convertible_to<NamedTensors>;
  { m(a) } -> std::convertible_to<std::vector<Tensor>>;
}
std::shared_ptr<CompiledFunction> compile(const Model& model, std::shared_ptr<Backend> backend,
                                          TraceOptions options = {}) {
  if (!options.parameters) options.parameters = [&model] { return model.named_parameters(); };
  return compile(TracedFn(std::cref(model)), std::move(backend), std::move(options));
}

}  // namespace sinkgraph

// compile(): trace on first call per guard set, compile, cache, run.
#include "../core/log.h"
#include "captured_graph.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

CompiledFunction::CompiledFunction(TracedFn fn, std::shared_ptr<Backend> backend,
                                   TraceOptions options)
    : fn_(std::move(fn)), backend_(std::move(backend)), options_(std::move(options)) {
  SG_CHECK(fn_ != nullptr, "compile: the function is empty");
  SG_CHECK(backend_ != nullptr, "compile: the backend is null");
  for (const auto& [name, d] : backend_->decompositions()) {
    SG_CHECK(OpRegistry::instance().find(name) != nullptr,
             "custom_decompositions: unknown operator '", name, "'");
    options_.decompositions[name] = d;
  }
}

std::vector<Tensor> CompiledFunction::call(std::span<const Arg> args, const CallOptions& options) {
  std::vector<Tensor> out = run(args, options);
  if (options.wait) current_stream().synchronize();  // outside the lock: it may raise
  return out;
}

std::vector<Tensor> CompiledFunction::run(std::span<const Arg> args, const CallOptions& options) {
  const CompilerConfig& config = backend_->config();
  if (!config.force_eager && config.mode != Mode::eager) {
    detail::check_not_capturing(options_.graph_name);  // before any lock
  }
  std::lock_guard lock(mutex_);
  use_saved_graphs_locked();
  Entry* entry = nullptr;
  std::string why;
  for (const auto& e : entries_) {
    std::string reason;
    if (e->traced.guards.check(args, &reason)) {
      entry = e.get();
      break;
    }
    why = reason;
  }
  if (entry == nullptr) {
    if (static_cast<std::int64_t>(entries_.size()) >= backend_->config().recompile_limit) {
      ++eager_calls_;
      if (!limit_warned_) {
        limit_warned_ = true;
        const std::string msg =
            "recompile limit (" + std::to_string(backend_->config().recompile_limit) +
            ") reached: " + why + "; running this call and later unmatched calls eagerly";
        log_.push_back(msg);
        detail::warn(msg);
      }
      return fn_(args);
    }
    entry = take_saved_graph_locked(args);
  }
  if (entry == nullptr) {
    auto e = std::make_unique<Entry>();
    e->reason =
        entries_.empty() ? "first call" : "guards of every earlier graph failed (" + why + ")";
    e->traced = trace(fn_, args, options_);
    ++traces_;
    e->compiled = backend_->compile(e->traced);
    log_.push_back("graph " + std::to_string(entries_.size()) + " traced: " + e->reason);
    detail::info("function @" + options_.graph_name + ": " + log_.back());
    entry = e.get();
    entries_.push_back(std::move(e));
    update_saved_graphs_locked();
  }
  ++entry->calls;
  const std::vector<ir::RtValue> inputs = entry->traced.graph_inputs(args);
  std::vector<ir::RtValue> outputs = entry->compiled->run(inputs, options);
  std::vector<Tensor> result;
  result.reserve(outputs.size());
  for (auto& o : outputs) result.push_back(std::get<Tensor>(std::move(o)));
  return result;
}

GraphCounters& GraphCounters::operator+=(const GraphCounters& o) {
  captured += o.captured;
  replayed += o.replayed;
  recapture_due_to_mutated_input_change += o.recapture_due_to_mutated_input_change;
  recapture_due_to_parameter_change += o.recapture_due_to_parameter_change;
  recapture_due_to_force_recapture += o.recapture_due_to_force_recapture;
  eager_fallback_due_to_capture_limit += o.eager_fallback_due_to_capture_limit;
  pool_reserved_bytes += o.pool_reserved_bytes;
  planned_arena_bytes += o.planned_arena_bytes;
  liveness_lower_bound_bytes += o.liveness_lower_bound_bytes;
  codegen_kernels += o.codegen_kernels;
  compile_cache_hits += o.compile_cache_hits;
  return *this;
}

GraphCounters CompiledFunction::counters() const {
  std::lock_guard lock(mutex_);
  GraphCounters total;
  for (const auto& e : entries_) total += e->compiled->counters();
  return total;
}

void CompiledFunction::reset() {
  std::lock_guard lock(mutex_);
  for (const auto& e : entries_) e->compiled->reset();
}

std::string CompiledFunction::explain(bool with_device_graphs) const {
  std::lock_guard lock(mutex_);
  const CompilerConfig& config = backend_->config();
  std::string out = std::string("compiled function: mode ") + mode_name(config.mode) +
                    (config.force_eager ? " (force_eager)" : "") + ", " +
                    std::to_string(entries_.size()) + " graph(s), " + std::to_string(traces_) +
                    " trace(s), recompile limit " + std::to_string(config.recompile_limit) + "\n";
  const std::vector<std::string> pipeline = GraphCompiler(config).pipeline();
  out += "  passes:";
  for (const auto& p : pipeline) out += " " + p;
  out += pipeline.empty() ? " (none)\n" : "\n";
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = *entries_[i];
    out +=
        "graph " + std::to_string(i) + ": " +
        (e.loaded_from.empty() ? "traced because: " + e.reason
                               : "loaded from " + e.loaded_from +
                                     " (traced by an earlier process because: " + e.reason + ")") +
        "\n";
    out += "  guards: " + e.traced.guards.str() + "\n";
    const auto& ins = e.traced.graph->inputs();
    const auto params = std::count_if(
        ins.begin(), ins.end(), [](const ir::Value* v) { return v->kind == ir::InputKind::param; });
    out += "  inputs: " + std::to_string(ins.size()) + " (" + std::to_string(params) +
           " params), nodes: " + std::to_string(e.compiled->graph().nodes().size()) +
           ", calls: " + std::to_string(e.calls) + "\n";
    out += "  " + e.compiled->explain();
    if (with_device_graphs) out += e.compiled->device_graph_text();
  }
  if (!saved_.empty()) {
    out += "saved graphs no call has matched yet: " + std::to_string(saved_.size()) + "\n";
  }
  if (eager_calls_ > 0) {
    out += "eager calls past the recompile limit: " + std::to_string(eager_calls_) + "\n";
  }
  for (const auto& line : log_) out += "log: " + line + "\n";
  return out;
}

std::size_t CompiledFunction::num_graphs() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::int64_t CompiledFunction::num_traces() const {
  std::lock_guard lock(mutex_);
  return traces_;
}

std::int64_t CompiledFunction::eager_calls() const {
  std::lock_guard lock(mutex_);
  return eager_calls_;
}

const ir::Graph& CompiledFunction::graph(std::size_t i) const {
  std::lock_guard lock(mutex_);
  SG_CHECK(i < entries_.size(), "graph(", i, "): only ", entries_.size(), " graphs");
  return entries_[i]->compiled->graph();
}

std::shared_ptr<CompiledFunction> compile(TracedFn fn, std::shared_ptr<Backend> backend,
                                          TraceOptions options) {
  return std::make_shared<CompiledFunction>(std::move(fn), std::move(backend), std::move(options));
}

}  // namespace sinkgraph

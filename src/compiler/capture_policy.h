#pragma once
// CapturePolicy: the bookkeeping of one CapturedGraph that decides nothing
// about memory or kernels: TorchAir's counters, the capture limit, the
// re-capture warning, and the decision log the explain report prints.
#include <cstdint>
#include <string>
#include <vector>

#include "graph_signature.h"
#include "sinkgraph/compiler.h"

namespace sinkgraph::detail {

class CapturePolicy {
 public:
  // Note [Re-capture warning]: re-captures (a moved param or mutated input,
  // force_recapture) cost a whole capture each. Like CUDA graph trees'
  // "re-recording" warning, one function that re-captures this many times
  // warns once, naming the last cause: usually a KV cache or weight that is
  // re-allocated every call.
  static constexpr std::int64_t kRecaptureWarning = 8;

  CapturePolicy(std::string graph_name, std::int64_t capture_limit)
      : graph_name_(std::move(graph_name)), capture_limit_(capture_limit) {}

  void note_call() { ++calls_; }
  [[nodiscard]] std::int64_t calls() const { return calls_; }
  [[nodiscard]] bool eager_forever() const { return eager_forever_; }

  // A new key is about to be captured: true when the limit allows it.
  // Otherwise the graph falls back to eager for good and warns once.
  bool admit_new_key(const std::string& why);
  // Counts a capture of a key for `change` (or a force_recapture of a known key).
  void on_capture(KeyChange change, bool forced, const std::string& what);
  void on_replay() { ++counters_.replayed; }
  void on_eager_fallback_call() { ++counters_.eager_fallback_due_to_capture_limit; }
  // reset(): captured keys no longer count toward the limit, and a graph that
  // fell back to eager may capture again.
  void on_reset();
  // Records a decision for the explain report and logs it at info
  // (SINKGRAPH_LOG=info shows captures, re-captures and fallbacks as they happen).
  void log(const std::string& line);

  [[nodiscard]] const GraphCounters& counters() const { return counters_; }
  [[nodiscard]] std::int64_t distinct_keys() const { return distinct_keys_; }
  [[nodiscard]] std::int64_t capture_limit() const { return capture_limit_; }
  // The counters line and every logged decision, indented for explain().
  [[nodiscard]] std::string explain() const;

 private:
  std::string graph_name_;
  std::int64_t capture_limit_;
  GraphCounters counters_;
  std::int64_t calls_ = 0;
  std::int64_t distinct_keys_ = 0;  // keys captured since construction or reset()
  bool eager_forever_ = false;
  bool recapture_warned_ = false;
  std::vector<std::string> log_;
};

}  // namespace sinkgraph::detail

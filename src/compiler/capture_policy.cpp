#include "capture_policy.h"

#include "../core/log.h"

namespace sinkgraph::detail {

bool CapturePolicy::admit_new_key(const std::string& why) {
  if (distinct_keys_ < capture_limit_) return true;
  const std::string msg = "graph @" + graph_name_ + ": capture_limit (" +
                          std::to_string(capture_limit_) + ") reached at " + why +
                          "; freeing its captured graphs and running it eagerly from now on "
                          "(reset() lets it capture again)";
  warn(msg);
  log("fallback: " + msg);
  eager_forever_ = true;
  return false;
}

void CapturePolicy::on_capture(KeyChange change, bool forced, const std::string& what) {
  ++counters_.captured;
  if (forced) {
    ++counters_.recapture_due_to_force_recapture;
  } else {
    ++distinct_keys_;
    if (change == KeyChange::param_moved) ++counters_.recapture_due_to_parameter_change;
    if (change == KeyChange::mutated_moved) ++counters_.recapture_due_to_mutated_input_change;
  }
  const std::int64_t recaptures = counters_.recapture_due_to_force_recapture +
                                  counters_.recapture_due_to_parameter_change +
                                  counters_.recapture_due_to_mutated_input_change;
  if (!recapture_warned_ && recaptures >= kRecaptureWarning) {
    recapture_warned_ = true;
    warn("graph @" + graph_name_ + " has re-captured " + std::to_string(recaptures) +
         " times (last: " + what +
         "); each re-capture costs a whole capture. Keep mutated inputs (KV caches) and params "
         "at stable addresses, or set frozen_parameter if params never change");
  }
}

void CapturePolicy::log(const std::string& line) {
  log_.push_back("call " + std::to_string(calls_) + ": " + line);
  info("graph @" + graph_name_ + ": " + log_.back());
}

void CapturePolicy::on_reset() {
  distinct_keys_ = 0;
  eager_forever_ = false;
}

std::string CapturePolicy::explain() const {
  std::string out = "  counters: captured " + std::to_string(counters_.captured) + ", replayed " +
                    std::to_string(counters_.replayed) +
                    ", recapture_due_to_mutated_input_change " +
                    std::to_string(counters_.recapture_due_to_mutated_input_change) +
                    ", recapture_due_to_parameter_change " +
                    std::to_string(counters_.recapture_due_to_parameter_change) +
                    ", recapture_due_to_force_recapture " +
                    std::to_string(counters_.recapture_due_to_force_recapture) +
                    ", eager_fallback_due_to_capture_limit " +
                    std::to_string(counters_.eager_fallback_due_to_capture_limit) + "\n";
  for (const auto& line : log_) out += "  " + line + "\n";
  return out;
}

}  // namespace sinkgraph::detail

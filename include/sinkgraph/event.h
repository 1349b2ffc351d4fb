#pragma once
// Events: record on one stream, wait on another, query, synchronize, elapsed time.
#include <atomic>
#include <cstdint>
#include <memory>

#include "sinkgraph/export.h"

namespace sinkgraph {

class Stream;

// The shared state a stream's record marker completes. Generation numbers make
// re-recording safe: a wait targets the generation recorded before it.
struct EventState {
  std::atomic<std::uint64_t> recorded{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::int64_t> timestamp_ns{0};
};

// A point in one stream's work: reached once `state->completed` >= `generation`
// (an Event's record marker, or a replay's completion). Graph replays wait for
// fences before they overwrite memory that other work may still read (Note
// [Output uses] in allocator.h).
struct SG_API ReplayFence {
  std::uint64_t stream_id = 0;  // the stream the marker was recorded on (0: none)
  std::shared_ptr<EventState> state;
  std::uint64_t generation = 0;
  [[nodiscard]] bool reached() const {
    return state == nullptr || state->completed.load(std::memory_order_acquire) >= generation;
  }
  // Blocks the host until reached (spin briefly, then futex-wait).
  void wait() const;
};

// Marks `state` completed up to `generation` (never moving it backwards) and
// wakes its waiters.
SG_API void complete_fence(EventState& state, std::uint64_t generation);

class SG_API Event {
 public:
  Event();
  void record(Stream& stream);
  // True when the last record has completed (or the event was never recorded).
  [[nodiscard]] bool query() const;
  // Blocks the host until the last record has completed.
  void synchronize() const;
  // Milliseconds between this event's completion and `end`'s; both must have completed.
  [[nodiscard]] double elapsed_ms(const Event& end) const;
  [[nodiscard]] const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

}  // namespace sinkgraph

#pragma once
// Note [Collective watchdog]
// A blocking MPI collective waits for every rank of its group. A rank that
// dies is seen by mpirun, which ends the job; a rank that hangs (stopped, in
// an endless loop, stuck on a full disk) is not, and the others would wait in
// their collective for ever. So every MPI call that waits for other ranks runs
// inside a Watchdog::Scope: the scope stamps its slot with the time it began
// (two relaxed atomic stores, next to a collective's microseconds), and one
// thread per process wakes a few times per timeout and calls `on_expire` for
// a slot busy for longer than the timeout. The MPI layer's `on_expire` logs
// which call waited and ends the job with MPI_Abort, so the wait is bounded
// on every rank: the hung rank is ended by mpirun with the rest. A watchdog
// that itself wakes a whole interval late (its process was stopped or
// starved) counts waits from when it runs again, so a stopped rank that is
// resumed does not report the others as hung.
//
// The timeout is SINKGRAPH_DIST_TIMEOUT (seconds; default 600, PyTorch's
// default for its NCCL process groups; 0 turns the watchdog off). It bounds
// one call, not a run: the legitimate waits it must allow are one rank
// reaching a collective later than another (loading its shard, compiling
// max-autotune's code on a cold cache), so keep it above the longest of those.
//
// Slots: one per process group (a group's collectives run on one stream, one
// at a time: Note [Collectives]) and one for the host thread's own waits
// (creating a group, barriers, MPI_Finalize). Two overlapping scopes on one
// slot would let the first go unwatched once the second ends; they never
// overlap under those rules.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

namespace sinkgraph::dist {

class Watchdog {
 public:
  static constexpr int kSlots = 65;  // 64 groups and the host thread's slot
  static constexpr int kHostSlot = kSlots - 1;

  // Called once, on the watchdog's thread, for the first wait found longer
  // than the timeout: what the scope named, its slot, and how long it had
  // waited. After it returns the watchdog stops watching.
  using OnExpire =
      std::function<void(std::string_view what, int slot, std::chrono::duration<double> waited)>;

  Watchdog(std::chrono::duration<double> timeout, OnExpire on_expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Marks `slot` busy in `what` (a string literal: it is read on the
  // watchdog's thread) until the scope ends.
  class Scope {
   public:
    Scope(Watchdog* dog, int slot, const char* what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* dog_;
    int slot_;
  };

 private:
  void run(std::int64_t created_ns);  // steady-clock ns at construction

  std::chrono::duration<double> timeout_;
  OnExpire on_expire_;
  // Steady-clock nanoseconds at which each slot's wait began; 0 when idle.
  std::array<std::atomic<std::int64_t>, kSlots> since_{};
  std::array<std::atomic<const char*>, kSlots> what_{};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// SINKGRAPH_DIST_TIMEOUT as read from `text` (nullptr or empty: unset, 600
// s): seconds, a decimal number from 0 to 1e6; nullopt for 0 (no watchdog).
// Throws sinkgraph::Error naming the variable for anything else.
std::optional<std::chrono::duration<double>> parse_dist_timeout(const char* text);

}  // namespace sinkgraph::dist

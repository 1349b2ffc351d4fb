#pragma once
// How the runtime's threads wait for each other: spin, offering the core,
// then park (Note [Spin, yield, park]).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "sinkgraph/device.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::runtime {

// Note [Spin, yield, park]
// Every wait in the runtime (a stream's worker for work, a host thread in
// synchronize() or reading a replay's output, a replay for the previous one or
// for a node on another stream, a compute helper for its part) is the same
// three steps:
//  1. spin with the CPU's pause hint, so a short wait costs no system call;
//  2. every 64 spins, offer the core (sched_yield) and check a deadline: on an
//     idle machine the yield returns at once, but when threads outnumber cores
//     a pure spin holds the core the awaited thread needs for a whole
//     scheduler slice (CUDA's "spin, then yield");
//  3. past the deadline, park on the atomic (a futex wait) until it changes.
// A waiter that pure-spins without step 2 takes a core from the compute
// threads: measured in issue 33 (bench_compiled_call, 2 threads, 2 cores), a
// replay's host read spun 4096 pauses without yielding, its kernels ran 1.6x
// slower and the whole call took about twice eager's time.
// Waking is the other half. std::atomic<uint64_t>::notify_all() is a futex
// system call whether or not anyone is parked (libstdc++ keeps no waiter
// count for 8-byte atomics), and a replay advances several such counters: a
// one-kernel replay spent more time in futex_wake than in its kernel. So a
// waiter registers in g_parked_waiters before it parks, the advancing thread
// stores with seq_cst (advance()) and notifies only when someone is
// registered, and the two seq_cst accesses on each side guarantee that either
// the waiter sees the new value or the advancing thread sees the waiter.
// A waiter that is not a compute thread (the host reading a replay's output,
// a replay waiting for another stream) takes a core from the compute threads
// while it spins, when they fill every core: there it spins only 50 us, and
// only while a compute helper is awake (running a part or spinning for the
// next), counted in g_awake_helpers. With no helper awake, nobody needs the
// core: a model too small to split any kernel, decoding at 20,000 tokens/s,
// ran 5-7% slower on 2 compute threads than on 1 when the cap applied
// regardless, because every step's host read outlasted 50 us and parked.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline void spin_yield() { std::this_thread::yield(); }

// Compute helpers of the process not parked: running a part or spinning for
// the next one (Note [Compute threads]).
inline std::atomic<int> g_awake_helpers{0};

// How long a waiter spins before it parks: at most `ns`, and at most
// `ns_beside_helpers` while a compute helper is awake.
struct SpinLimit {
  std::int64_t ns;
  std::int64_t ns_beside_helpers;
};

// A spin of `ns` whatever the helpers do: for the compute threads themselves.
constexpr SpinLimit spin_for(std::int64_t ns) { return {ns, ns}; }

// The spin of a thread that is not a compute thread (the host, or a replay
// waiting for another stream): `spin_ns`, cut short beside awake helpers when
// the compute threads fill every core, because its spin takes a core from them.
inline SpinLimit waiter_spin(std::int64_t spin_ns) {
  constexpr std::int64_t kShortSpinNs = 50'000;
  if (sinkgraph::num_threads() < available_cores()) return spin_for(spin_ns);
  return {spin_ns, std::min(spin_ns, kShortSpinNs)};
}

// Spins until pred() holds or the limit passes, offering the core every 64
// spins. True when pred() held; the caller parks otherwise.
template <typename Pred>
bool spin_until(SpinLimit limit, Pred&& pred) {
  if (limit.ns <= 0) return pred();
  const std::int64_t start = now_ns();
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      const std::int64_t spun = now_ns() - start;
      if (spun >= limit.ns ||
          (spun >= limit.ns_beside_helpers && g_awake_helpers.load(std::memory_order_relaxed) > 0))
        return pred();
      spin_yield();
    }
  }
}

// The spin time of a stream created with default StreamOptions.
inline constexpr std::int64_t kDefaultSpinNs = kDefaultSpinUs * 1000;

// Threads parked in wait_at_least(), in the whole process, for the counters
// that keep no waiter count of their own (a stream's completion count does).
inline std::atomic<int> g_parked_waiters{0};

// Advances a counter that wait_at_least() may be parked on, registering its
// waiters in `parked`.
inline void advance(std::atomic<std::uint64_t>& value, std::uint64_t to,
                    std::atomic<int>& parked = g_parked_waiters) {
  value.store(to, std::memory_order_seq_cst);
  if (parked.load(std::memory_order_seq_cst) > 0) value.notify_all();
}

// Wakes the waiters of a counter advanced by other means (a compare-exchange)
// with a seq_cst read-modify-write.
inline void wake(std::atomic<std::uint64_t>& value) {
  if (g_parked_waiters.load(std::memory_order_seq_cst) > 0) value.notify_all();
}

// Waits until value >= target: spin and yield within `spin`, then park,
// registered in `parked`. The counter must be advanced through advance() (or
// wake()) with the same `parked`.
inline void wait_at_least(const std::atomic<std::uint64_t>& value, std::uint64_t target,
                          SpinLimit spin, std::atomic<int>& parked = g_parked_waiters) {
  if (spin_until(spin, [&] { return value.load(std::memory_order_acquire) >= target; })) return;
  parked.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint64_t now = value.load(std::memory_order_seq_cst);
    if (now >= target) break;
    value.wait(now, std::memory_order_seq_cst);
  }
  parked.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace sinkgraph::runtime

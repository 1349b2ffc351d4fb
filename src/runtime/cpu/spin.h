#pragma once
// How the CPU runtime's threads wait for each other before they park
// (Note [CPU stream worker], Note [Compute threads]).
#include <cstdint>
#include <thread>

#include "sinkgraph/stream.h"

namespace sinkgraph::cpu_device {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Every 64 spins a spinning thread offers its core: on an idle machine the
// call returns at once (no other thread is runnable), but when the cores are
// oversubscribed a pure spin would hold the core the thread it waits for
// needs, for a whole scheduler time slice (CUDA's "spin, then yield").
inline void spin_yield() { std::this_thread::yield(); }

// Spins until pred() holds or `spin_ns` pass, offering the core every 64
// spins. True when pred() held; the caller parks otherwise.
template <typename Pred>
bool spin_until(std::int64_t spin_ns, Pred&& pred) {
  if (spin_ns <= 0) return pred();
  const std::int64_t deadline = now_ns() + spin_ns;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      if (now_ns() >= deadline) return pred();
      spin_yield();
    }
  }
}

}  // namespace sinkgraph::cpu_device

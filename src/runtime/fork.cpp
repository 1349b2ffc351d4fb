#include "runtime/fork.h"

#include <mutex>
#include <pthread.h>
#include <utility>

#include "runtime/spin.h"

namespace sinkgraph::runtime {

namespace {

// Runs in the child, its only thread: no helper is awake there, whatever the
// parent's counters said (Note [Spin, yield, park]).
void in_child() {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  g_awake_helpers.store(0, std::memory_order_relaxed);
  g_parked_waiters.store(0, std::memory_order_relaxed);
}

}  // namespace

void abandon(std::thread& thread) {
  // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): never freed, by design
  [[maybe_unused]] auto* kept = new std::thread(std::move(thread));
}

std::uint64_t fork_generation_watched() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, in_child); });
  return fork_generation();
}

}  // namespace sinkgraph::runtime

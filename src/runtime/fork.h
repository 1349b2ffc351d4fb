#pragma once
// The runtime's threads across fork() (Note [Threads after fork]).
#include <atomic>
#include <cstdint>
#include <thread>

namespace sinkgraph::runtime {

// Note [Threads after fork]
// fork() copies only the thread that calls it: a stream's worker and the
// compute pool's helpers started before it do not exist in the child, and
// work handed to them there would wait forever (a server that loads and warms
// a model, then forks its workers, hung on the first call). Each owner of
// threads notes the fork generation when it starts them; a pthread_atfork
// handler moves the generation on in every child. On its next use in the
// child the owner finds the generation moved and adopts the process: it lets
// go of the parent's thread handles (abandon()) and starts its threads
// again. A stream with work queued or running at the moment of the fork
// cannot be resumed (the work ran in the parent, half of it perhaps); it
// refuses every use with an error that says so. The copied locks are those
// of an idle runtime when the parent forked between calls, the case this
// serves; a fork while another thread is inside a launch is not.

// Lets go of the handle of a thread that is not in this process: neither
// joined (nothing would end it) nor detached (the C library reclaimed its
// stack in the child, and pthread_detach would free it again). The handle is
// moved into storage that is never freed: a few bytes per thread and fork.
void abandon(std::thread& thread);

// The current generation: 0 in a process never forked since the handler was
// registered. The first call registers the handler.
std::uint64_t fork_generation_watched();

inline std::atomic<std::uint64_t> g_fork_generation{0};

// The current generation, for the fast path (one relaxed load).
inline std::uint64_t fork_generation() { return g_fork_generation.load(std::memory_order_relaxed); }

}  // namespace sinkgraph::runtime

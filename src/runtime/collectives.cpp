#include "sinkgraph/collectives.h"

#include <atomic>

namespace sinkgraph {
namespace {
std::atomic<CollectiveBackend*> g_backend{nullptr};
}  // namespace

void set_collective_backend(CollectiveBackend* backend) {
  g_backend.store(backend, std::memory_order_release);
}

CollectiveBackend* collective_backend() { return g_backend.load(std::memory_order_acquire); }

}  // namespace sinkgraph

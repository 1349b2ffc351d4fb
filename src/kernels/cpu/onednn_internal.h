#pragma once
// What the oneDNN kernels (onednn_conv.cpp, onednn_matmul.cpp) share. Only
// files built with SINKGRAPH_ONEDNN include it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

// OpenMP's two calls we make, declared here rather than through <omp.h>: the
// header is the compiler's own (GCC's here), and clang-tidy, with clang's
// headers, has none. The functions are libgomp's, which libdnnl links.
extern "C" void omp_set_num_threads(int threads);
extern "C" int omp_get_max_threads();

namespace sinkgraph::kernels::cpu::onednn {

// Note [One OpenMP thread, then the caller's again]
// oneDNN sizes a primitive's work split by the calling thread's OpenMP team,
// and our blocks are ours to spread, so each runs with a team of one. The
// team size is a per-thread setting of the one libgomp in the process, which
// torch uses too: a replay runs on the caller's thread (Note [Replays on the
// caller]), and left at one it made every torch operator after it
// single-threaded and failed Dynamo's global-state guard (torch's thread
// count), recompiling every compiled frame on its next call. The previous
// value is put back when the scope ends.
class OneOmpThread {
 public:
  OneOmpThread() : previous_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(previous_); }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;
  OneOmpThread(OneOmpThread&&) = delete;
  OneOmpThread& operator=(OneOmpThread&&) = delete;

 private:
  int previous_;
};

// The process's one CPU engine.
dnnl::engine& engine();

// FNV-1a over a key made of 64-bit fields (compared bytewise, so a key is
// zeroed or fully assigned before use: padding compares equal).
template <typename Key>
struct KeyHash {
  std::size_t operator()(const Key& key) const {
    static_assert(sizeof(Key) % sizeof(std::uint64_t) == 0);
    const auto* p = reinterpret_cast<const std::uint64_t*>(&key);
    std::uint64_t h = 1469598103934665603ULL;
    for (std::size_t i = 0; i < sizeof(Key) / sizeof(std::uint64_t); ++i)
      h = (h ^ p[i]) * 1099511628211ULL;
    return static_cast<std::size_t>(h);
  }
};

// The process-wide plan cache of one kind of problem (one per Key type).
// Bounded: past kMaxPlans distinct problems it starts over (plans in use
// stay alive through their shared_ptr). A null plan means oneDNN has no
// implementation for the problem (a zero stride, say), remembered so that
// our own path runs it without asking again. Plans are made outside the
// lock (oneDNN's JIT takes milliseconds); two threads racing on one new key
// both build it and the first insert wins.
inline constexpr std::size_t kMaxPlans = 512;

template <typename Key, typename Plan>
std::shared_ptr<const Plan> cached_plan(const Key& key,
                                        std::shared_ptr<const Plan> (*make)(const Key&)) {
  static std::mutex mutex;
  static std::unordered_map<Key, std::shared_ptr<const Plan>, KeyHash<Key>> plans;
  {
    const std::lock_guard lock(mutex);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
  }
  std::shared_ptr<const Plan> plan;
  try {
    plan = make(key);
  } catch (const dnnl::error&) {
    plan = nullptr;
  }
  const std::lock_guard lock(mutex);
  if (plans.size() >= kMaxPlans) plans.clear();
  return plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace sinkgraph::kernels::cpu::onednn

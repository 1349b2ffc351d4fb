// Memory planning (Note [Memory planning] in passes.h): byte offsets for every
// fresh intermediate in one arena, from concrete sizes and live ranges.
//
// Cost: a linear walk for live ranges, then best fit, which compares each
// buffer with those placed before it: quadratic, so it runs in four orders
// (and 64 seeded shuffles up to 256 buffers) only up to kMaxQuadraticBuffers.
// Past that one first-born order runs with an active set (Note [Large
// plans]): O(buffers log buffers + buffers * live buffers).
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "passes_internal.h"

namespace sinkgraph::passes {

namespace {

std::int64_t aligned_bytes(const ir::Value& v, const SymBindings& bindings) {
  std::int64_t n = 1;
  for (const SymInt& d : v.meta.shape) n *= d.eval(bindings);
  const std::int64_t bytes = n * static_cast<std::int64_t>(dtype_size(v.meta.dtype));
  constexpr std::int64_t a = MemoryPlan::kPlanAlignment;
  return (bytes + a - 1) / a * a;
}

// The offset of the smallest gap of at least `bytes` between the buffers of
// `overlapping` (sorted here by offset), else the end of the highest one.
std::int64_t smallest_gap(std::int64_t bytes, std::vector<const MemoryPlan::Buffer*>& overlapping) {
  std::sort(overlapping.begin(), overlapping.end(),
            [](const auto* x, const auto* y) { return x->offset < y->offset; });
  std::int64_t cursor = 0;
  std::int64_t best = -1;
  std::int64_t best_gap = std::numeric_limits<std::int64_t>::max();
  for (const MemoryPlan::Buffer* p : overlapping) {
    const std::int64_t gap = p->offset - cursor;
    if (gap >= bytes && gap < best_gap) {
      best = cursor;
      best_gap = gap;
    }
    cursor = std::max(cursor, p->offset + p->bytes);
  }
  return best >= 0 ? best : cursor;
}

// Best fit in a given order: each buffer goes into the smallest gap that
// holds it among the buffers already placed whose live ranges overlap its
// own, else above them all. Returns the arena size; writes the offsets.
std::int64_t best_fit(std::vector<MemoryPlan::Buffer>& buffers,
                      const std::vector<std::size_t>& order) {
  std::int64_t arena = 0;
  std::vector<const MemoryPlan::Buffer*> placed;
  std::vector<const MemoryPlan::Buffer*> overlapping;
  for (const std::size_t i : order) {
    MemoryPlan::Buffer& b = buffers[i];
    overlapping.clear();
    for (const MemoryPlan::Buffer* p : placed) {
      if (p->first <= b.last && b.first <= p->last && p->bytes > 0) overlapping.push_back(p);
    }
    b.offset = smallest_gap(b.bytes, overlapping);
    arena = std::max(arena, b.offset + b.bytes);
    placed.push_back(&b);
  }
  return arena;
}

// Note [Large plans]
// In first-born order every buffer placed before b starts no later than b, so
// it overlaps b exactly when it is still live at b's start. Keeping the placed
// buffers that are still live (dropping the expired ones as it goes) makes best fit
// linear in the live set instead of in all placed buffers: a 100,000-node
// chain plans in milliseconds, not hours.
std::int64_t best_fit_first_born(std::vector<MemoryPlan::Buffer>& buffers) {
  std::vector<std::size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = buffers[a];
    const auto& y = buffers[b];
    return x.first != y.first ? x.first < y.first : x.bytes > y.bytes;
  });
  std::int64_t arena = 0;
  std::vector<const MemoryPlan::Buffer*> live;  // placed, live at the current start
  std::vector<const MemoryPlan::Buffer*> overlapping;
  for (const std::size_t i : order) {
    MemoryPlan::Buffer& b = buffers[i];
    std::erase_if(live, [&](const MemoryPlan::Buffer* p) { return p->last < b.first; });
    overlapping.clear();
    for (const MemoryPlan::Buffer* p : live) {
      if (p->bytes > 0) overlapping.push_back(p);
    }
    b.offset = smallest_gap(b.bytes, overlapping);
    arena = std::max(arena, b.offset + b.bytes);
    live.push_back(&b);
  }
  return arena;
}

// Offset assignment is NP-hard in general (dynamic storage allocation), so
// try the usual greedy orders and keep the smallest arena: largest first,
// first-born first (the interval-graph order), longest-lived first and
// last-dying first; then, for graphs of up to kMaxShuffledBuffers buffers,
// kShuffles seeded random orders (each best fit is quadratic in buffers, so
// at most 64 * 256^2 = 4M overlap checks at capture). On stories260K's
// decoder the four orders reach 2,944 B and the second shuffle the liveness
// bound, 2,624 B. The search stops as soon as an arena meets that bound: no
// arena can be smaller.
constexpr std::size_t kMaxShuffledBuffers = 256;
constexpr int kShuffles = 64;
constexpr std::size_t kMaxQuadraticBuffers = 4096;

void assign_offsets(MemoryPlan& plan) {
  if (plan.buffers.size() > kMaxQuadraticBuffers) {
    plan.arena_bytes = best_fit_first_born(plan.buffers);
    return;
  }
  const auto& bufs = plan.buffers;
  std::vector<std::size_t> base(bufs.size());
  std::iota(base.begin(), base.end(), std::size_t{0});
  using Less = bool (*)(const MemoryPlan::Buffer&, const MemoryPlan::Buffer&);
  const Less orders[] = {
      [](const MemoryPlan::Buffer& a, const MemoryPlan::Buffer& b) { return a.bytes > b.bytes; },
      [](const MemoryPlan::Buffer& a, const MemoryPlan::Buffer& b) {
        return a.first != b.first ? a.first < b.first : a.bytes > b.bytes;
      },
      [](const MemoryPlan::Buffer& a, const MemoryPlan::Buffer& b) {
        return a.last - a.first > b.last - b.first;
      },
      [](const MemoryPlan::Buffer& a, const MemoryPlan::Buffer& b) {
        return a.last != b.last ? a.last > b.last : a.bytes > b.bytes;
      },
  };
  std::vector<MemoryPlan::Buffer> best;
  plan.arena_bytes = std::numeric_limits<std::int64_t>::max();
  const auto attempt = [&](const std::vector<std::size_t>& order) {
    std::vector<MemoryPlan::Buffer> trial = bufs;
    const std::int64_t arena = best_fit(trial, order);
    if (arena < plan.arena_bytes) {
      plan.arena_bytes = arena;
      best = std::move(trial);
    }
    return arena <= plan.lower_bound_bytes;
  };
  bool optimal = false;
  for (const Less less : orders) {
    std::vector<std::size_t> order = base;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return less(bufs[a], bufs[b]); });
    if ((optimal = attempt(order))) break;
  }
  if (!optimal && bufs.size() <= kMaxShuffledBuffers) {
    std::mt19937 rng(0x5eed);  // fixed: a plan must not change from run to run
    std::vector<std::size_t> order = base;
    for (int s = 0; s < kShuffles && !optimal; ++s) {
      std::shuffle(order.begin(), order.end(), rng);
      optimal = attempt(order);
    }
  }
  if (bufs.empty()) plan.arena_bytes = 0;
  if (!best.empty()) plan.buffers = std::move(best);
}

}  // namespace

MemoryPlan plan_memory(const ir::Graph& graph, const SymBindings& bindings, bool assign) {
  MemoryPlan plan;
  // Operands of a placed cat live in the cat's memory (Note [Cat removal]).
  std::unordered_map<const ir::Node*, const ir::Node*> into_cat;
  for (const auto& node : graph.nodes()) {
    if (!node->placed) continue;
    for (const ir::Value* o : node->operands) into_cat[o->producer] = node.get();
  }
  // The buffer each value's memory belongs to (absent: a graph input's).
  std::unordered_map<const ir::Value*, std::size_t> buffer_of;
  auto buffer_for = [&](const ir::Node* owner, std::size_t at) {
    const auto [it, fresh] = plan.by_node.try_emplace(owner, plan.buffers.size());
    if (fresh) {
      MemoryPlan::Buffer b;
      b.node = owner;
      b.bytes = aligned_bytes(*owner->result(), bindings);
      b.first = at;
      b.last = at;
      plan.buffers.push_back(b);
    }
    return it->second;
  };
  std::size_t i = 0;
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* o : node->operands) {
      const auto it = buffer_of.find(o);
      if (it != buffer_of.end()) plan.buffers[it->second].last = i;
    }
    const int a = node->aliased_operand();
    if (a >= 0) {
      const auto it = buffer_of.find(node->operands[static_cast<std::size_t>(a)]);
      if (it != buffer_of.end()) buffer_of[node->result()] = it->second;
    } else {
      const auto cat = into_cat.find(node.get());
      const ir::Node* owner = cat != into_cat.end() ? cat->second : node.get();
      const std::size_t b = buffer_for(owner, i);
      plan.buffers[b].last = std::max(plan.buffers[b].last, i);
      buffer_of[node->result()] = b;
    }
    ++i;
  }
  const std::size_t end = i;
  for (const ir::Value* o : graph.outputs) {
    const auto it = buffer_of.find(o);
    if (it != buffer_of.end()) plan.buffers[it->second].last = end;
  }

  // The liveness bound: most bytes live at one program point.
  std::vector<std::int64_t> delta(end + 2, 0);
  for (const MemoryPlan::Buffer& b : plan.buffers) {
    delta[b.first] += b.bytes;
    delta[b.last + 1] -= b.bytes;
  }
  std::int64_t live = 0;
  for (const std::int64_t d : delta) {
    live += d;
    plan.lower_bound_bytes = std::max(plan.lower_bound_bytes, live);
  }
  if (assign) assign_offsets(plan);
  return plan;
}

}  // namespace sinkgraph::passes

#pragma once
// Generated regions (Note [Generated regions] in region.cpp): while a graph
// key is captured, consecutive IR nodes whose operators have emitters are
// collected, written out as one C++ function, compiled (through the compile
// cache) and launched as ONE kernel node of the captured device graph.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "compile_cache.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/symint.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::codegen {

// What a launched region needs for as long as its device graph lives.
struct RegionCall {
  RegionFn fn = nullptr;
  std::vector<void*> ptrs;  // each bound tensor's first element
  std::string name;         // "generated region k of graph @g" (error messages)
};

// An updatable scalar of a node in a region: the runtime slot its expression
// reads, for the capture to register as a replay update.
struct RegionUpdate {
  std::size_t device_node = 0;  // the region's kernel in the device graph
  int scalar_slot = 0;          // ArgBlock slot
  SymInt expr;
};

struct RegionStats {
  std::int64_t kernels = 0;        // regions launched as generated code
  std::int64_t nodes = 0;          // IR nodes they replaced
  std::int64_t cache_hits = 0;     // of their compilations
  std::vector<std::string> notes;  // fallbacks, for the explain report
};

// One capture's region builder. Not thread-safe (a capture runs on one thread).
class RegionBuilder {
 public:
  // Registers the emitters on first use (so OpDef::emit is set from here on).
  RegionBuilder(std::string graph_name, std::string cache_dir);

  // Emits the node into the open region when it can: `out` is the node's
  // output (already allocated, or the mutated input), `updatable[i]` the
  // expression of scalar i when it is updatable (else null). Returns false
  // when the node cannot be generated: the caller flushes, then runs it.
  // `tag` names the node (the capture passes its IR node) in generated() and
  // fallback_node().
  bool add(const OpDef& op, std::span<const Tensor* const> inputs, const Tensor& out,
           std::span<const ScalarValue> scalars, std::span<const SymInt* const> updatable,
           const void* tag);
  // Compiles and launches the open region on `stream` (or, when that fails,
  // runs its nodes' own kernels, with one warning). Does nothing when empty.
  void flush(Stream& stream);

  [[nodiscard]] const std::vector<RegionUpdate>& updates() const { return updates_; }
  // True when the node ran inside a launched region (its updatable scalars
  // are the region's slots, in updates()).
  [[nodiscard]] bool generated(const void* tag) const { return generated_.contains(tag); }
  // The device node of a node whose region fell back to kernels (its
  // updatable scalars are that kernel's, as usual), if it launched one.
  [[nodiscard]] std::optional<std::size_t> fallback_node(const void* tag) const {
    const auto it = fallback_nodes_.find(tag);
    if (it == fallback_nodes_.end()) return std::nullopt;
    return it->second;
  }
  [[nodiscard]] const RegionStats& stats() const { return stats_; }
  // (device node index, name) of every region launched.
  [[nodiscard]] const std::vector<std::pair<std::size_t, std::string>>& launches() const {
    return launches_;
  }
  // The RegionCalls launched so far: the captured graph holds them.
  std::vector<std::shared_ptr<const RegionCall>> take_calls() { return std::move(calls_); }

 private:
  struct Pending {  // a node of the open region, kept to run its kernel on fallback
    const OpDef* op;
    std::vector<Tensor> inputs;
    Tensor out;
    std::vector<ScalarValue> scalars;
    const void* tag;
  };
  int bind(const Tensor& t);  // the pointer-table index of t (one per distinct view)
  void fallback(const std::string& why);

  std::string graph_name_, cache_dir_;
  std::string body_;
  std::vector<Tensor> bound_;           // pointer table, in index order
  std::vector<std::string> slot_keys_;  // runtime slots: their expression's text
  std::vector<SymInt> slot_exprs_;
  std::vector<std::int64_t> slot_values_;  // at capture
  std::vector<Pending> pending_;
  std::vector<RegionUpdate> updates_;
  std::vector<std::shared_ptr<const RegionCall>> calls_;
  std::vector<std::pair<std::size_t, std::string>> launches_;
  std::set<const void*> generated_;
  std::map<const void*, std::size_t> fallback_nodes_;
  RegionStats stats_;
  int regions_ = 0;
};

}  // namespace sinkgraph::codegen

#pragma once
// Capture and replay on a stream: the NPUGraph / CUDA Graph layer.
//
// Note [Capture]
// Between Stream::begin_capture(pool, mode) and end_capture(), launches on the
// stream are recorded as nodes of a DeviceGraph instead of running. Nodes
// depend on the previous node of their stream; a stream that waits on an event
// recorded during the capture joins it (fork), and the origin stream waiting on
// an event of a joined stream joins it back. Every allocation made for a
// capturing stream comes from the capture's pool.
//
// Note [Replay]
// GraphExec::launch() is ONE queue entry per participating stream. The entry
// on the launch stream runs the input copies, writes the updatable scalars of
// this replay into the nodes, releases the branch entries (which run on the
// exec's own streams), runs its nodes and waits for the branches, so replay k+1
// never overlaps replay k. Nothing in the launch path touches the dispatcher,
// shape functions or the device allocator.
//
// Note [Replays on the caller]
// A caller that will wait for the replay at once (the PyTorch front end, whose
// outputs torch reads as soon as the call returns; CallOptions::wait) gains
// nothing from handing it to the stream's worker and pays for it twice: the
// hand-off and wake-up, and on a machine with a compute thread per core a
// third runnable thread (the spinning host) competing with the compute
// threads. With LaunchOptions::on_caller the launch goes through
// Stream::run_on_caller: on the CPU device, when the stream is idle, the
// calling thread runs the replay's entry itself as compute thread 0, with the
// stream's producer lock held so that anything launched meanwhile queues
// behind it. Everything else is unchanged: the same entry function, pool
// generations, fences and order tickets, and a kernel error is sticky on the
// stream as if the worker had raised it. A stream with queued work, or one
// another thread is capturing on, launches and waits instead, and so does a
// process whose compute threads leave a core free (one compute thread on two
// cores): there the worker runs on a core of its own, which costs the
// waiting caller nothing measurable, and keeps the graph's working set in
// that core's caches and TLB, away from the caller's own (Python's) work.
// Measured in issue 33 (docs/performance.md, "Which thread runs a replay"):
// an MLP whose 8 MiB of weights stream from L3 ran 8-10% slower per call on
// the caller at one compute thread, and no graph ran faster there; at two
// compute threads on two cores the caller wins, as above.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "sinkgraph/allocator.h"
#include "sinkgraph/event.h"
#include "sinkgraph/export.h"
#include "sinkgraph/kernel_abi.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/symint.h"

namespace sinkgraph {

// A scalar slot of a captured node that each replay rewrites from its syms.
struct UpdateSlot {
  int scalar_index = 0;
  SymInt expr;  // over the exec's symbols
};

struct GraphNode {
  KernelFn fn = nullptr;
  const char* name = "";
  // Names the node in a kernel error raised during a replay ("node #7
  // index_copy_ %k3"): a kernel that fails inside a replay names itself, not
  // the replay entry (empty: the operator name is used).
  std::string label;
  ArgBlock args{};
  int stream = 0;         // 0: the origin stream; 1..: forked streams in join order
  std::vector<int> deps;  // indices of earlier nodes
  std::vector<UpdateSlot> updates;
};

class GraphExec;

class SG_API DeviceGraph {
 public:
  std::vector<GraphNode> nodes;
  int num_streams = 1;
  Device* device = nullptr;
  std::shared_ptr<MemPool> pool;  // keeps the baked-in addresses reserved

  // Text: one line per node with its kernel, tensors, scalars, updatable slots
  // and dependencies.
  [[nodiscard]] std::string str() const;
  // Prepares the graph for replay with updatable slots evaluated over `symbols`
  // (in the order launch() receives their values).
  [[nodiscard]] std::unique_ptr<GraphExec> instantiate(
      const std::vector<std::string>& symbols = {}) const;
};

// A copy run at the start of a replay (static input buffers). `keep_alive`
// holds the source's memory until the copy has run.
struct ReplayCopy {
  KernelFn fn = nullptr;
  ArgBlock args{};
  std::shared_ptr<const void> keep_alive;
};

// Orders the replays of several GraphExecs that share memory, such as the
// keys of one compiled function in one pool (Note [Pool checkpoints] in
// allocator.h): a replay launched with an order starts only after every replay
// launched before it with the same order has finished, even on another stream.
class SG_API ReplayOrder {
 public:
  ReplayOrder() = default;
  ReplayOrder(const ReplayOrder&) = delete;
  ReplayOrder& operator=(const ReplayOrder&) = delete;

 private:
  friend class GraphExec;
  std::atomic<std::uint64_t> launched_{0};
  std::atomic<std::uint64_t> finished_{0};
};

class SG_API GraphExec {
 public:
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  // Enqueues one replay on `stream`: `sym_values` in instantiate()'s symbol
  // order feed the updatable slots; `copies` run first. With `order`, the
  // replay also waits for the replays launched before it under that order.
  void launch(Stream& stream, std::span<const std::int64_t> sym_values,
              std::span<const ReplayCopy> copies = {},
              const std::shared_ptr<ReplayOrder>& order = nullptr);

  // Everything a replay can carry besides its sym values, all run inside the
  // replay's one queue entry: fences it waits for first, copies into the
  // static inputs, and copies out of the outputs (clone_output) after the
  // last node, so the next replay cannot overwrite an output before its copy
  // ran, whatever stream that replay is launched on. `done`, when set, is
  // completed with `done_generation` at the very end (a host read of an
  // output waits for it).
  struct LaunchOptions {
    std::span<const ReplayCopy> copies_in;
    std::span<const ReplayCopy> copies_out;
    std::shared_ptr<ReplayOrder> order;
    std::span<const ReplayFence> wait_for;
    std::shared_ptr<EventState> done;
    std::uint64_t done_generation = 0;
    // Return once the replay is complete; it may then run on the calling
    // thread (Stream::run_on_caller, Note [Replays on the caller]).
    bool on_caller = false;
  };
  // Throws before taking any ticket when the launch cannot happen (the stream
  // is capturing, or another capture forbids it), so a refused launch never
  // leaves a later replay waiting for one that never ran.
  void launch(Stream& stream, std::span<const std::int64_t> sym_values,
              const LaunchOptions& options);
  // Throws what launch() would throw before enqueueing anything on `stream`.
  void check_can_launch(const Stream& stream) const;
  [[nodiscard]] std::size_t num_nodes() const { return nodes_.size(); }
  [[nodiscard]] int num_streams() const { return static_cast<int>(branches_.size()) + 1; }
  [[nodiscard]] const std::vector<std::string>& symbols() const { return symbols_; }

 private:
  friend class DeviceGraph;
  struct Replay;
  // Nodes are small and their argument blocks live packed in one arena, each
  // cut to ArgBlock::used_bytes(): a kernel reads only the tensors it was given
  // (Note [Kernel ABI]), so a replay walks far less memory than full blocks
  // (a no-op node's block is 72 bytes, not 872), and instantiate() touches
  // that much less fresh memory.
  struct Node {
    KernelFn fn;
    std::uint32_t args;        // offset of the node's ArgBlock in args_, in words
    std::uint32_t deps_begin;  // its cross-stream dependencies: cross_deps_[begin, end)
    std::uint32_t deps_end;
  };
  [[nodiscard]] ArgBlock& args_of(const Node& n) {
    return *reinterpret_cast<ArgBlock*>(&args_[n.args]);
  }
  // One updatable slot: launch() evaluates `expr`, the replay writes the value
  // into scalar `slot` of node `node`. A flat list, so launch costs O(slots), not O(nodes).
  struct Update {
    int node = 0;
    int slot = 0;
    CompiledSymExpr expr;
  };
  GraphExec() = default;
  static void run_origin(const ArgBlock& args, KernelContext& ctx);
  static void run_branch(const ArgBlock& args, KernelContext& ctx);
  void run_stream(int stream, std::uint64_t generation, KernelContext& ctx);
  Replay* take_replay();
  void give_back(Replay* replay);

  std::vector<Node> nodes_;
  std::vector<std::string> labels_;  // per node: what a kernel error names
  std::vector<std::uint64_t> args_;  // the packed argument blocks (8-byte aligned)
  std::vector<int> cross_deps_;
  std::vector<Update> updates_;
  std::vector<std::vector<int>> order_;  // node indices per stream, in order
  std::vector<std::string> symbols_;
  std::shared_ptr<MemPool> pool_;
  std::vector<std::unique_ptr<Stream>> branches_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> done_;  // per node: last generation completed
  std::vector<bool> has_cross_dependents_;
  std::atomic<std::uint64_t> started_{0};  // generation released to the branches
  std::unique_ptr<std::atomic<std::uint64_t>[]> branch_done_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<KernelContext*> origin_ctx_{nullptr};
  std::atomic<std::uint64_t> finished_{0};  // last generation whose origin entry completed
  // The origin entry's last touch of the exec happens under this mutex, so the
  // destructor (which waits on finish_cv_ under it) never frees a live exec.
  std::mutex finish_mutex_;
  std::condition_variable finish_cv_;
  std::mutex free_mutex_;
  std::vector<Replay*> free_;
  std::vector<std::unique_ptr<Replay>> all_;
};

// Capture-time checks (Note [Capture]): throws sinkgraph::Error when `what`
// (a synchronize, a host read, an allocation outside the pool) is not allowed
// while a capture is active in the given error mode.
SG_API void check_capture_safe(const char* what);
// True while any capture is active (cheap: one atomic load).
SG_API bool any_capture_active();

}  // namespace sinkgraph

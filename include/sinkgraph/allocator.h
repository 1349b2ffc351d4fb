#pragma once
// The caching allocator and private memory pools (PyTorch's
// CUDACachingAllocator and graph pools, reduced to what we need).
//
// Note [Stream-ordered reuse]
// A block freed on stream S may still be read by kernels S has queued. S can
// reuse it at once (its next kernel runs after them), but another stream T may
// only take it once S has *completed* the work submitted before the free. Each
// free block therefore remembers (stream, submitted-count at the free); streams
// that used a block through record_stream() are remembered the same way.
//
// Note [Memory pools]
// Every block belongs to a MemPool. The allocator's own default pool serves
// ordinary allocations; a private pool (created with create_pool()) serves the
// streams routed to it with a PoolScope — that is how capture makes every
// allocation of a capturing stream come from the graph's pool. A pool keeps its
// memory reserved while anything allocated from it is alive (allocations hold
// a reference to their pool), so addresses baked into a captured graph stay
// valid. A block records its segment and offset so that a planner can later
// place blocks at chosen offsets inside one arena; today every block is a
// segment of its own (offset 0).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sinkgraph/event.h"
#include "sinkgraph/export.h"

namespace sinkgraph {

class Device;
class Stream;
class MemPool;

struct AllocatorStats {
  std::int64_t allocated_bytes = 0;  // held by live allocations
  std::int64_t reserved_bytes = 0;   // obtained from the device (live + cached)
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t num_allocs = 0;
  std::int64_t num_frees = 0;
  std::int64_t num_cache_hits = 0;     // served from a cached block
  std::int64_t num_device_allocs = 0;  // went to the device
};
SG_API std::string to_string(const AllocatorStats& stats);

struct Block;

// An owned allocation. Move-only; returning it to the pool on destruction.
class SG_API DataPtr {
 public:
  DataPtr() = default;
  DataPtr(DataPtr&& other) noexcept;
  DataPtr& operator=(DataPtr&& other) noexcept;
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr();

  // Note [Borrowed memory]
  // Memory sinkgraph did not allocate (a torch tensor's, crossing from the
  // Python front end without a copy): `owner` keeps it alive and is released
  // when the last Storage viewing it dies. The caller promises the memory
  // stays valid and unmoved while `owner` lives, and that no queued kernel
  // still reads it when `owner` is released (the front end synchronizes its
  // stream before it returns to Python). No pool, no stream bookkeeping.
  static DataPtr borrow(void* ptr, std::size_t size, std::shared_ptr<void> owner);
  [[nodiscard]] bool borrowed() const { return owner_ != nullptr; }

  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] MemPool* pool() const { return pool_.get(); }
  // Marks the block as used by `stream` too (see Note [Stream-ordered reuse]).
  void record_stream(Stream& stream);

 private:
  friend class MemPool;
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  Block* block_ = nullptr;
  std::shared_ptr<MemPool> pool_;
  std::shared_ptr<void> owner_;  // borrowed memory only
};

class SG_API MemPool : public std::enable_shared_from_this<MemPool> {
 public:
  MemPool(Device& device, std::string name, std::uint64_t id);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  [[nodiscard]] std::uint64_t id() const { return id_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] AllocatorStats stats() const;
  // Returns cached blocks that no stream may still use to the device.
  void release_cached();
  void reset_peak();

  // Replay generations (Note [Stale outputs] in compiler.h): every graph replay
  // into this pool bumps the generation and names itself as the last writer.
  // bump_generation does only that; begin_replay (below) also respects held
  // uses and their fences, and is what CapturedGraph calls.
  std::uint64_t bump_generation(const std::string& writer);
  [[nodiscard]] std::uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::string last_writer() const;

  // Note [Output uses]
  // A replay's outputs live in its pool until the next replay overwrites them.
  // Whoever uses an output (an operator launched on some stream, a host read)
  // brackets the use with begin_use(generation) and end_use():
  //  - begin_use returns false when the pool's generation is no longer the
  //    output's (a later replay was launched: the output is stale); otherwise
  //    the use is held, and begin_replay() waits on the host until every held
  //    use has ended. Checking and holding is one step under the pool's lock,
  //    so no replay can start between a successful check and the use.
  //  - a use that queued device work leaves a fence (an event recorded after
  //    the work); the next replay into the pool waits for it on the device,
  //    whatever stream either runs on.
  // begin_replay() also records `done` as the writer's fence: a host read of an
  // output waits for the replay that wrote it (begin_use hands it out), even
  // when that replay ran on another stream than the reader's. Fences also hold back the
  // pool's memory when the pool dies (Note [Deferred frees]).
  // `writer`, when given, receives the fence of the replay that wrote the
  // output: a use on another stream waits for it first (a host read waits on
  // the host), so using an output on any stream never reads it half-written.
  bool begin_use(std::uint64_t generation, ReplayFence* writer = nullptr);
  void end_use(ReplayFence fence = {});
  // Waits for held uses to end, bumps the generation, names `writer`, moves
  // the fences left by uses into `fences` and makes `done` the writer fence.
  // Returns the new generation.
  // With `expect` (a generation), the replay begins only if the pool is still
  // at that generation — its own outputs passed as inputs are unchanged —
  // and returns 0 (nothing done) otherwise.
  std::uint64_t begin_replay(const std::string& writer, std::vector<ReplayFence>& fences,
                             ReplayFence done, std::uint64_t expect = 0);
  // A replay begun but never launched (its launch threw): its fences go back
  // to the pool for the next replay, and its done-fence is marked reached.
  // The generation stays bumped: the previous outputs read as stale, which is
  // an error, never a silent wrong value.
  void cancel_replay(std::vector<ReplayFence>& fences, const ReplayFence& done);

  // Note [Pool checkpoints]: graphs that never run concurrently can share the
  // memory they hold. checkpoint() records which blocks are held now;
  // restore(cp) lends every block held now but not at `cp` to the allocations
  // of later captures into this pool, as if those blocks were free again. A
  // lent block keeps its owner (it stays reserved and counts once); it simply
  // gains a second holder. Only allocations made for a capturing stream
  // borrow: memory a graph reads before its first kernel (static inputs,
  // copied in at replay) must never alias another graph's live outputs, or
  // copying one caller's input could overwrite the next. The caller promises
  // that the graphs involved are never in flight at the same time; a later
  // replay of one overwrites what the others left there (outputs are stamped
  // with the pool's generation, so reading such an output raises). The lending
  // stands until the blocks' holders let go; a block a borrower frees while its
  // owner still holds it is lendable again.
  class Checkpoint {
   public:
    Checkpoint() = default;
    [[nodiscard]] std::size_t held_blocks() const { return held_.size(); }

   private:
    friend class MemPool;
    std::uint64_t pool_id_ = 0;
    std::vector<const Block*> held_;  // sorted
  };
  [[nodiscard]] Checkpoint checkpoint() const;
  void restore(const Checkpoint& state);
  // Bytes of blocks currently lent out by restore() and held by a borrower.
  [[nodiscard]] std::int64_t borrowed_bytes() const;

 private:
  friend class Allocator;
  friend class DataPtr;
  DataPtr allocate(std::size_t bytes, Stream& stream);
  void free(Block* block) noexcept;
  void record_stream(Block* block, Stream& stream);
  void forget_stream(const Stream& stream);
  Block* find_reusable(std::size_t bytes, const Stream& stream);

  Device& device_;
  std::string name_;
  std::uint64_t id_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, Block*> free_blocks_;  // by size
  std::multimap<std::size_t, Block*> lendable_;     // held, lent to captures by restore()
  std::atomic<std::uint64_t> generation_{0};
  std::string last_writer_;                     // guarded by mutex_
  int users_ = 0;                               // held output uses (Note [Output uses])
  std::condition_variable users_cv_;            // signalled when users_ drops to 0
  std::vector<ReplayFence> fences_;             // left by uses since the last replay
  ReplayFence writer_fence_;                    // the last replay's completion
  std::vector<std::unique_ptr<Block>> blocks_;  // every block of the pool
  AllocatorStats stats_;
};

// Uses of replay outputs begun with MemPool::begin_use (Tensor::begin_output_use)
// and ended together: by end(fence), leaving the fence for each pool's next
// replay, or without one when destroyed first (an error in between).
class SG_API PoolUses {
 public:
  PoolUses() = default;
  PoolUses(const PoolUses&) = delete;
  PoolUses& operator=(const PoolUses&) = delete;
  ~PoolUses() { end(); }
  void add(MemPool* pool) {
    if (pool != nullptr) pools_.push_back(pool);
  }
  [[nodiscard]] bool empty() const { return pools_.empty(); }
  void end(const ReplayFence& fence = {});

 private:
  std::vector<MemPool*> pools_;
};

class SG_API Allocator {
 public:
  explicit Allocator(Device& device);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Stream-ordered allocation for work on `stream`, from the pool `stream` is
  // routed to (the default pool unless a PoolScope is active). Throws
  // sinkgraph::Error naming the size and the statistics when memory runs out.
  DataPtr allocate(std::size_t bytes, Stream& stream);

  // A new private pool.
  std::shared_ptr<MemPool> create_pool(const std::string& name);
  [[nodiscard]] MemPool& default_pool() { return *default_pool_; }

  // Device-wide statistics: every pool summed, with device-wide peaks.
  [[nodiscard]] AllocatorStats stats() const;
  void reset_peak();
  // Releases the default pool's reusable cached blocks, and the memory of dead
  // pools that no queued work reads any more (Note [Deferred frees]).
  void empty_cache();
  // Bytes of dead pools still held back for queued work (Note [Deferred frees]).
  [[nodiscard]] std::int64_t deferred_bytes();
  // Caps reserved bytes (0 = unlimited); exceeding it is an allocation error.
  void set_memory_limit(std::int64_t bytes);

  // Routes allocations for `stream` to `pool` (null: back to the default).
  void route_stream(const Stream& stream, std::shared_ptr<MemPool> pool);
  // Called by a stream when it is destroyed (after draining).
  void forget_stream(const Stream& stream);

 private:
  friend class MemPool;
  void* device_alloc(std::size_t bytes, MemPool& pool);
  void device_free(void* ptr, std::size_t bytes) noexcept;
  // Note [Deferred frees]: a dying pool whose memory queued work may still
  // read hands its segments here; they return to the device once every fence
  // is reached (checked on each device allocation and by empty_cache()).
  struct Deferred {
    std::vector<std::pair<void*, std::size_t>> segments;
    std::vector<ReplayFence> fences;
  };
  void defer_free(Deferred deferred);
  void collect_deferred(bool wait) noexcept;

  Device& device_;
  std::shared_ptr<MemPool> default_pool_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<MemPool>> routes_;  // stream id -> pool
  std::atomic<std::size_t> num_routes_{0};  // lets allocate() skip the lock when no pool is routed
  std::vector<std::weak_ptr<MemPool>> pools_;
  std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;
  std::atomic<std::size_t> num_deferred_{0};
  std::atomic<std::int64_t> limit_bytes_{0};
  std::atomic<std::int64_t> reserved_bytes_{0};
  std::atomic<std::int64_t> peak_reserved_bytes_{0};
  std::atomic<std::int64_t> allocated_bytes_{0};
  std::atomic<std::int64_t> peak_allocated_bytes_{0};
  std::atomic<std::uint64_t> next_pool_id_{1};
};

// Routes a stream's allocations to a pool for a scope (capture uses this).
class SG_API PoolScope {
 public:
  PoolScope(Stream& stream, std::shared_ptr<MemPool> pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  Stream& stream_;
};

}  // namespace sinkgraph

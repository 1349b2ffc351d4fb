#include "sinkgraph/allocator.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "sinkgraph/device.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

struct Block {
  void* segment = nullptr;
  std::size_t offset = 0;
  std::size_t size = 0;
  int holders = 0;        // allocations holding it (2+ once lent by MemPool::restore)
  bool lent = false;      // lent by MemPool::restore; stays lent until no one holds it
  bool lendable = false;  // on the pool's lendable_ list
  // Streams that may still touch the block and their submitted count when it
  // was freed (see Note [Stream-ordered reuse]). The first is the owner.
  struct Use {
    Stream* stream;
    std::uint64_t until;
  };
  std::vector<Use> uses;
  [[nodiscard]] void* ptr() const { return static_cast<char*>(segment) + offset; }
};

namespace {

constexpr std::size_t kSmallLimit = std::size_t{1} << 20;

// Size classes: multiples of 512 bytes up to 1 MiB, then multiples of 64 KiB.
std::size_t round_size(std::size_t bytes) {
  const std::size_t quantum = bytes <= kSmallLimit ? 512 : (std::size_t{64} << 10);
  return std::max<std::size_t>(quantum, (bytes + quantum - 1) / quantum * quantum);
}

void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t prev = peak.load(std::memory_order_relaxed);
  while (value > prev && !peak.compare_exchange_weak(prev, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::string to_string(const AllocatorStats& s) {
  std::ostringstream out;
  out << "allocated " << s.allocated_bytes << " B, reserved " << s.reserved_bytes
      << " B, peak allocated " << s.peak_allocated_bytes << " B, peak reserved "
      << s.peak_reserved_bytes << " B, " << s.num_allocs << " allocations, " << s.num_frees
      << " frees, " << s.num_cache_hits << " cache hits, " << s.num_device_allocs
      << " device allocations";
  return out.str();
}

// ---- DataPtr ---------------------------------------------------------------

DataPtr::DataPtr(DataPtr&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      block_(std::exchange(other.block_, nullptr)),
      pool_(std::move(other.pool_)),
      owner_(std::move(other.owner_)) {}

DataPtr& DataPtr::operator=(DataPtr&& other) noexcept {
  if (this != &other) {
    if (block_ != nullptr) pool_->free(block_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    block_ = std::exchange(other.block_, nullptr);
    pool_ = std::move(other.pool_);
    owner_ = std::move(other.owner_);
  }
  return *this;
}

DataPtr DataPtr::borrow(void* ptr, std::size_t size, std::shared_ptr<void> owner) {
  SG_CHECK(owner != nullptr, "DataPtr::borrow: borrowed memory needs an owner");
  DataPtr out;
  out.ptr_ = ptr;
  out.size_ = size;
  out.owner_ = std::move(owner);
  return out;
}

DataPtr::~DataPtr() {
  if (block_ != nullptr) pool_->free(block_);
}

void DataPtr::record_stream(Stream& stream) {
  if (owner_ != nullptr) return;  // Note [Borrowed memory]
  SG_CHECK(block_ != nullptr, "record_stream on an empty allocation");
  pool_->record_stream(block_, stream);
}

// ---- MemPool ---------------------------------------------------------------

MemPool::MemPool(Device& device, std::string name, std::uint64_t id)
    : device_(device), name_(std::move(name)), id_(id) {}

MemPool::~MemPool() {
  // Every allocation holds a reference to its pool, so all blocks are free;
  // but work queued on some stream may still read them: an operator using an
  // output, or the last replay (Note [Output uses]). A stream that used a
  // block (record_stream) and has not passed its free yet gets a marker to
  // wait for: never a host wait here, which could be on that stream's own
  // worker (the last reference to a pool can die inside a replay).
  Allocator::Deferred deferred;
  for (const auto& block : blocks_) {
    for (const auto& use : block->uses) {
      // (A capturing stream runs nothing until its capture ends: no marker.)
      if (use.stream != nullptr && use.stream->completed() < use.until &&
          !use.stream->is_capturing()) {
        deferred.fences.push_back(use.stream->record_fence());
      }
    }
  }
  for (auto& fence : fences_) {
    if (!fence.reached()) deferred.fences.push_back(std::move(fence));
  }
  if (!writer_fence_.reached()) deferred.fences.push_back(std::move(writer_fence_));
  Allocator& alloc = device_.allocator();
  if (deferred.fences.empty()) {
    for (auto& block : blocks_) alloc.device_free(block->segment, block->size);
    return;
  }
  // Note [Deferred frees]
  for (auto& block : blocks_) deferred.segments.emplace_back(block->segment, block->size);
  alloc.defer_free(std::move(deferred));
}

AllocatorStats MemPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::uint64_t MemPool::bump_generation(const std::string& writer) {
  std::lock_guard lock(mutex_);
  if (last_writer_ != writer) last_writer_ = writer;
  return generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
}

bool MemPool::begin_use(std::uint64_t generation, ReplayFence* writer) {
  std::lock_guard lock(mutex_);
  if (generation_.load(std::memory_order_acquire) != generation) return false;
  ++users_;
  if (writer != nullptr) *writer = writer_fence_;
  return true;
}

void MemPool::end_use(ReplayFence fence) {
  std::lock_guard lock(mutex_);
  SG_ASSERT(users_ > 0, "end_use without begin_use on pool '", name_, "'");
  if (fence.state != nullptr) {
    std::erase_if(fences_, [](const ReplayFence& f) { return f.reached(); });
    fences_.push_back(std::move(fence));
  }
  if (--users_ == 0) users_cv_.notify_all();
}

std::uint64_t MemPool::begin_replay(const std::string& writer, std::vector<ReplayFence>& fences,
                                    ReplayFence done, std::uint64_t expect) {
  std::unique_lock lock(mutex_);
  users_cv_.wait(lock, [&] { return users_ == 0; });
  if (expect != 0 && generation_.load(std::memory_order_acquire) != expect) return 0;
  if (last_writer_ != writer) last_writer_ = writer;
  fences.clear();
  for (auto& f : fences_) {
    if (!f.reached()) fences.push_back(std::move(f));
  }
  fences_.clear();
  writer_fence_ = std::move(done);
  return generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void MemPool::cancel_replay(std::vector<ReplayFence>& fences, const ReplayFence& done) {
  if (done.state != nullptr) complete_fence(*done.state, done.generation);
  std::lock_guard lock(mutex_);
  for (auto& f : fences) fences_.push_back(std::move(f));
  fences.clear();
}

void PoolUses::end(const ReplayFence& fence) {
  for (MemPool* p : pools_) p->end_use(fence);
  pools_.clear();
}

std::string MemPool::last_writer() const {
  std::lock_guard lock(mutex_);
  return last_writer_;
}

void MemPool::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

namespace {
bool reusable_by(const Block& block, const Stream& stream) {
  return std::all_of(block.uses.begin(), block.uses.end(), [&](const Block::Use& use) {
    return use.stream == nullptr || use.stream == &stream || use.stream->completed() >= use.until;
  });
}
}  // namespace

Block* MemPool::find_reusable(std::size_t bytes, const Stream& stream) {
  // Best fit among blocks no larger than twice the request.
  for (auto it = free_blocks_.lower_bound(bytes);
       it != free_blocks_.end() && it->first <= 2 * bytes; ++it) {
    Block* block = it->second;
    if (reusable_by(*block, stream)) {
      free_blocks_.erase(it);
      return block;
    }
  }
  // Then a block another graph holds, lent by restore() (Note [Pool checkpoints]).
  if (!lendable_.empty() && stream.is_capturing()) {
    const auto it = lendable_.lower_bound(bytes);
    if (it != lendable_.end() && it->first <= 2 * bytes) {
      Block* block = it->second;
      lendable_.erase(it);
      block->lendable = false;
      return block;
    }
  }
  return nullptr;
}

MemPool::Checkpoint MemPool::checkpoint() const {
  std::lock_guard lock(mutex_);
  Checkpoint cp;
  cp.pool_id_ = id_;
  for (const auto& block : blocks_) {
    if (block->holders > 0) cp.held_.push_back(block.get());
  }
  std::sort(cp.held_.begin(), cp.held_.end());
  return cp;
}

void MemPool::restore(const Checkpoint& state) {
  std::lock_guard lock(mutex_);
  SG_CHECK(state.pool_id_ == id_, "MemPool::restore: the checkpoint was taken of pool #",
           state.pool_id_, ", not of pool '", name_, "' (#", id_, ")");
  for (const auto& owned : blocks_) {
    Block* block = owned.get();
    if (block->holders == 0 || block->lendable ||
        std::binary_search(state.held_.begin(), state.held_.end(), block)) {
      continue;
    }
    block->lent = true;
    block->lendable = true;
    lendable_.emplace(block->size, block);
  }
}

std::int64_t MemPool::borrowed_bytes() const {
  std::lock_guard lock(mutex_);
  std::int64_t bytes = 0;
  for (const auto& block : blocks_) {
    if (block->holders > 1) bytes += static_cast<std::int64_t>(block->size);
  }
  return bytes;
}

DataPtr MemPool::allocate(std::size_t bytes, Stream& stream) {
  const std::size_t size = round_size(bytes);
  std::unique_lock lock(mutex_);
  Block* block = find_reusable(size, stream);
  if (block != nullptr) {
    ++stats_.num_cache_hits;
  } else {
    lock.unlock();
    Allocator& alloc = device_.allocator();
    void* segment = alloc.device_alloc(size, *this);
    SG_CHECK(segment != nullptr, "out of memory on ", device_.name(), ": cannot allocate ", bytes,
             " bytes (", size, " after rounding) for pool '", name_, "' (limit ",
             alloc.limit_bytes_.load(), " B; ", to_string(alloc.stats()), ")");
    lock.lock();
    auto owned = std::make_unique<Block>();
    owned->segment = segment;
    owned->size = size;
    block = owned.get();
    blocks_.push_back(std::move(owned));
    ++stats_.num_device_allocs;
    stats_.reserved_bytes += static_cast<std::int64_t>(size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  ++stats_.num_allocs;
  const bool first_holder = block->holders++ == 0;
  if (first_holder) {
    block->uses.assign(1, Block::Use{&stream, 0});
    stats_.allocated_bytes += static_cast<std::int64_t>(block->size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  } else if (std::none_of(block->uses.begin(), block->uses.end(),
                          [&](const Block::Use& u) { return u.stream == &stream; })) {
    block->uses.push_back(Block::Use{&stream, 0});  // a borrower: both streams constrain reuse
  }
  lock.unlock();

  if (first_holder) {
    Allocator& alloc = device_.allocator();
    const std::int64_t now =
        alloc.allocated_bytes_.fetch_add(static_cast<std::int64_t>(block->size),
                                         std::memory_order_relaxed) +
        static_cast<std::int64_t>(block->size);
    raise_peak(alloc.peak_allocated_bytes_, now);
  }

  DataPtr out;
  out.ptr_ = block->ptr();
  out.size_ = bytes;
  out.block_ = block;
  out.pool_ = shared_from_this();
  return out;
}

void MemPool::free(Block* block) noexcept {
  std::lock_guard lock(mutex_);
  SG_ASSERT(block->holders > 0);
  ++stats_.num_frees;
  if (--block->holders > 0) {
    // Lent (Note [Pool checkpoints]) and still held by another: lendable again.
    if (block->lent && !block->lendable) {
      block->lendable = true;
      lendable_.emplace(block->size, block);
    }
    return;
  }
  block->lent = false;
  for (auto& use : block->uses) {
    if (use.stream != nullptr) use.until = use.stream->submitted();
  }
  if (block->lendable) {
    block->lendable = false;
    for (auto it = lendable_.lower_bound(block->size);
         it != lendable_.end() && it->first == block->size; ++it) {
      if (it->second == block) {
        lendable_.erase(it);
        break;
      }
    }
  }
  stats_.allocated_bytes -= static_cast<std::int64_t>(block->size);
  device_.allocator().allocated_bytes_.fetch_sub(static_cast<std::int64_t>(block->size),
                                                 std::memory_order_relaxed);
  free_blocks_.emplace(block->size, block);
}

void MemPool::record_stream(Block* block, Stream& stream) {
  std::lock_guard lock(mutex_);
  for (const auto& use : block->uses) {
    if (use.stream == &stream) return;
  }
  block->uses.push_back(Block::Use{&stream, 0});
}

void MemPool::forget_stream(const Stream& stream) {
  std::lock_guard lock(mutex_);
  for (auto& block : blocks_) {
    for (auto& use : block->uses) {
      if (use.stream == &stream) use.stream = nullptr;  // drained: no longer a constraint
    }
  }
}

void MemPool::release_cached() {
  std::lock_guard lock(mutex_);
  for (auto it = free_blocks_.begin(); it != free_blocks_.end();) {
    Block* block = it->second;
    const bool idle = std::all_of(block->uses.begin(), block->uses.end(), [](const Block::Use& u) {
      return u.stream == nullptr || u.stream->completed() >= u.until;
    });
    if (!idle) {
      ++it;
      continue;
    }
    it = free_blocks_.erase(it);
    device_.allocator().device_free(block->segment, block->size);
    stats_.reserved_bytes -= static_cast<std::int64_t>(block->size);
    std::erase_if(blocks_, [&](const auto& b) { return b.get() == block; });
  }
}

// ---- Allocator ---------------------------------------------------------------

Allocator::Allocator(Device& device)
    : device_(device), default_pool_(std::make_shared<MemPool>(device, "default", 0)) {
  pools_.push_back(default_pool_);
}

Allocator::~Allocator() { collect_deferred(true); }

DataPtr Allocator::allocate(std::size_t bytes, Stream& stream) {
  SG_ASSERT(&stream.device() == &device_, "stream of another device");
  std::shared_ptr<MemPool> pool;
  if (num_routes_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mutex_);
    const auto it = routes_.find(stream.id());
    if (it != routes_.end()) pool = it->second;
  }
  if (pool == nullptr && any_capture_active()) [[unlikely]] {
    const std::string what = "allocating " + std::to_string(bytes) + " bytes on stream '" +
                             stream.name() + "' outside the capture's pool";
    check_capture_safe(what.c_str());
  }
  return (pool ? *pool : *default_pool_).allocate(bytes, stream);
}

void Allocator::defer_free(Deferred deferred) {
  std::lock_guard lock(deferred_mutex_);
  deferred_.push_back(std::move(deferred));
  num_deferred_.store(deferred_.size(), std::memory_order_release);
}

void Allocator::collect_deferred(bool wait) noexcept {
  if (num_deferred_.load(std::memory_order_acquire) == 0) return;
  std::vector<Deferred> ready;
  {
    std::lock_guard lock(deferred_mutex_);
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (wait) {
        for (const auto& f : it->fences) f.wait();
      }
      const bool reached = std::all_of(it->fences.begin(), it->fences.end(),
                                       [](const ReplayFence& f) { return f.reached(); });
      if (reached) {
        ready.push_back(std::move(*it));
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
    num_deferred_.store(deferred_.size(), std::memory_order_release);
  }
  for (const auto& d : ready) {
    for (const auto& [ptr, size] : d.segments) device_free(ptr, size);
  }
}

std::int64_t Allocator::deferred_bytes() {
  collect_deferred(false);
  std::lock_guard lock(deferred_mutex_);
  std::int64_t bytes = 0;
  for (const auto& d : deferred_) {
    for (const auto& seg : d.segments) bytes += static_cast<std::int64_t>(seg.second);
  }
  return bytes;
}

void* Allocator::device_alloc(std::size_t bytes, MemPool& /*pool*/) {
  collect_deferred(false);
  const auto over_limit = [&] {
    const std::int64_t limit = limit_bytes_.load(std::memory_order_relaxed);
    return limit > 0 &&
           reserved_bytes_.load(std::memory_order_relaxed) + static_cast<std::int64_t>(bytes) >
               limit;
  };
  if (over_limit()) empty_cache();
  void* ptr = over_limit() ? nullptr : device_.raw_alloc(bytes);
  if (ptr == nullptr) {
    empty_cache();
    ptr = over_limit() ? nullptr : device_.raw_alloc(bytes);
  }
  if (ptr == nullptr) return nullptr;  // the caller raises, naming the requested size
  const std::int64_t now =
      reserved_bytes_.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed) +
      static_cast<std::int64_t>(bytes);
  raise_peak(peak_reserved_bytes_, now);
  return ptr;
}

void Allocator::device_free(void* ptr, std::size_t bytes) noexcept {
  device_.raw_free(ptr);
  reserved_bytes_.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
}

std::shared_ptr<MemPool> Allocator::create_pool(const std::string& name) {
  auto pool = std::make_shared<MemPool>(device_, name, next_pool_id_.fetch_add(1));
  std::lock_guard lock(mutex_);
  std::erase_if(pools_, [](const auto& weak) { return weak.expired(); });
  pools_.push_back(pool);
  return pool;
}

AllocatorStats Allocator::stats() const {
  AllocatorStats total;
  std::vector<std::shared_ptr<MemPool>> pools;
  {
    std::lock_guard lock(mutex_);
    for (const auto& weak : pools_) {
      if (auto p = weak.lock()) pools.push_back(std::move(p));
    }
  }
  for (const auto& pool : pools) {
    const AllocatorStats s = pool->stats();
    total.num_allocs += s.num_allocs;
    total.num_frees += s.num_frees;
    total.num_cache_hits += s.num_cache_hits;
    total.num_device_allocs += s.num_device_allocs;
  }
  total.allocated_bytes = allocated_bytes_.load(std::memory_order_relaxed);
  total.reserved_bytes = reserved_bytes_.load(std::memory_order_relaxed);
  total.peak_allocated_bytes = peak_allocated_bytes_.load(std::memory_order_relaxed);
  total.peak_reserved_bytes = peak_reserved_bytes_.load(std::memory_order_relaxed);
  return total;
}

void Allocator::reset_peak() {
  peak_allocated_bytes_.store(allocated_bytes_.load());
  peak_reserved_bytes_.store(reserved_bytes_.load());
  default_pool_->reset_peak();
}

void Allocator::empty_cache() {
  collect_deferred(false);
  default_pool_->release_cached();
}

void Allocator::set_memory_limit(std::int64_t bytes) {
  SG_CHECK(bytes >= 0, "set_memory_limit: the limit must be >= 0 bytes, got ", bytes);
  limit_bytes_.store(bytes);
}

void Allocator::route_stream(const Stream& stream, std::shared_ptr<MemPool> pool) {
  std::lock_guard lock(mutex_);
  if (pool) {
    routes_[stream.id()] = std::move(pool);
  } else {
    routes_.erase(stream.id());
  }
  num_routes_.store(routes_.size(), std::memory_order_release);
}

void Allocator::forget_stream(const Stream& stream) {
  std::vector<std::shared_ptr<MemPool>> pools;
  {
    std::lock_guard lock(mutex_);
    routes_.erase(stream.id());
    num_routes_.store(routes_.size(), std::memory_order_release);
    for (const auto& weak : pools_) {
      if (auto p = weak.lock()) pools.push_back(std::move(p));
    }
  }
  for (const auto& pool : pools) pool->forget_stream(stream);
}

PoolScope::PoolScope(Stream& stream, std::shared_ptr<MemPool> pool) : stream_(stream) {
  SG_CHECK(pool != nullptr, "PoolScope needs a pool");
  stream.device().allocator().route_stream(stream, std::move(pool));
}

PoolScope::~PoolScope() { stream_.device().allocator().route_stream(stream_, nullptr); }

}  // namespace sinkgraph

// The caching allocator's conformance suite, run for every device type through
// the public API: stream-ordered reuse, statistics, limits and private pools.
#include "sinkgraph/allocator.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/device.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/kernel_abi.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {
// Readable parameter values in gtest's failure messages.
inline void PrintTo(DeviceType type, std::ostream* out) { *out << device_type_name(type); }
}  // namespace sinkgraph

namespace {

using namespace std::chrono_literals;
using sinkgraph::AllocatorStats;
using sinkgraph::ArgBlock;
using sinkgraph::DataPtr;
using sinkgraph::DeviceType;
using sinkgraph::KernelContext;
using sinkgraph::Stream;

constexpr std::size_t kKiB = std::size_t{1} << 10;
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::int64_t i64(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }

// A kernel that blocks until the host opens the gate (or a long deadline
// passes, so that a broken runtime fails the test instead of hanging it).
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  std::atomic<bool> timed_out{false};
  void release() { open.store(true); }
  void wait_entered() const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!entered.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
    }
  }
};

void gate_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  auto* gate = reinterpret_cast<Gate*>(args.scalars[0].i);
  gate->entered.store(true);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!gate->open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate->timed_out.store(true);
      return;
    }
    std::this_thread::sleep_for(100us);
  }
}

void launch_gate(Stream& stream, Gate& gate) {
  ArgBlock args{};
  args.num_scalars = 1;
  args.scalars[0].i = reinterpret_cast<std::intptr_t>(&gate);
  stream.launch(gate_kernel, args, "gate");
  gate.wait_entered();
}

// Resets the memory limit even when a test fails half-way.
struct LimitGuard {
  sinkgraph::Allocator& alloc;
  ~LimitGuard() { alloc.set_memory_limit(0); }
};

class RuntimeAllocator : public testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override {
    // Cached blocks left by earlier tests must not satisfy this test's requests.
    allocator().empty_cache();
  }
  sinkgraph::Device& device() { return sinkgraph::get_device(GetParam()); }
  sinkgraph::Allocator& allocator() { return device().allocator(); }
  std::unique_ptr<Stream> make_stream() { return device().create_stream(); }
};

TEST_P(RuntimeAllocator, AllocationsAreDistinctAndSized) {
  auto s = make_stream();
  DataPtr a = allocator().allocate(1000, *s);
  DataPtr b = allocator().allocate(1000, *s);
  ASSERT_NE(a.get(), nullptr);
  ASSERT_NE(b.get(), nullptr);
  EXPECT_NE(a.get(), b.get());
  EXPECT_EQ(a.size(), 1000U);
  EXPECT_EQ(a.pool(), &allocator().default_pool());

  void* const addr = a.get();
  DataPtr moved = std::move(a);
  EXPECT_EQ(moved.get(), addr);
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  const AllocatorStats before = allocator().stats();
  moved = std::move(b);  // frees the block `moved` held
  EXPECT_EQ(allocator().stats().num_frees, before.num_frees + 1);
}

TEST(RuntimeAllocatorCpu, LargeBlocksStartOnHugePageBoundaries) {
  // Note [Huge pages for large blocks]: 2 MiB and more is 2 MiB-aligned (and
  // advised as THP); smaller blocks keep 64-byte alignment.
  sinkgraph::Device& cpu = sinkgraph::get_device(sinkgraph::DeviceType::cpu);
  auto s = cpu.create_stream();
  cpu.allocator().empty_cache();  // a fresh block, not one cached by another test
  DataPtr big = cpu.allocator().allocate(std::size_t{5} << 20, *s);
  DataPtr small = cpu.allocator().allocate(1000, *s);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.get()) % (std::uintptr_t{2} << 20), 0U);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.get()) % 64, 0U);
}

TEST_P(RuntimeAllocator, FreedBlockIsReusedByItsStreamAtOnceAndByOthersOnlyAfterCompletion) {
  auto s = make_stream();
  auto t = make_stream();
  constexpr std::size_t kBytes = 200 * kKiB + 24;
  Gate gate;

  DataPtr p = allocator().allocate(kBytes, *s);
  void* const addr = p.get();
  launch_gate(*s, gate);  // a kernel on S that (notionally) still uses the block
  p = DataPtr();          // freed on S while that kernel is blocked

  // S may take it back at once: its next kernel runs after the blocked one.
  DataPtr again = allocator().allocate(kBytes, *s);
  EXPECT_EQ(again.get(), addr) << "S did not reuse its own freed block";
  again = DataPtr();

  // T must not: S has not completed the work submitted before the free.
  DataPtr other = allocator().allocate(kBytes, *t);
  EXPECT_NE(other.get(), addr) << "T got a block S's pending kernel may still use";
  EXPECT_FALSE(s->query());

  gate.release();
  s->synchronize();
  const AllocatorStats before = allocator().stats();
  DataPtr later = allocator().allocate(kBytes, *t);
  EXPECT_EQ(later.get(), addr) << "T could not reuse the block after S completed";
  EXPECT_EQ(allocator().stats().num_cache_hits, before.num_cache_hits + 1);
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_P(RuntimeAllocator, RecordStreamDelaysReuseUntilTheOtherStreamCompletes) {
  auto s = make_stream();
  auto t = make_stream();
  constexpr std::size_t kBytes = 300 * kKiB + 8;
  Gate gate;

  DataPtr p = allocator().allocate(kBytes, *s);
  void* const addr = p.get();
  launch_gate(*t, gate);  // T uses the block
  p.record_stream(*t);
  p = DataPtr();

  DataPtr on_s = allocator().allocate(kBytes, *s);
  EXPECT_NE(on_s.get(), addr) << "S reused a block T's pending kernel may still use";

  gate.release();
  t->synchronize();
  DataPtr after = allocator().allocate(kBytes, *s);
  EXPECT_EQ(after.get(), addr) << "S could not reuse the block after T completed";
  EXPECT_FALSE(gate.timed_out.load());

  DataPtr empty;
  EXPECT_THROW(empty.record_stream(*t), sinkgraph::Error);
}

TEST_P(RuntimeAllocator, StatisticsTrackAllocationsFreesAndCacheHits) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  const AllocatorStats s0 = alloc.stats();
  const AllocatorStats p0 = alloc.default_pool().stats();

  DataPtr a = alloc.allocate(kMiB, *s);
  void* const a_addr = a.get();
  AllocatorStats st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, s0.allocated_bytes + i64(kMiB));
  EXPECT_EQ(st.reserved_bytes, s0.reserved_bytes + i64(kMiB));
  EXPECT_EQ(st.num_allocs, s0.num_allocs + 1);
  EXPECT_EQ(st.num_device_allocs, s0.num_device_allocs + 1);
  EXPECT_EQ(st.num_cache_hits, s0.num_cache_hits);
  EXPECT_GE(st.peak_allocated_bytes, st.allocated_bytes);
  EXPECT_GE(st.peak_reserved_bytes, st.reserved_bytes);

  DataPtr b = alloc.allocate(kMiB / 2, *s);
  st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, s0.allocated_bytes + i64(kMiB + kMiB / 2));
  const std::int64_t high_water = st.allocated_bytes;

  a = DataPtr();
  st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, s0.allocated_bytes + i64(kMiB / 2));
  EXPECT_EQ(st.reserved_bytes, s0.reserved_bytes + i64(kMiB + kMiB / 2)) << "freeing cached it";
  EXPECT_EQ(st.num_frees, s0.num_frees + 1);
  EXPECT_GE(st.peak_allocated_bytes, high_water);

  DataPtr c = alloc.allocate(kMiB, *s);  // served from the cache
  EXPECT_EQ(c.get(), a_addr);
  st = alloc.stats();
  EXPECT_EQ(st.num_cache_hits, s0.num_cache_hits + 1);
  EXPECT_EQ(st.num_device_allocs, s0.num_device_allocs + 2);
  EXPECT_EQ(st.num_allocs, s0.num_allocs + 3);
  EXPECT_EQ(st.reserved_bytes, s0.reserved_bytes + i64(kMiB + kMiB / 2));

  // The default pool saw the same traffic.
  const AllocatorStats p1 = alloc.default_pool().stats();
  EXPECT_EQ(p1.num_allocs, p0.num_allocs + 3);
  EXPECT_EQ(p1.num_frees, p0.num_frees + 1);
  EXPECT_EQ(p1.num_cache_hits, p0.num_cache_hits + 1);
  EXPECT_EQ(p1.allocated_bytes, p0.allocated_bytes + i64(kMiB + kMiB / 2));

  // reset_peak drops the peaks to the current values.
  b = DataPtr();
  st = alloc.stats();
  EXPECT_GE(st.peak_allocated_bytes, high_water);
  alloc.reset_peak();
  st = alloc.stats();
  EXPECT_EQ(st.peak_allocated_bytes, st.allocated_bytes);
  EXPECT_EQ(st.peak_reserved_bytes, st.reserved_bytes);
  const AllocatorStats pool_after_reset = alloc.default_pool().stats();
  EXPECT_EQ(pool_after_reset.peak_allocated_bytes, pool_after_reset.allocated_bytes);

  c = DataPtr();
  st = alloc.stats();
  EXPECT_EQ(st.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(st.num_frees, s0.num_frees + 3);
  EXPECT_FALSE(sinkgraph::to_string(st).empty());
}

TEST_P(RuntimeAllocator, EmptyCacheReleasesOnlyIdleCachedBlocks) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  const std::int64_t reserved0 = alloc.stats().reserved_bytes;

  DataPtr live = alloc.allocate(kMiB, *s);
  DataPtr idle = alloc.allocate(2 * kMiB, *s);
  idle = DataPtr();
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0 + i64(3 * kMiB));

  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0 + i64(kMiB)) << "live memory was released";
  EXPECT_EQ(alloc.default_pool().stats().reserved_bytes,
            alloc.stats().reserved_bytes);  // only the default pool holds memory

  // A block whose free is still pending on its stream stays cached.
  Gate gate;
  launch_gate(*s, gate);
  live = DataPtr();
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0 + i64(kMiB))
      << "released a block a pending kernel may still use";
  gate.release();
  s->synchronize();
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0);
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_P(RuntimeAllocator, MemoryLimitRaisesAnErrorNamingTheSize) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  LimitGuard guard{alloc};
  EXPECT_THROW(alloc.set_memory_limit(-1), sinkgraph::Error);

  const std::int64_t reserved0 = alloc.stats().reserved_bytes;
  alloc.set_memory_limit(reserved0 + i64(4 * kMiB));
  DataPtr fits = alloc.allocate(kMiB, *s);
  ASSERT_NE(fits.get(), nullptr);

  constexpr std::size_t kTooBig = 8 * kMiB + 12345;
  try {
    DataPtr too_big = alloc.allocate(kTooBig, *s);
    ADD_FAILURE() << "an allocation above the limit succeeded";
  } catch (const sinkgraph::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(std::to_string(kTooBig)), std::string::npos) << message;
    EXPECT_NE(message.find("reserved"), std::string::npos) << message;
  }

  // Cached blocks are given back before the limit is declared hit.
  fits = DataPtr();
  DataPtr cached = alloc.allocate(3 * kMiB + kMiB / 2, *s);
  cached = DataPtr();
  DataPtr needs_the_cache = alloc.allocate(kMiB + kMiB / 2, *s);
  EXPECT_NE(needs_the_cache.get(), nullptr);
  needs_the_cache = DataPtr();

  // Still usable; lifting the limit allows the large request.
  alloc.set_memory_limit(0);
  DataPtr big = alloc.allocate(kTooBig, *s);
  EXPECT_NE(big.get(), nullptr);
  EXPECT_EQ(big.size(), kTooBig);
}

TEST_P(RuntimeAllocator, PoolScopeRoutesAStreamToAPrivatePool) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  auto other = make_stream();
  std::shared_ptr<sinkgraph::MemPool> pool = alloc.create_pool("graph_pool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->name(), "graph_pool");
  EXPECT_NE(pool->id(), alloc.default_pool().id());

  const AllocatorStats default0 = alloc.default_pool().stats();
  {
    sinkgraph::PoolScope scope(*s, pool);
    DataPtr in_pool = alloc.allocate(kMiB, *s);
    EXPECT_EQ(in_pool.pool(), pool.get());
    EXPECT_EQ(pool->stats().num_allocs, 1);
    EXPECT_EQ(pool->stats().allocated_bytes, i64(kMiB));
    EXPECT_EQ(alloc.default_pool().stats().num_allocs, default0.num_allocs);

    // Another stream is not routed.
    DataPtr elsewhere = alloc.allocate(kMiB, *other);
    EXPECT_EQ(elsewhere.pool(), &alloc.default_pool());
    EXPECT_EQ(pool->stats().num_allocs, 1);
    EXPECT_EQ(alloc.default_pool().stats().num_allocs, default0.num_allocs + 1);
  }
  // After the scope the stream allocates from the default pool again.
  DataPtr back = alloc.allocate(kMiB, *s);
  EXPECT_EQ(back.pool(), &alloc.default_pool());
  EXPECT_EQ(pool->stats().num_allocs, 1);
  EXPECT_EQ(alloc.default_pool().stats().num_allocs, default0.num_allocs + 2);

  // The freed pool block stays in the pool: empty_cache leaves it alone,
  // release_cached on the pool returns it.
  EXPECT_EQ(pool->stats().allocated_bytes, 0);
  EXPECT_EQ(pool->stats().reserved_bytes, i64(kMiB));
  alloc.empty_cache();
  EXPECT_EQ(pool->stats().reserved_bytes, i64(kMiB));
  pool->release_cached();
  EXPECT_EQ(pool->stats().reserved_bytes, 0);
  EXPECT_THROW({ sinkgraph::PoolScope bad(*s, nullptr); }, sinkgraph::Error);
}

TEST_P(RuntimeAllocator, PoolMemoryStaysReservedWhileAnAllocationFromItLives) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  const std::int64_t reserved0 = alloc.stats().reserved_bytes;
  DataPtr keep;
  {
    auto pool = alloc.create_pool("short_lived");
    sinkgraph::PoolScope scope(*s, pool);
    keep = alloc.allocate(2 * kMiB, *s);
    DataPtr cached = alloc.allocate(kMiB, *s);  // freed into the pool's cache
  }
  // The pool handle and the scope are gone; the allocation keeps the pool alive.
  ASSERT_NE(keep.pool(), nullptr);
  EXPECT_NE(keep.pool(), &alloc.default_pool());
  EXPECT_EQ(keep.pool()->stats().reserved_bytes, i64(3 * kMiB));
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0 + i64(3 * kMiB));
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0 + i64(3 * kMiB));
  EXPECT_GE(alloc.stats().allocated_bytes, i64(2 * kMiB));

  keep = DataPtr();  // the last reference: the pool returns all its memory
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved0);
}

TEST_P(RuntimeAllocator, ConcurrentAllocationsFromManyThreads) {
  sinkgraph::Allocator& alloc = allocator();
  const AllocatorStats s0 = alloc.stats();
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stream = make_stream();
      std::vector<DataPtr> held;
      for (int i = 0; i < kRounds; ++i) {
        held.push_back(alloc.allocate(static_cast<std::size_t>(512 * (1 + (i + t) % 7)), *stream));
        if (held.size() > 4) held.erase(held.begin());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const AllocatorStats st = alloc.stats();
  EXPECT_EQ(st.num_allocs, s0.num_allocs + kThreads * kRounds);
  EXPECT_EQ(st.num_frees, s0.num_frees + kThreads * kRounds);
  EXPECT_EQ(st.allocated_bytes, s0.allocated_bytes);
}

TEST_P(RuntimeAllocator, RestoreLendsBlocksHeldSinceTheCheckpointToCapturesOnly) {
  sinkgraph::Allocator& alloc = allocator();
  auto s = make_stream();
  auto pool = alloc.create_pool("checkpointed");
  sinkgraph::PoolScope scope(*s, pool);
  DataPtr before = alloc.allocate(kKiB, *s);  // held at the checkpoint: never lent
  const sinkgraph::MemPool::Checkpoint cp = pool->checkpoint();
  EXPECT_EQ(cp.held_blocks(), 1U);
  DataPtr first = alloc.allocate(4 * kKiB, *s);  // "graph A's output"
  const std::int64_t reserved = pool->stats().reserved_bytes;
  pool->restore(cp);

  // Outside a capture nothing is borrowed: a fresh block.
  DataPtr plain = alloc.allocate(4 * kKiB, *s);
  EXPECT_NE(plain.get(), first.get());
  EXPECT_EQ(pool->stats().reserved_bytes, reserved + i64(4 * kKiB));

  // A capture borrows `first` (and never `before`): no new memory.
  s->begin_capture(pool);
  DataPtr borrowed = alloc.allocate(4 * kKiB, *s);
  DataPtr small = alloc.allocate(kKiB, *s);
  (void)s->end_capture();
  sinkgraph::PoolScope after_capture(*s, pool);  // end_capture() ended the routing
  EXPECT_EQ(borrowed.get(), first.get());
  EXPECT_NE(small.get(), before.get());
  EXPECT_EQ(pool->borrowed_bytes(), i64(4 * kKiB));
  // A lent block counts once in allocated bytes.
  EXPECT_EQ(pool->stats().allocated_bytes, i64(kKiB + 4 * kKiB + 4 * kKiB + kKiB));

  // The owner lets go: the borrower still holds it, nothing is freed or reused.
  void* const lent = first.get();
  first = DataPtr();
  EXPECT_EQ(pool->borrowed_bytes(), 0);
  EXPECT_EQ(pool->stats().allocated_bytes, i64(kKiB + 4 * kKiB + 4 * kKiB + kKiB));
  DataPtr other = alloc.allocate(4 * kKiB, *s);
  EXPECT_NE(other.get(), lent);
  // The last holder lets go: now it is an ordinary free block.
  borrowed = DataPtr();
  DataPtr again = alloc.allocate(4 * kKiB, *s);
  EXPECT_EQ(again.get(), lent);

  // A checkpoint restores only the pool it was taken of.
  auto stranger = alloc.create_pool("stranger");
  try {
    stranger->restore(cp);
    ADD_FAILURE() << "restoring another pool's checkpoint must raise";
  } catch (const sinkgraph::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stranger"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(runtime, RuntimeAllocator,
                         testing::ValuesIn(sinkgraph::available_device_types()),
                         [](const testing::TestParamInfo<DeviceType>& param) {
                           return std::string(sinkgraph::device_type_name(param.param));
                         });

}  // namespace

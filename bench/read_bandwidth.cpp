#include "read_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace sinkgraph::bench {
namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;

// Eight independent accumulators: the loop vectorizes (integer sums may be
// reordered) and no single add chain limits the rate.
std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t a[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t k = 0; k < 8; ++k) a[k] += p[i + k];
  }
  for (; i < n; ++i) a[0] += p[i];
  std::uint64_t s = 0;
  for (const std::uint64_t v : a) s += v;
  return s;
}

// A reusable spinning barrier for `n` threads (sense reversal). Spinning
// wakes in well under a microsecond; parking could add hundreds of
// microseconds on a VM. It yields, so more threads than cores still progress.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n), left_(n) {}
  void arrive_and_wait() {
    const int phase = phase_.load(std::memory_order_acquire);
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      left_.store(n_, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
      return;
    }
    for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
      if (spins % 64 == 63) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> left_;
  std::atomic<int> phase_{0};
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

ReadBuffer::ReadBuffer(std::size_t bytes, bool huge_pages) {
  num_words_ = std::max<std::size_t>(bytes / sizeof(std::uint64_t), 1);
  const std::size_t need = num_words_ * sizeof(std::uint64_t);
  huge_pages_ = huge_pages && need >= kHuge;
  const std::size_t align = huge_pages_ ? kHuge : 64;
  mapped_bytes_ = (need + align - 1) / align * align;
  void* p = std::aligned_alloc(align, mapped_bytes_);
  if (p == nullptr) throw std::bad_alloc();
  if (huge_pages_) (void)madvise(p, mapped_bytes_, MADV_HUGEPAGE);
  words_ = static_cast<std::uint64_t*>(p);
  // Touch every page (and give the words values the sum depends on).
  for (std::size_t i = 0; i < num_words_; ++i) words_[i] = i * 0x9e3779b97f4a7c15ULL;
}

ReadBuffer::~ReadBuffer() { std::free(words_); }

BandwidthResult measure_read_bandwidth(const ReadBuffer& buffer, int threads, int reps) {
  if (threads < 1) throw std::invalid_argument("read bandwidth: threads must be >= 1");
  if (reps < 1) throw std::invalid_argument("read bandwidth: reps must be >= 1");
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<std::size_t>(threads);
  // Contiguous slices, 64-byte (8-word) aligned boundaries.
  std::vector<std::size_t> begin(n + 1);
  for (std::size_t t = 0; t <= n; ++t) {
    begin[t] = std::min(buffer.num_words(), (buffer.num_words() * t / n) / 8 * 8);
  }
  begin[n] = buffer.num_words();
  std::vector<std::uint64_t> sums(n * 8);  // one cache line per thread
  SpinBarrier start(threads), done(threads);
  const auto work = [&](std::size_t t, int rep_count) {
    for (int r = 0; r < rep_count; ++r) {
      start.arrive_and_wait();
      sums[t * 8] += sum_words(buffer.words() + begin[t], begin[t + 1] - begin[t]);
      done.arrive_and_wait();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work, t, reps);
  BandwidthResult result;
  result.threads = threads;
  result.bytes = buffer.bytes();
  for (int r = 0; r < reps; ++r) {
    start.arrive_and_wait();
    const auto t0 = Clock::now();
    sums[0] += sum_words(buffer.words() + begin[0], begin[1] - begin[0]);
    done.arrive_and_wait();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    result.gb_per_s.push_back(static_cast<double>(buffer.bytes()) / seconds / 1e9);
  }
  for (std::thread& t : pool) t.join();
  for (std::size_t t = 0; t < n; ++t) result.checksum += sums[t * 8];
  result.median_gb_per_s = median_of(result.gb_per_s);
  result.min_gb_per_s = *std::min_element(result.gb_per_s.begin(), result.gb_per_s.end());
  result.max_gb_per_s = *std::max_element(result.gb_per_s.begin(), result.gb_per_s.end());
  return result;
}

std::size_t last_level_cache_bytes() {
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = ::sysconf(name);
    if (v > 0) return static_cast<std::size_t>(v);
  }
  return 0;
}

BandwidthResult measure_single_core_read_bandwidth(std::size_t bytes, int reps) {
  const ReadBuffer buffer(bytes);
  return measure_read_bandwidth(buffer, 1, reps);
}

}  // namespace sinkgraph::bench

#pragma once
// Memory read bandwidth, for bench_bandwidth and for bench_e2e's bandwidth
// floor (docs/performance.md, "Read bandwidth and the bandwidth floor").
//
// A buffer much larger than the last-level cache is written once (so every
// page is really mapped: reading untouched anonymous memory reads the shared
// zero page and looks impossibly fast), then summed as 64-bit words by T
// threads, each over its own contiguous slice. The threads start before the
// clock does: every repetition begins at a spinning barrier, and the time is
// from the barrier's release to the last thread's arrival at the closing
// barrier, as seen by the calling thread (which sums slice 0 itself, so T
// threads never compete with a T+1th spinning one). The sums are returned, so
// the compiler cannot drop the reads.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sinkgraph::bench {

// Bytes of memory, written once on construction. Large buffers are 2 MiB
// aligned and advised for transparent huge pages (MADV_HUGEPAGE), as the
// device allocator does for large blocks (Note [Huge pages for large blocks]
// in src/runtime/cpu/cpu_device.cpp), so the floor is measured with the same
// page size as the weights it bounds.
class ReadBuffer {
 public:
  explicit ReadBuffer(std::size_t bytes, bool huge_pages = true);
  ~ReadBuffer();
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;

  [[nodiscard]] const std::uint64_t* words() const { return words_; }
  [[nodiscard]] std::size_t num_words() const { return num_words_; }
  [[nodiscard]] std::size_t bytes() const { return num_words_ * sizeof(std::uint64_t); }
  [[nodiscard]] bool huge_pages() const { return huge_pages_; }

 private:
  std::uint64_t* words_ = nullptr;
  std::size_t num_words_ = 0;
  std::size_t mapped_bytes_ = 0;
  bool huge_pages_ = false;
};

struct BandwidthResult {
  int threads = 0;
  std::size_t bytes = 0;         // read per repetition
  std::vector<double> gb_per_s;  // one per repetition, 1e9 bytes per second
  double median_gb_per_s = 0;
  double min_gb_per_s = 0;
  double max_gb_per_s = 0;
  std::uint64_t checksum = 0;  // every word read, summed (mod 2^64): keeps the reads
};

// Sums `buffer` with `threads` threads `reps` times.
BandwidthResult measure_read_bandwidth(const ReadBuffer& buffer, int threads, int reps);

// The largest cache the C library reports (L3, else L2), 0 when unknown. A
// VM may report its host's whole L3; the buffers should exceed it anyway.
std::size_t last_level_cache_bytes();

// One thread over a fresh buffer of `bytes`: bench_e2e's single-core figure.
BandwidthResult measure_single_core_read_bandwidth(std::size_t bytes, int reps);

}  // namespace sinkgraph::bench

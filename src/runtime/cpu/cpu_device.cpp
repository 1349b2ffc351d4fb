#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

#include "../backends.h"
#include "compute_pool.h"
#include "cpu_stream.h"

namespace sinkgraph::cpu_device {

namespace {
class CpuDevice final : public Device {
 public:
  CpuDevice() : Device(DeviceType::cpu, 0) { init_allocator(); }

  std::unique_ptr<Stream> create_stream(const StreamOptions& options) override {
    return std::make_unique<CpuStream>(*this, options, pool_);
  }
  // Note [Huge pages for large blocks]
  // Blocks of 2 MiB and more (weights, KV caches) are 2 MiB-aligned and
  // advised as transparent huge pages (Debian's kernels default THP to
  // "madvise": nothing gets them unasked). A decode step streams every
  // weight once; with 4 KiB pages each page read costs a TLB miss. Recent
  // PyTorch releases offer the same, opt-in (THP_MEM_ALLOC_ENABLE). The
  // advice is a hint: where THP is off it changes nothing.
  void* raw_alloc(std::size_t bytes) override {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    if (bytes >= kHuge) {
      void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
      if (p != nullptr) (void)madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
      return p;
    }
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* ptr) noexcept override { std::free(ptr); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }

 private:
  // Shared by every stream of the device; idle helpers spin as long as an
  // idle stream worker does (StreamOptions::spin_us).
  ComputePool pool_{StreamOptions{}.spin_us};
};
}  // namespace

std::unique_ptr<Device> make_device() { return std::make_unique<CpuDevice>(); }

}  // namespace sinkgraph::cpu_device

#include <cstdlib>
#include <cstring>

#include "../backends.h"
#include "cpu_stream.h"

namespace sinkgraph::cpu_device {

namespace {
class CpuDevice final : public Device {
 public:
  CpuDevice() : Device(DeviceType::cpu, 0) { init_allocator(); }

  std::unique_ptr<Stream> create_stream(const StreamOptions& options) override {
    return std::make_unique<CpuStream>(*this, options);
  }
  void* raw_alloc(std::size_t bytes) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  void raw_free(void* ptr) noexcept override { std::free(ptr); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
};
}  // namespace

std::unique_ptr<Device> make_device() { return std::make_unique<CpuDevice>(); }

}  // namespace sinkgraph::cpu_device

#pragma once
// Devices and the device registry (ggml-backend's split: device, stream,
// buffer and registry are separate interfaces). Backends register here; which
// ones exist is decided in CMake (src/runtime/cuda/no_cuda.cpp when CUDA is off).
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sinkgraph/export.h"

namespace sinkgraph {

class Allocator;
class Stream;
struct StreamOptions;

enum class DeviceType : std::uint8_t { cpu, cuda };
inline constexpr int kNumDeviceTypes = 2;
SG_API const char* device_type_name(DeviceType type);

class SG_API Device {
 public:
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  virtual ~Device();

  [[nodiscard]] DeviceType type() const { return type_; }
  [[nodiscard]] int index() const { return index_; }
  [[nodiscard]] std::string name() const;

  // A new stream with its own in-order queue.
  virtual std::unique_ptr<Stream> create_stream(const StreamOptions& options) = 0;
  std::unique_ptr<Stream> create_stream();
  // The stream a host thread uses until it sets another (see current_stream()).
  Stream& default_stream();
  Allocator& allocator() { return *allocator_; }

  // Raw device memory; the allocator is the only intended caller.
  virtual void* raw_alloc(std::size_t bytes) = 0;
  virtual void raw_free(void* ptr) noexcept = 0;
  // Synchronous copies between host memory and device memory.
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;

 protected:
  Device(DeviceType type, int index);
  void init_allocator();  // called by the backend's constructor

 private:
  DeviceType type_;
  int index_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Stream> default_stream_;
  std::atomic<Stream*> default_ptr_{nullptr};  // fast path once created
  std::once_flag default_once_;
};

// The registry: the CPU device always exists; others when built and present.
SG_API bool device_available(DeviceType type, int index = 0);
SG_API Device& get_device(DeviceType type, int index = 0);
SG_API std::vector<DeviceType> available_device_types();
inline Device& cpu() { return get_device(DeviceType::cpu, 0); }

// Intra-op threads: the compute threads a CPU kernel may split its work
// across, the stream's worker included (Note [Compute threads] in
// src/runtime/cpu/compute_pool.h). The default is the environment variable
// SINKGRAPH_NUM_THREADS when it holds a whole number from 1 to 1024, else
// available_cores(). set_num_threads() throws sinkgraph::Error outside 1..1024.
SG_API void set_num_threads(int threads);
SG_API int num_threads();
// The cores this process may run on (its CPU affinity mask), at least 1.
SG_API int available_cores();
inline constexpr int kMaxThreads = 1024;

}  // namespace sinkgraph

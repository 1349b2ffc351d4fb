#include "sinkgraph/device.h"

#include <array>
#include <atomic>

#include "backends.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/error.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

namespace {
std::atomic<int> g_num_threads{1};

struct Registry {
  std::unique_ptr<Device> cpu = cpu_device::make_device();
  std::vector<std::unique_ptr<Device>> cuda;
  Registry() {
    for (int i = 0; i < cuda_device::device_count(); ++i)
      cuda.push_back(cuda_device::make_device(i));
  }
};

Registry& registry() {
  // Devices live for the whole process (never destroyed: tensors in static
  // storage may still return memory to them at exit).
  static auto* r = new Registry();
  return *r;
}
}  // namespace

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
  }
  return "?";
}

Device::Device(DeviceType type, int index) : type_(type), index_(index) {}

Device::~Device() = default;

void Device::init_allocator() { allocator_ = std::make_unique<Allocator>(*this); }

std::string Device::name() const {
  return std::string(device_type_name(type_)) + ":" + std::to_string(index_);
}

std::unique_ptr<Stream> Device::create_stream() { return create_stream(StreamOptions{}); }

Stream& Device::default_stream() {
  if (Stream* s = default_ptr_.load(std::memory_order_acquire)) return *s;
  std::call_once(default_once_, [this] {
    StreamOptions options;
    options.name = "default";
    default_stream_ = create_stream(options);
    default_ptr_.store(default_stream_.get(), std::memory_order_release);
  });
  return *default_stream_;
}

bool device_available(DeviceType type, int index) {
  if (index < 0) return false;
  switch (type) {
    case DeviceType::cpu:
      return index == 0;
    case DeviceType::cuda:
      return index < static_cast<int>(registry().cuda.size());
  }
  return false;
}

Device& get_device(DeviceType type, int index) {
  SG_CHECK(
      device_available(type, index), "device ", device_type_name(type), ":", index,
      " is not available",
      type == DeviceType::cuda ? " (sinkgraph was built without CUDA or no GPU is present)" : "");
  Registry& r = registry();
  return type == DeviceType::cpu ? *r.cpu : *r.cuda[static_cast<std::size_t>(index)];
}

std::vector<DeviceType> available_device_types() {
  std::vector<DeviceType> out{DeviceType::cpu};
  if (!registry().cuda.empty()) out.push_back(DeviceType::cuda);
  return out;
}

void set_num_threads(int threads) {
  SG_CHECK(threads >= 1, "set_num_threads: expected at least 1 thread, got ", threads);
  g_num_threads.store(threads, std::memory_order_relaxed);
}

int num_threads() { return g_num_threads.load(std::memory_order_relaxed); }

}  // namespace sinkgraph

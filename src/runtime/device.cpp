#include "sinkgraph/device.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <sched.h>
#include <string>
#include <thread>

#include "backends.h"
#include "sinkgraph/allocator.h"
#include "sinkgraph/error.h"
#include "sinkgraph/log.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

namespace {
std::atomic<int> g_num_threads{0};  // 0: not set, use default_threads()

// SINKGRAPH_NUM_THREADS, read once; a value that is not a whole number in
// 1..kMaxThreads is reported and ignored.
int default_threads() {
  static const int threads = [] {
    const char* env = std::getenv("SINKGRAPH_NUM_THREADS");
    if (env == nullptr || *env == '\0') return available_cores();
    const std::string_view text(env);
    int value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxThreads) {
      log(LogLevel::warn, "SINKGRAPH_NUM_THREADS=\"" + std::string(text) +
                              "\" is not a thread count from 1 to " + std::to_string(kMaxThreads) +
                              "; using the " + std::to_string(available_cores()) +
                              " available cores");
      return available_cores();
    }
    return value;
  }();
  return threads;
}

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
  SG_CHECK(threads >= 1 && threads <= kMaxThreads, "set_num_threads: expected 1 to ", kMaxThreads,
           " threads, got ", threads);
  g_num_threads.store(threads, std::memory_order_relaxed);
}

int num_threads() {
  const int set = g_num_threads.load(std::memory_order_relaxed);
  return set > 0 ? set : default_threads();
}

int available_cores() {
  static const int cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return cores;
}

}  // namespace sinkgraph

#pragma once
// Tensor: a strided view of device memory. Copies share storage; views (slice,
// narrow, transpose, permute, view/reshape of contiguous data) share storage.
// Every method that touches data goes through the device's streams: creating a
// tensor from host values enqueues the copy; reading values on the host
// synchronizes the current stream first (and so raises sticky kernel errors).
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sinkgraph/allocator.h"
#include "sinkgraph/device.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/export.h"
#include "sinkgraph/kernel_abi.h"
#include "sinkgraph/shape.h"

namespace sinkgraph {

class SG_API Storage {
 public:
  Storage(Device& device, DataPtr data) : device_(device), data_(std::move(data)) {}
  [[nodiscard]] Device& device() const { return device_; }
  [[nodiscard]] void* data() const { return data_.get(); }
  [[nodiscard]] std::size_t nbytes() const { return data_.size(); }
  DataPtr& data_ptr() { return data_; }
  // Swaps in new memory (see Tensor::relocate_).
  void replace(DataPtr data) { data_ = std::move(data); }

  // Note [Version counters]
  // Bumped by every in-place operator that writes this storage (through any
  // view), as torch.Tensor._version: a captured graph that folded a frozen
  // parameter's values checks it on every call and refuses a changed one.
  [[nodiscard]] std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void bump_version() { version_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  Device& device_;
  DataPtr data_;
  std::atomic<std::uint64_t> version_{0};
};

// Tensors produced while tracing carry a TraceInfo instead of storage: their
// shape may be symbolic and their values do not exist (see src/trace/).
class SG_API TraceInfo {
 public:
  virtual ~TraceInfo() = default;
  SymShape shape;
  bool contiguous = true;  // known to be laid out contiguously at run time
  Device* device = nullptr;
  // Names the traced value for error messages ("%h = matmul(%x, %w)").
  [[nodiscard]] virtual std::string describe() const = 0;
};

// Marks a tensor as an output of a graph replay (Note [Stale outputs] in
// compiler.h): valid while its pool's generation is still `generation`.
struct OutputStamp {
  std::shared_ptr<MemPool> pool;
  std::string origin;  // "output 0 of graph @decode"
};

class SG_API Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // A new contiguous tensor with uninitialized contents, allocated for the
  // current stream of `device`.
  static Tensor empty(const Shape& shape, DType dtype, Device& device = cpu());
  // A new tensor holding `values` (converted from f32 for f16/bf16).
  static Tensor from_floats(std::span<const float> values, const Shape& shape,
                            DType dtype = DType::f32, Device& device = cpu());
  static Tensor from_ints(std::span<const std::int64_t> values, const Shape& shape,
                          DType dtype = DType::i64, Device& device = cpu());
  static Tensor from_floats(std::initializer_list<float> values, const Shape& shape,
                            DType dtype = DType::f32, Device& device = cpu()) {
    return from_floats(std::span<const float>(values.begin(), values.size()), shape, dtype, device);
  }
  static Tensor from_ints(std::initializer_list<std::int64_t> values, const Shape& shape,
                          DType dtype = DType::i64, Device& device = cpu()) {
    return from_ints(std::span<const std::int64_t>(values.begin(), values.size()), shape, dtype,
                     device);
  }
  // A tensor over existing storage (views).
  Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Strides& strides,
         std::int64_t offset);

  // A traced tensor (no storage); `dtype` as the graph value's.
  Tensor(std::shared_ptr<TraceInfo> trace, DType dtype);

  [[nodiscard]] bool defined() const { return storage_ != nullptr || trace_ != nullptr; }
  [[nodiscard]] bool is_traced() const { return trace_ != nullptr; }
  [[nodiscard]] const std::shared_ptr<TraceInfo>& trace() const { return trace_; }
  [[nodiscard]] DType dtype() const { return dtype_; }
  // Concrete shape; on a traced tensor with a symbolic dim, throws (use sym_shape()).
  [[nodiscard]] const Shape& shape() const {
    if (symbolic_) [[unlikely]]
      throw_symbolic_shape();
    return shape_;
  }
  [[nodiscard]] SymShape sym_shape() const;
  [[nodiscard]] SymInt sym_size(int dim) const;
  [[nodiscard]] const Strides& strides() const { return strides_; }
  [[nodiscard]] std::int64_t offset() const { return offset_; }
  [[nodiscard]] int ndim() const { return trace_ ? trace_->shape.size() : shape_.size(); }
  [[nodiscard]] std::int64_t size(int dim) const;  // negative dims count from the end
  [[nodiscard]] std::int64_t numel() const { return sinkgraph::numel(shape()); }
  [[nodiscard]] bool is_contiguous() const;
  [[nodiscard]] Device& device() const;
  [[nodiscard]] const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Address of element 0 of this view (device memory).
  [[nodiscard]] void* data_ptr() const;
  [[nodiscard]] bool shares_storage(const Tensor& other) const {
    return storage_ == other.storage_;
  }
  // The POD description kernels receive (Note [Kernel ABI]).
  [[nodiscard]] TensorArg arg() const;

  // Host reads: synchronize the current stream, then copy out. to_floats()
  // converts any dtype; to_ints() any integral or bool dtype.
  [[nodiscard]] std::vector<float> to_floats() const;
  [[nodiscard]] std::vector<std::int64_t> to_ints() const;
  [[nodiscard]] float item_float() const;
  [[nodiscard]] std::int64_t item_int() const;

  // Views and shape methods (forward to ops::).
  [[nodiscard]] Tensor slice(std::int64_t dim, const SymInt& start, const SymInt& end,
                             std::int64_t step = 1) const;
  [[nodiscard]] Tensor narrow(std::int64_t dim, const SymInt& start, const SymInt& length) const;
  [[nodiscard]] Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  [[nodiscard]] Tensor permute(const std::vector<std::int64_t>& dims) const;
  [[nodiscard]] Tensor view(const SymShape& shape) const;
  [[nodiscard]] Tensor reshape(const SymShape& shape) const;
  [[nodiscard]] Tensor contiguous() const;

  [[nodiscard]] std::string str() const;  // "f32[2,3] on cpu:0"

  // Moves this tensor's storage to a fresh allocation, copying the data
  // (stream-ordered); every tensor sharing the storage follows. Models a
  // weight that is reloaded or defragmented: a captured graph that baked the
  // old address must notice (recapture, or an error under frozen_parameter).
  void relocate_();

  // Replay outputs: stamped with their pool generation; every use checks it.
  void set_stamp(std::shared_ptr<const OutputStamp> stamp, std::uint64_t generation) {
    stamp_ = std::move(stamp);
    stamp_generation_ = generation;
  }
  [[nodiscard]] bool is_stamped() const { return stamp_ != nullptr; }
  // The pool and replay generation of a replay output (null / 0 otherwise).
  [[nodiscard]] const MemPool* stamp_pool() const { return stamp_ ? stamp_->pool.get() : nullptr; }
  [[nodiscard]] std::uint64_t stamp_generation() const { return stamp_generation_; }
  // Throws sinkgraph::Error when a later replay overwrote this output; `use` says how it was used.
  void check_not_stale(const char* use) const {
    if (stamp_ != nullptr && stamp_->pool->generation() != stamp_generation_) [[unlikely]] {
      throw_stale(use);
    }
  }
  // A view of this tensor's storage keeps its stamp.
  void copy_stamp_from(const Tensor& base) {
    stamp_ = base.stamp_;
    stamp_generation_ = base.stamp_generation_;
  }
  // Holds off the next replay into the output's pool for the duration of a use
  // (Note [Output uses] in allocator.h); throws the stale-output error when a
  // later replay was already launched. Returns the pool to release with
  // MemPool::end_use(), or null for an unstamped tensor.
  // `writer`, when given, receives the fence of the replay that wrote it.
  [[nodiscard]] MemPool* begin_output_use(const char* use, ReplayFence* writer = nullptr) const {
    if (stamp_ == nullptr) return nullptr;
    if (!stamp_->pool->begin_use(stamp_generation_, writer)) [[unlikely]] {
      throw_stale(use);
    }
    return stamp_->pool.get();
  }

 private:
  [[noreturn]] void throw_symbolic_shape() const;
  [[noreturn]] void throw_stale(const char* use) const;
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  std::shared_ptr<TraceInfo> trace_;
  bool symbolic_ = false;  // traced with a symbolic dim: shape_ is not valid
  std::shared_ptr<const OutputStamp> stamp_;
  std::uint64_t stamp_generation_ = 0;
};

}  // namespace sinkgraph

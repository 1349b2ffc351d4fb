#pragma once
// Note [Kernel ABI]
// A kernel is a plain function over a POD argument block: scalars first, then
// for each tensor its data pointer, sizes, strides (in elements) and offset.
// Outputs are described exactly like inputs, so an output may be a strided
// view into a larger buffer (cat removal and planned offsets need no kernel
// changes). Scalars sit at fixed offsets, which is what lets a captured graph
// patch an updatable scalar (a decode position) in place before each replay.
// A kernel that finds an error only the device can see calls ctx.fail(); the
// error is sticky on the stream and raised at the next synchronize or host
// read, after which the stream works again.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "sinkgraph/dtype.h"
#include "sinkgraph/export.h"
#include "sinkgraph/shape.h"

namespace sinkgraph {

// Plain data: no default member initializers, so building an ArgBlock on the
// eager path costs no zeroing of slots it does not use. Tensor::arg() fills
// every field.
struct TensorArg {
  void* data;  // base of the storage
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[kMaxDims];  // in elements
  std::int64_t offset;             // in elements, from data
  std::int32_t ndim;
  DType dtype;

  template <typename T>
  [[nodiscard]] T* ptr() const {
    return static_cast<T*>(data) + offset;
  }
  [[nodiscard]] std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  [[nodiscard]] bool is_contiguous() const {
    std::int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expected) return false;
      expected *= sizes[i];
    }
    return true;
  }
};

union ScalarArg {
  std::int64_t i;
  double f;
};

inline constexpr int kMaxTensorArgs = 6;
inline constexpr int kMaxScalarArgs = 8;

// Built once per launch on the hot path: the arrays stay uninitialized, and
// only the slots below num_scalars / num_tensors are read or copied.
struct ArgBlock {  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::uint16_t num_tensors = 0;
  std::uint16_t num_scalars = 0;
  ScalarArg scalars[kMaxScalarArgs];
  TensorArg tensors[kMaxTensorArgs];

  // Bytes that carry information: everything up to the last used tensor.
  [[nodiscard]] std::size_t used_bytes() const {
    return offsetof(ArgBlock, tensors) + num_tensors * sizeof(TensorArg);
  }
  // Byte offset of scalar slot `i`: where a replay writes an updated value.
  static constexpr std::size_t scalar_offset(int i) {
    return offsetof(ArgBlock, scalars) + static_cast<std::size_t>(i) * sizeof(ScalarArg);
  }
};

class KernelContext;
using KernelFn = void (*)(const ArgBlock& args, KernelContext& ctx);

// What a running kernel may ask of the stream that runs it.
class SG_API KernelContext {
 public:
  virtual ~KernelContext() = default;
  // Records a sticky error (the first one wins) naming the operator.
  virtual void fail(const std::string& message) = 0;
  // Intra-op threads this kernel may use (see set_num_threads()).
  [[nodiscard]] virtual int num_threads() const = 0;
  // Runs fn(arg, part) for every part in [0, parts) on the device's compute
  // threads, the calling thread included, and returns when all are done
  // (Note [Compute threads]). Kernels reach it through parallel_for(). The
  // default runs the parts in order on the calling thread.
  virtual void parallel_run(int parts, void (*fn)(void* arg, int part), void* arg) {
    for (int p = 0; p < parts; ++p) fn(arg, p);
  }
};

}  // namespace sinkgraph

#include "dlpack.h"

#include <cstdint>
#include <cstring>
#include <dlpack/dlpack.h>
#include <memory>
#include <vector>

#include "sinkgraph/allocator.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"

namespace py = pybind11;
namespace sg = sinkgraph;

namespace sinkgraph::python {
namespace {

constexpr const char* kDltensor = "dltensor";
constexpr const char* kUsedDltensor = "used_dltensor";
// DLPack 0.8 added kDLBool (6); Debian's header is 0.6. torch 2.x writes and
// reads booleans with this code and 8 bits.
constexpr std::uint8_t kDLBoolCode = 6;

sg::DType dtype_from_dl(const DLDataType& t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return sg::DType::f32;
    if (t.code == kDLFloat && t.bits == 16) return sg::DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return sg::DType::bf16;
    if (t.code == kDLInt && t.bits == 32) return sg::DType::i32;
    if (t.code == kDLInt && t.bits == 64) return sg::DType::i64;
    if (t.code == kDLBoolCode && t.bits == 8) return sg::DType::boolean;
    if (t.code == kDLUInt && t.bits == 8) return sg::DType::u8;
  }
  SG_CHECK(false, "a tensor of DLPack type (code ", static_cast<int>(t.code), ", bits ",
           static_cast<int>(t.bits), ", lanes ", t.lanes,
           ") has no sinkgraph dtype; tensors cross as float32, float16, bfloat16, int32, int64 or "
           "bool");
  return sg::DType::f32;
}

DLDataType dl_from_dtype(sg::DType d) {
  switch (d) {
    case sg::DType::f32:
      return {kDLFloat, 32, 1};
    case sg::DType::f16:
      return {kDLFloat, 16, 1};
    case sg::DType::bf16:
      return {kDLBfloat, 16, 1};
    case sg::DType::i32:
      return {kDLInt, 32, 1};
    case sg::DType::i64:
      return {kDLInt, 64, 1};
    case sg::DType::boolean:
      return {kDLBoolCode, 8, 1};
    case sg::DType::u8:
      return {kDLUInt, 8, 1};
  }
  SG_ASSERT(false, "unknown dtype");
  return {kDLFloat, 32, 1};
}

}  // namespace

// A torch tensor's memory as a sinkgraph tensor, without a copy. The
// DLManagedTensor (which holds a reference to the torch tensor) is released
// when the last sinkgraph storage viewing it dies.
sg::Tensor from_dlpack(py::capsule capsule) {
  SG_CHECK(std::strcmp(capsule.name(), kDltensor) == 0,
           "from_dlpack: the capsule was already consumed (or is not a DLPack tensor)");
  auto* managed = static_cast<DLManagedTensor*>(capsule.get_pointer());
  const DLTensor& t = managed->dl_tensor;
  SG_CHECK(t.device.device_type == kDLCPU,
           "from_dlpack: only CPU tensors cross to the sinkgraph CPU device (device type ",
           static_cast<int>(t.device.device_type), ")");
  SG_CHECK(t.ndim <= sg::kMaxDims, "from_dlpack: a tensor of ", t.ndim,
           " dimensions; sinkgraph tensors have at most ", sg::kMaxDims);
  const sg::DType dtype = dtype_from_dl(t.dtype);
  const auto elem = static_cast<std::int64_t>(sg::dtype_size(dtype));
  sg::Shape shape;
  sg::Strides strides;
  std::int64_t lo = 0;
  std::int64_t hi = 0;  // element extent, relative to the first element
  bool empty = false;
  for (int i = 0; i < t.ndim; ++i) {
    const std::int64_t size = t.shape[i];
    std::int64_t stride = 1;
    if (t.strides != nullptr) {
      stride = t.strides[i];
    } else {
      for (int j = i + 1; j < t.ndim; ++j) stride *= t.shape[j];
    }
    SG_CHECK(size >= 0, "from_dlpack: negative size");
    shape.push_back(size);
    strides.push_back(stride);
    if (size == 0) empty = true;
    if (size > 0) (stride >= 0 ? hi : lo) += (size - 1) * stride;
  }
  SG_CHECK(empty || lo == 0, "from_dlpack: negative strides are not supported");
  SG_CHECK(t.byte_offset % static_cast<std::uint64_t>(elem) == 0,
           "from_dlpack: byte offset not a multiple of the element size");
  auto* base = static_cast<char*>(t.data) + t.byte_offset;
  const auto bytes = static_cast<std::size_t>(empty ? 0 : (hi + 1) * elem);
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  capsule.set_name(kUsedDltensor);
  auto storage = std::make_shared<sg::Storage>(
      sg::cpu(), sg::DataPtr::borrow(base, bytes == 0 ? 1 : bytes, std::move(owner)));
  return {std::move(storage), dtype, shape, strides, 0};
}

namespace {
struct ExportedTensor {
  sg::Tensor tensor;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
};
}  // namespace

// A sinkgraph tensor's memory as a DLPack capsule for torch.from_dlpack: a
// view, kept alive by the capsule. The caller has waited for pending writes.
py::capsule to_dlpack(const sg::Tensor& t) {
  SG_CHECK(t.defined() && !t.is_traced(), "to_dlpack: a traced tensor has no values");
  auto* e = new ExportedTensor{t, {}, {}, {}};
  e->shape.assign(t.shape().begin(), t.shape().end());
  e->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& d = e->managed.dl_tensor;
  d.data = static_cast<char*>(t.storage()->data()) +
           t.offset() * static_cast<std::int64_t>(sg::dtype_size(t.dtype()));
  d.device = {kDLCPU, 0};
  d.ndim = t.ndim();
  d.dtype = dl_from_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) {
    delete static_cast<ExportedTensor*>(m->manager_ctx);
  };
  return py::capsule(&e->managed, kDltensor, [](PyObject* cap) {
    // A capsule nobody consumed still owns the tensor.
    if (PyCapsule_IsValid(cap, kDltensor) != 0) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kDltensor));
      m->deleter(m);
    }
  });
}

}  // namespace sinkgraph::python

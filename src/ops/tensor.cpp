#include "sinkgraph/tensor.h"

#include <cstring>

#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {

namespace {

// Host -> device copy, stream-ordered: the staging buffer travels in the
// argument block and the kernel frees it after copying, so the host never
// writes memory that queued kernels may still read.
void staged_copy_kernel(const ArgBlock& args, KernelContext&) {
  auto* staging = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(args.scalars[0].i));
  const auto bytes = static_cast<std::size_t>(args.scalars[1].i);
  std::memcpy(args.tensors[0].data, staging, bytes);
  delete[] staging;
}

void copy_host_to_device(const Tensor& dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  auto staging =
      std::make_unique_for_overwrite<unsigned char[]>(bytes);  // no zero fill: overwritten next
  std::memcpy(staging.get(), src, bytes);
  ArgBlock block;
  block.num_tensors = 1;
  block.tensors[0] = dst.arg();
  block.tensors[0].data = dst.data_ptr();
  block.tensors[0].offset = 0;
  block.num_scalars = 2;
  block.scalars[0].i = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(staging.get()));
  block.scalars[1].i = static_cast<std::int64_t>(bytes);
  current_stream(dst.device()).launch(staged_copy_kernel, block, "copy_from_host");
  staging.release();  // owned by the queued kernel now  NOLINT(bugprone-unused-return-value)
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
               const Strides& strides, std::int64_t offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      shape_(shape),
      strides_(strides),
      offset_(offset) {
  SG_ASSERT(shape.size() == strides.size());
}

Tensor::Tensor(std::shared_ptr<TraceInfo> trace, DType dtype)
    : dtype_(dtype), trace_(std::move(trace)) {
  SG_ASSERT(trace_ != nullptr);
  for (const SymInt& d : trace_->shape) {
    if (d.is_symbolic()) {
      symbolic_ = true;
      break;
    }
  }
  if (!symbolic_) shape_ = to_concrete(trace_->shape);
  strides_ = contiguous_strides(shape_);
}

namespace {
[[noreturn]] void throw_traced(const Tensor& t, const char* what) {
  SG_CHECK(false, what, ": the tensor ", t.trace()->describe(),
           " has no values while tracing. Reading tensor data on the host (data-dependent "
           "control flow) is not supported: the function must trace as one graph");
  std::abort();
}
}  // namespace

void Tensor::throw_stale(const char* use) const {
  const std::uint64_t now = stamp_->pool->generation();
  SG_CHECK(false, use, ": the tensor is ", stamp_->origin, " from replay ", stamp_generation_,
           " of pool '", stamp_->pool->name(), "', and replay ", now, " (",
           stamp_->pool->last_writer(),
           ") has overwritten its memory since. Replay outputs live in the graph's pool until the "
           "next replay: set clone_output=true, or copy the output before replaying again");
  std::abort();
}

void Tensor::throw_symbolic_shape() const {
  SG_CHECK(false, "shape(): the tensor ", trace_->describe(), " has symbolic shape ",
           shape_str(trace_->shape), " while tracing; use sym_shape()");
  std::abort();
}

SymShape Tensor::sym_shape() const { return trace_ ? trace_->shape : to_sym(shape_); }

SymInt Tensor::sym_size(int dim) const {
  const int d = wrap_dim(dim, ndim(), "sym_size");
  return trace_ ? trace_->shape[d] : SymInt(shape_[d]);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device& device) {
  for (int i = 0; i < shape.size(); ++i) {
    SG_CHECK(shape[i] >= 0, "empty: size ", shape[i], " at dimension ", i, " of shape ",
             shape_str(shape), " is negative; expected sizes >= 0");
  }
  const auto bytes = static_cast<std::size_t>(sinkgraph::numel(shape)) * dtype_size(dtype);
  DataPtr data = device.allocator().allocate(bytes, current_stream(device));
  auto storage = std::make_shared<Storage>(device, std::move(data));
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor Tensor::from_floats(std::span<const float> values, const Shape& shape, DType dtype,
                           Device& device) {
  SG_CHECK(is_floating(dtype), "from_floats: dtype ", dtype_name(dtype),
           " is not a floating dtype");
  SG_CHECK(static_cast<std::int64_t>(values.size()) == sinkgraph::numel(shape),
           "from_floats: ", values.size(), " values do not fill shape ", shape_str(shape), " (",
           sinkgraph::numel(shape), " elements)");
  Tensor t = empty(shape, dtype, device);
  if (dtype == DType::f32) {
    copy_host_to_device(t, values.data(), values.size_bytes());
  } else {
    std::vector<std::uint16_t> half(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      half[i] = dtype == DType::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    }
    copy_host_to_device(t, half.data(), half.size() * sizeof(std::uint16_t));
  }
  return t;
}

Tensor Tensor::from_ints(std::span<const std::int64_t> values, const Shape& shape, DType dtype,
                         Device& device) {
  SG_CHECK(!is_floating(dtype), "from_ints: dtype ", dtype_name(dtype), " is a floating dtype");
  SG_CHECK(static_cast<std::int64_t>(values.size()) == sinkgraph::numel(shape),
           "from_ints: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype, device);
  if (dtype == DType::i64) {
    copy_host_to_device(t, values.data(), values.size_bytes());
  } else if (dtype == DType::i32) {
    std::vector<std::int32_t> v(values.begin(), values.end());
    copy_host_to_device(t, v.data(), v.size() * sizeof(std::int32_t));
  } else if (dtype == DType::u8) {
    std::vector<std::uint8_t> v(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      SG_CHECK(values[i] >= 0 && values[i] <= 255, "from_ints: value ", values[i], " at index ", i,
               " does not fit u8");
      v[i] = static_cast<std::uint8_t>(values[i]);
    }
    copy_host_to_device(t, v.data(), v.size());
  } else {
    std::vector<std::uint8_t> v(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) v[i] = values[i] != 0 ? 1 : 0;
    copy_host_to_device(t, v.data(), v.size());
  }
  return t;
}

std::int64_t Tensor::size(int dim) const {
  const int d = wrap_dim(dim, ndim(), "size");
  if (trace_) {
    SG_CHECK(!trace_->shape[d].is_symbolic(), "size(", dim, "): dimension ", d, " of ",
             trace_->describe(), " is symbolic (", trace_->shape[d].str(),
             ") while tracing; use sym_size()");
    return trace_->shape[d].value();
  }
  return shape_[d];
}

bool Tensor::is_contiguous() const {
  if (trace_) return trace_->contiguous;
  std::int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Device& Tensor::device() const {
  SG_CHECK(defined(), "device() of an undefined tensor");
  if (trace_) return *trace_->device;
  return storage_->device();
}

void* Tensor::data_ptr() const {
  SG_CHECK(defined(), "data_ptr() of an undefined tensor");
  if (trace_) throw_traced(*this, "data_ptr");
  return static_cast<char*>(storage_->data()) +
         offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

TensorArg Tensor::arg() const {
  if (trace_) throw_traced(*this, "arg");
  TensorArg a{};
  a.data = storage_->data();
  for (int i = 0; i < kMaxDims; ++i) {
    a.sizes[i] = i < ndim() ? shape_[i] : 0;
    a.strides[i] = i < ndim() ? strides_[i] : 0;
  }
  a.offset = offset_;
  a.ndim = ndim();
  a.dtype = dtype_;
  return a;
}

namespace {
// Synchronizes, then returns a contiguous host copy of the bytes of `t`.
std::vector<unsigned char> host_bytes(const Tensor& t) {
  SG_CHECK(t.defined(), "reading an undefined tensor");
  if (t.is_traced()) throw_traced(t, "host read");
  if (any_capture_active()) check_capture_safe(("host read of a " + t.str()).c_str());
  // Note [Output uses]: a replay output is checked and held in one step, so no
  // replay can overwrite it between the check and the copy; the read waits
  // for the replay that wrote it, whatever stream that ran on.
  ReplayFence writer;
  PoolUses use;
  use.add(t.begin_output_use("host read", &writer));
  writer.wait();
  const Tensor c = t.contiguous();
  current_stream(c.device()).synchronize();
  std::vector<unsigned char> bytes(static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()));
  c.device().copy_to_host(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}
}  // namespace

std::vector<float> Tensor::to_floats() const {
  const auto bytes = host_bytes(*this);
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::f32:
        std::memcpy(&out[i], bytes.data() + 4 * i, 4);
        break;
      case DType::f16:
      case DType::bf16: {
        std::uint16_t h = 0;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = dtype_ == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
        break;
      }
      case DType::i32: {
        std::int32_t v = 0;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::i64: {
        std::int64_t v = 0;
        std::memcpy(&v, bytes.data() + 8 * i, 8);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::boolean:
        out[i] = bytes[i] != 0 ? 1.0F : 0.0F;
        break;
      case DType::u8:
        out[i] = static_cast<float>(bytes[i]);
        break;
    }
  }
  return out;
}

std::vector<std::int64_t> Tensor::to_ints() const {
  SG_CHECK(!is_floating(dtype_), "to_ints: tensor ", str(), " is floating; use to_floats()");
  const auto bytes = host_bytes(*this);
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (dtype_ == DType::i64) {
      std::memcpy(&out[i], bytes.data() + 8 * i, 8);
    } else if (dtype_ == DType::i32) {
      std::int32_t v = 0;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      out[i] = v;
    } else if (dtype_ == DType::u8) {
      out[i] = bytes[i];
    } else {
      out[i] = bytes[i] != 0 ? 1 : 0;
    }
  }
  return out;
}

float Tensor::item_float() const {
  SG_CHECK(numel() == 1, "item_float: tensor ", str(), " has ", numel(), " elements; expected 1");
  return to_floats()[0];
}

std::int64_t Tensor::item_int() const {
  SG_CHECK(numel() == 1, "item_int: tensor ", str(), " has ", numel(), " elements; expected 1");
  return to_ints()[0];
}

Tensor Tensor::slice(std::int64_t dim, const SymInt& start, const SymInt& end,
                     std::int64_t step) const {
  return ops::slice(*this, dim, start, end, step);
}
Tensor Tensor::narrow(std::int64_t dim, const SymInt& start, const SymInt& length) const {
  return ops::narrow(*this, dim, start, length);
}
Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  return ops::transpose(*this, dim0, dim1);
}
Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  return ops::permute(*this, dims);
}
Tensor Tensor::view(const SymShape& shape) const { return ops::view(*this, shape); }
Tensor Tensor::reshape(const SymShape& shape) const { return ops::reshape(*this, shape); }
Tensor Tensor::contiguous() const { return ops::contiguous(*this); }

void Tensor::relocate_() {
  SG_CHECK(defined() && !is_traced(), "relocate_: needs a concrete tensor");
  Stream& stream = current_stream(device());
  DataPtr fresh = device().allocator().allocate(storage_->nbytes(), stream);
  ArgBlock block;
  block.num_scalars = 0;
  block.num_tensors = 2;
  const auto whole = [&](void* data) {
    TensorArg a = arg();
    a.data = data;
    a.ndim = 1;
    a.sizes[0] = static_cast<std::int64_t>(storage_->nbytes());
    a.strides[0] = 1;
    a.offset = 0;
    a.dtype = DType::boolean;  // bytes
    return a;
  };
  block.tensors[0] = whole(fresh.get());
  block.tensors[1] = whole(storage_->data());
  static const KernelFn copy =
      OpRegistry::instance().get("copy_").kernels[static_cast<std::size_t>(DeviceType::cpu)];
  stream.launch(copy, block, "relocate_");
  storage_->replace(std::move(fresh));  // the old memory is freed stream-ordered
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  if (trace_) return std::string(dtype_name(dtype_)) + shape_str(trace_->shape) + " (traced)";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().name();
}

}  // namespace sinkgraph

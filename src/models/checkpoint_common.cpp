#include "models/checkpoint_common.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <new>
#include <sys/stat.h>
#include <unistd.h>

#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/stream.h"

namespace sinkgraph::models::detail {

FileBytes::FileBytes(const std::string& path) {
  // Note [Reading untrusted paths] in sinkgraph/files.h: never blocks on a FIFO.
  std::uint64_t size = 0;
  const int fd = sinkgraph::open_regular_file(path, size, "checkpoint");
  struct stat before {};
  (void)::fstat(fd, &before);
  size_ = static_cast<std::size_t>(size);
  try {
    SG_CHECK(size == size_, path, ": ", size, " bytes do not fit in this process's memory");
    data_ = std::make_unique_for_overwrite<std::uint8_t[]>(size_);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    SG_CHECK(false, path, ": cannot hold its ", size, " bytes in memory");
  } catch (...) {
    ::close(fd);
    throw;
  }
  // Note [Checkpoints are read, not mapped] (checkpoint_common.h).
  constexpr std::size_t kChunk = std::size_t{64} << 20;
  std::size_t got = 0;
  int err = 0;
  while (got < size_) {
    const ssize_t n =
        ::pread(fd, data_.get() + got, std::min(kChunk, size_ - got), static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : 0;
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  struct stat after {};
  const bool stat_ok = ::fstat(fd, &after) == 0;
  ::close(fd);
  SG_CHECK(err == 0, path, ": reading the checkpoint failed at byte ", got, ": ",
           std::strerror(err));
  SG_CHECK(got == size_, path, ": changed while loading (it had ", size_,
           " bytes; reading ended at byte ", got, ")");
  SG_CHECK(stat_ok && after.st_size == before.st_size &&
               after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
               after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
           path, ": changed while loading (its size or modification time differs after the read)");
}

std::span<const std::uint8_t> checked_range(std::span<const std::uint8_t> bytes,
                                            std::uint64_t offset, std::uint64_t size,
                                            const std::string& file, const std::string& what) {
  const std::uint64_t have = bytes.size();
  SG_CHECK(offset <= have && size <= have - offset, file, ": ", what, " needs ", size,
           " bytes at offset ", offset, " but the file has ", have, " bytes");
  return bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(size));
}

std::int32_t read_i32(std::span<const std::uint8_t> bytes, std::uint64_t offset,
                      const std::string& file, const std::string& what) {
  const auto raw = checked_range(bytes, offset, 4, file, what);
  std::int32_t v = 0;
  std::memcpy(&v, raw.data(), 4);
  return v;
}

std::uint64_t read_u64(std::span<const std::uint8_t> bytes, std::uint64_t offset,
                       const std::string& file, const std::string& what) {
  const auto raw = checked_range(bytes, offset, 8, file, what);
  std::uint64_t v = 0;
  std::memcpy(&v, raw.data(), 8);
  return v;
}

namespace {
// The index of the first value that is not finite, or n. Exponent bits all
// set means inf or NaN; the loop is branch-free per block so it vectorizes.
std::size_t first_non_finite(const float* v, std::size_t n) {
  constexpr std::size_t kBlock = 256;
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t end = std::min(n, start + kBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = start; i < end; ++i) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, v + i, 4);
      bad |= static_cast<std::uint32_t>((bits & 0x7f800000U) == 0x7f800000U);
    }
    if (bad == 0) continue;
    for (std::size_t i = start; i < end; ++i) {
      if (!std::isfinite(v[i])) return i;
    }
  }
  return n;
}
}  // namespace

// Note [Decoding into the tensor]
// A weight goes from the file's bytes to its tensor in one pass of chunks
// small enough to stay in cache: each chunk is converted to f32 (or copied),
// checked finite, and copied synchronously into the tensor's memory. A
// 4.1 GB checkpoint used to make three more copies on the way (a vector of
// floats, the stream copy's staging buffer, zero-filled first), each in
// freshly faulted pages: 2.7 million page faults and 14 s of system time.
// The synchronous copy needs no queued work to be using the block the
// allocator just handed out, so the stream is drained first (it is idle
// while a model loads: the wait costs nothing).
Tensor decode_tensor(std::span<const std::uint8_t> raw, DType dtype, const Shape& shape,
                     const std::string& name) {
  const auto n = static_cast<std::size_t>(sinkgraph::numel(shape));
  SG_ASSERT(is_floating(dtype) && raw.size() == n * dtype_size(dtype),
            "decode_tensor: ", raw.size(), " bytes for ", n, " values");
  Tensor t = Tensor::empty(shape, DType::f32);
  Device& device = t.device();
  current_stream(device).synchronize();
  auto* dst = static_cast<std::uint8_t*>(t.data_ptr());
  constexpr std::size_t kChunk = 16384;  // values: 64 KiB of f32
  std::vector<float> chunk(std::min(n, kChunk));
  const std::size_t esize = dtype_size(dtype);
  for (std::size_t start = 0; start < n; start += kChunk) {
    const std::size_t m = std::min(kChunk, n - start);
    const std::uint8_t* src = raw.data() + start * esize;
    if (dtype == DType::f32) {
      std::memcpy(chunk.data(), src, m * sizeof(float));
    } else {
      for (std::size_t i = 0; i < m; ++i) {
        std::uint16_t bits = 0;
        std::memcpy(&bits, src + 2 * i, 2);
        chunk[i] = dtype == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
      }
    }
    const std::size_t bad = first_non_finite(chunk.data(), m);
    SG_CHECK(bad == m, name, " holds a value that is not finite (", chunk[bad], ") at index ",
             start + bad, " of ", n, "; a checkpoint's weights must all be finite numbers");
    device.copy_from_host(dst + start * sizeof(float), chunk.data(), m * sizeof(float));
  }
  return t;
}

Tensor bytes_to_tensor(std::span<const std::uint8_t> bytes, const Shape& shape) {
  SG_ASSERT(static_cast<std::size_t>(sinkgraph::numel(shape)) == bytes.size(),
            "bytes_to_tensor: ", bytes.size(), " bytes for ", shape_str(shape));
  Tensor t = Tensor::empty(shape, DType::u8);
  current_stream(t.device()).synchronize();
  t.device().copy_from_host(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::vector<std::uint8_t> tensor_to_bytes(const Tensor& t) {
  SG_ASSERT(t.dtype() == DType::u8 && t.is_contiguous(), "tensor_to_bytes: ", t.str());
  std::vector<std::uint8_t> out(static_cast<std::size_t>(t.numel()));
  current_stream(t.device()).synchronize();
  t.device().copy_to_host(out.data(), t.data_ptr(), out.size());
  return out;
}

void check_unused_tensor(std::span<const std::uint8_t> raw, DType dtype, const std::string& name) {
  SG_ASSERT(is_floating(dtype) && raw.size() % dtype_size(dtype) == 0,
            "check_unused_tensor: ", raw.size(), " bytes of ", dtype_name(dtype));
  const std::size_t size = dtype_size(dtype);
  // The exponent field all ones: infinity or NaN, in each format.
  const std::uint32_t mask = dtype == DType::f32   ? 0x7f800000U
                             : dtype == DType::f16 ? 0x7c00U
                                                   : 0x7f80U;
  const std::size_t n = raw.size() / size;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, raw.data() + i * size, size);  // little-endian host
    if ((bits & mask) != mask) continue;
    const float v = dtype == DType::f32   ? std::bit_cast<float>(bits)
                    : dtype == DType::f16 ? f16_to_f32(static_cast<std::uint16_t>(bits))
                                          : bf16_to_f32(static_cast<std::uint16_t>(bits));
    SG_CHECK(false, name, " holds a value that is not finite (", v, ") at index ", i, " of ", n,
             "; the model does not use this tensor, but a checkpoint's tensors must all be finite "
             "numbers");
  }
}

Tensor decode_tensor_slice(std::span<const std::uint8_t> raw, DType dtype, const Shape& shape,
                           const ShardSlice& slice, const std::string& name) {
  SG_ASSERT((shape.size() == 2 || (shape.size() == 1 && slice.dim == 0)) &&
                (slice.dim == 0 || slice.dim == 1) && slice.start >= 0 && slice.count >= 0 &&
                slice.start + slice.count <= shape[slice.dim],
            "decode_tensor_slice: ", shape_str(shape), " dim ", slice.dim, " [", slice.start, ", +",
            slice.count, ")");
  const auto esize = static_cast<std::size_t>(dtype_size(dtype));
  if (shape.size() == 1) {  // a bias: `count` values from `start`
    return decode_tensor(raw.subspan(static_cast<std::size_t>(slice.start) * esize,
                                     static_cast<std::size_t>(slice.count) * esize),
                         dtype, {slice.count}, name);
  }
  const auto cols = static_cast<std::size_t>(shape[1]);
  const auto start = static_cast<std::size_t>(slice.start);
  const auto count = static_cast<std::size_t>(slice.count);
  if (slice.dim == 0) {  // whole rows: one contiguous range
    return decode_tensor(raw.subspan(start * cols * esize, count * cols * esize), dtype,
                         {slice.count, shape[1]}, name);
  }
  // Columns: a strided gather, `count` values from each row.
  const auto rows = static_cast<std::size_t>(shape[0]);
  std::vector<std::uint8_t> packed(rows * count * esize);
  for (std::size_t r = 0; r < rows; ++r) {
    std::memcpy(packed.data() + r * count * esize, raw.data() + (r * cols + start) * esize,
                count * esize);
  }
  return decode_tensor(packed, dtype, {shape[0], slice.count}, name);
}

void append_encoded(std::vector<std::uint8_t>& out, const Tensor& t, DType dtype) {
  const std::vector<float> values = t.to_floats();
  const std::size_t at = out.size();
  out.resize(at + values.size() * dtype_size(dtype));
  std::uint8_t* dst = out.data() + at;
  if (dtype == DType::f32) {
    if (!values.empty()) std::memcpy(dst, values.data(), values.size() * sizeof(float));
    return;
  }
  SG_ASSERT(dtype == DType::f16 || dtype == DType::bf16, "append_encoded: ", dtype_name(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t bits = dtype == DType::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    std::memcpy(dst + 2 * i, &bits, 2);
  }
}

void append_i32(std::vector<std::uint8_t>& out, std::int32_t value) {
  std::uint8_t raw[4];
  std::memcpy(raw, &value, 4);
  out.insert(out.end(), raw, raw + 4);
}

void write_file(const std::string& path, std::string_view bytes) {
  // Note [Temporary files] in sinkgraph/files.h.
  sinkgraph::write_file_atomically(path, bytes);
}

void write_file(const std::string& path, std::span<const std::uint8_t> bytes) {
  write_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

bool classifier_is_shared(const LlamaWeights& weights) {
  return !weights.output.defined() || weights.output.shares_storage(weights.tok_embeddings);
}

std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

void validate_config(const LlamaConfig& config, const std::string& source) {
  config.validate(source);
  const LlamaConfig& c = config;
  SG_CHECK(c.dim > 0 && c.hidden_dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 &&
               c.vocab_size > 0 && c.max_seq_len > 0 && c.dim % c.n_heads == 0 &&
               c.n_heads % c.n_kv_heads == 0,
           source, ": inconsistent config: ", c.str());
}

}  // namespace sinkgraph::models::detail

namespace sinkgraph::models {

void save_model(const LlamaModel& model, const std::string& path, CheckpointFormat format,
                DType dtype) {
  switch (format) {
    // The formats without quantized types get the dequantized values.
    case CheckpointFormat::llama2c:
      detail::save_llama2c(dequantize_model(model), path, dtype);
      return;
    case CheckpointFormat::safetensors:
      detail::save_safetensors(dequantize_model(model), path, dtype);
      return;
    case CheckpointFormat::hf:
      detail::save_hf_checkpoint(dequantize_model(model), path, dtype, 1);
      return;
    case CheckpointFormat::gguf:
      SG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, path,
               ": GGUF weights are written as f32, f16 or bf16 here (save_gguf also writes ",
               "q8_0 and q4_0), not ", dtype_name(dtype));
      save_gguf(model, path,
                dtype == DType::f32   ? GgufType::f32
                : dtype == DType::f16 ? GgufType::f16
                                      : GgufType::bf16);
      return;
  }
  SG_CHECK(false, path, ": unknown checkpoint format ", static_cast<int>(format));
}

}  // namespace sinkgraph::models

#include "models/checkpoint_common.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sinkgraph/error.h"

namespace sinkgraph::models::detail {

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SG_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SG_CHECK(false, path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    SG_CHECK(false, path, ": not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      SG_CHECK(false, path, ": cannot map ", size_, " bytes: ", std::strerror(err));
    }
    data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
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

Tensor decode_tensor(std::span<const std::uint8_t> raw, DType dtype, const Shape& shape) {
  const auto n = static_cast<std::size_t>(sinkgraph::numel(shape));
  SG_ASSERT(is_floating(dtype) && raw.size() == n * dtype_size(dtype),
            "decode_tensor: ", raw.size(), " bytes for ", n, " values");
  std::vector<float> values(n);
  if (dtype == DType::f32) {
    if (n > 0) std::memcpy(values.data(), raw.data(), n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      values[i] = dtype == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
    }
  }
  return Tensor::from_floats(values, shape, DType::f32);
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
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  SG_CHECK(f != nullptr, path, ": cannot write: ", std::strerror(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    SG_CHECK(false, path, ": cannot write ", bytes.size(), " bytes: ", std::strerror(write_err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    SG_CHECK(false, path, ": cannot replace: ", std::strerror(err));
  }
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
    case CheckpointFormat::llama2c:
      detail::save_llama2c(model, path, dtype);
      return;
    case CheckpointFormat::safetensors:
      detail::save_safetensors(model, path, dtype);
      return;
  }
  SG_CHECK(false, path, ": unknown checkpoint format ", static_cast<int>(format));
}

}  // namespace sinkgraph::models

#pragma once
// Shared pieces of the checkpoint readers and writers (docs/model.md): a
// file read whole into memory, bounds-checked byte ranges, f32/f16/bf16
// decoding into tensors, and a checked file writer.
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sinkgraph/dtype.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/shape.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::models::detail {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are little-endian; a big-endian host needs byte swapping");

// Note [Checkpoints are read, not mapped]
// A checkpoint is read whole into memory of our own (read(2) in chunks), not
// memory-mapped: a mapped file truncated or rewritten while it loads (a
// `cp new old`, a re-export) turned every access past its new end into
// SIGBUS, exit 135. Read, a file that shrinks is a short read, and a file
// whose size or modification time differs after the read than before it is
// one that changed while we read it: both are one error naming the file,
// "changed while loading", exit 2. Once read, the bytes are ours, and the
// model's tensors are decoded from them, so nothing done to the file later
// reaches a running job. The cost: the file's bytes are held in memory next
// to the decoded tensors until the load returns (a mapping shared the page
// cache instead), and each rank of a tensor-parallel job reads every byte,
// not only its slices (docs/robustness.md, "Reading").
class FileBytes {
 public:
  explicit FileBytes(const std::string& path);  // throws sinkgraph::Error naming `path`
  [[nodiscard]] std::span<const std::uint8_t> bytes() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t size_ = 0;
};

// bytes[offset, offset + size) after checking that it lies inside `bytes`;
// otherwise a sinkgraph::Error "<file>: tensor <what> needs <size> bytes at
// offset <offset> but the file has <n> bytes".
std::span<const std::uint8_t> checked_range(std::span<const std::uint8_t> bytes,
                                            std::uint64_t offset, std::uint64_t size,
                                            const std::string& file, const std::string& what);

// Reads little-endian integers at a checked offset.
std::int32_t read_i32(std::span<const std::uint8_t> bytes, std::uint64_t offset,
                      const std::string& file, const std::string& what);
std::uint64_t read_u64(std::span<const std::uint8_t> bytes, std::uint64_t offset,
                       const std::string& file, const std::string& what);

// A new f32 tensor of `shape` decoded from `raw` (little-endian values of
// `dtype`: f32, f16 or bf16); raw.size() must be numel * dtype_size. A value
// that is not finite (NaN, ±inf) is a sinkgraph::Error naming `name` and the
// first such index: a checkpoint with one would load and silently generate
// NaN logits.
Tensor decode_tensor(std::span<const std::uint8_t> raw, DType dtype, const Shape& shape,
                     const std::string& name);

// The same check for a tensor the model does not use (llama2.c's freq_cis
// tables, an old HF checkpoint's rotary inv_freq): nothing is decoded, but a
// NaN or infinity in it is refused as in a weight. A file holding one is
// damaged or was written by something broken, and the docs promise that
// every tensor of a checkpoint is checked.
void check_unused_tensor(std::span<const std::uint8_t> raw, DType dtype, const std::string& name);

// The part of a weight one tensor-parallel rank holds: `count` rows (dim 0)
// or columns (dim 1) from `start`; of a bias (1-D), `count` values.
struct ShardSlice {
  int dim = 0;
  std::int64_t start = 0;
  std::int64_t count = 0;
};
// The slice of layer weight `member` that rank tp.rank holds (Note
// [Tensor-parallel Llama] in llama.cpp; shard_model cuts the same), or
// nullopt when every rank holds it whole (norms, and at tp.size 1). Throws
// sinkgraph::Error when tp does not divide the model.
std::optional<ShardSlice> shard_slice(const LlamaConfig& c, const TensorParallel& tp,
                                      Tensor LlamaLayer::*member);
// The rows of a separate classifier that rank tp.rank holds, or nullopt when
// it holds it whole (ClassifierSplit::replicated, tp.size 1). A shared
// classifier is the embedding, which every rank holds whole.
std::optional<ShardSlice> classifier_slice(const LlamaConfig& c, const TensorParallel& tp);
// Throws the error shard_slice would when tp does not divide the model.
void check_split(const LlamaConfig& c, const TensorParallel& tp);
// decode_tensor of the whole tensor `shape` stored in `raw`, keeping only
// `slice`: only the slice's bytes are read (a rank maps the whole checkpoint
// and touches its share), and only they are checked for non-finite values.
Tensor decode_tensor_slice(std::span<const std::uint8_t> raw, DType dtype, const Shape& shape,
                           const ShardSlice& slice, const std::string& name);

// A new u8 tensor of `shape` holding `bytes` (a quantized weight's blocks),
// and the bytes of a contiguous u8 tensor.
Tensor bytes_to_tensor(std::span<const std::uint8_t> bytes, const Shape& shape);
std::vector<std::uint8_t> tensor_to_bytes(const Tensor& t);

// Appends `t`'s values converted to `dtype` (f32, f16 or bf16), little-endian.
void append_encoded(std::vector<std::uint8_t>& out, const Tensor& t, DType dtype);
void append_i32(std::vector<std::uint8_t>& out, std::int32_t value);

// Writes `bytes` to `path` (through a temporary file renamed into place);
// throws sinkgraph::Error naming the path on any failure.
void write_file(const std::string& path, std::string_view bytes);
void write_file(const std::string& path, std::span<const std::uint8_t> bytes);

// True when the classifier is the token embedding (same storage).
bool classifier_is_shared(const LlamaWeights& weights);

// Saturating arithmetic for sizes computed from untrusted headers.
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b);
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b);

// The checks the readers rely on for their own arithmetic (positive sizes,
// heads dividing dim, kv heads dividing heads), after LlamaConfig::validate.
void validate_config(const LlamaConfig& config, const std::string& source);

// The writers behind save_model().
void save_llama2c(const LlamaModel& model, const std::string& path, DType dtype);
void save_safetensors(const LlamaModel& model, const std::string& path, DType dtype);
void save_hf_checkpoint(const LlamaModel& model, const std::string& dir, DType dtype,
                        std::int64_t shards);

}  // namespace sinkgraph::models::detail

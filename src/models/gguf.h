#pragma once
// GGUF, llama.cpp's model file (docs/model.md): the container (a header, typed
// metadata, tensor infos, an aligned data section) read with every count and
// offset checked, a writer, and ggml's Q8_0 and Q4_0 block formats.
//
// The layout (format versions 2 and 3, little-endian; they differ only in
// that 3 may also be big-endian, which we refuse):
//   "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count × (string key, u32 value type, value),
//   tensor_count × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
//   padding to general.alignment (default 32), then the data section; each
//   tensor's offset is relative to it and a multiple of the alignment.
// A string is a u64 byte count and the bytes (no NUL). ne[0] is the
// innermost dimension: a [out, in] weight has ne = {in, out}.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinkgraph::models::detail {

// The ggml tensor types sinkgraph reads and writes (their ggml numbers).
enum class GgmlType : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30 };
std::string_view ggml_type_name(GgmlType type);  // "f32", "q8_0", ...
// Values per block (1 for f32/f16/bf16, 32 for the quantized types) and
// bytes per block.
std::uint64_t ggml_block_values(GgmlType type);
std::uint64_t ggml_block_bytes(GgmlType type);

enum class GgufValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value: a scalar, or an array of `type` (arrays of arrays are
// allowed, a few levels deep). Values are kept in the widest C++ type of
// their kind: the file's type says how they were stored.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;  // a scalar's type, or an array's element type
  bool is_array = false;
  std::vector<std::int64_t> ints;    // i8 .. i64, and bool as 0/1
  std::vector<std::uint64_t> uints;  // u8 .. u64
  std::vector<double> floats;        // f32 (exact) and f64
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;  // an array of arrays
  [[nodiscard]] std::size_t size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;  // ne[0] innermost
  GgmlType type = GgmlType::f32;
  std::uint64_t offset = 0;  // in the data section
  std::uint64_t nbytes = 0;
};

// A checked GGUF file. Metadata keys are unique; tensor names are unique;
// every tensor's bytes lie inside the data section, aligned, and no two
// tensors overlap.
struct GgufFile {
  std::string name;  // for messages
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;  // in the file's order
  std::span<const std::uint8_t> data;   // the data section

  [[nodiscard]] const GgufValue* find(std::string_view key) const;
  // Typed scalar lookups: nullopt when the key is absent; a sinkgraph::Error
  // naming the file and key when it holds another kind of value (an array, a
  // string for a number) or an integer that does not fit int64.
  [[nodiscard]] std::optional<std::int64_t> get_int(std::string_view key) const;
  [[nodiscard]] std::optional<double> get_float(std::string_view key) const;  // f32, f64
  [[nodiscard]] std::optional<bool> get_bool(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> get_string(std::string_view key) const;
  // Arrays of one kind (strings; numbers of any float or integer type).
  [[nodiscard]] const std::vector<std::string>* get_strings(std::string_view key) const;
};

// Parses and checks `bytes` (which must outlive the result: `data` points
// into it). Every problem is a sinkgraph::Error naming `name`.
GgufFile parse_gguf_file(std::span<const std::uint8_t> bytes, const std::string& name);
// The header, metadata and tensor infos only (what a file's first bytes
// hold): `data` stays empty and tensors' extents are not checked.
GgufFile parse_gguf_metadata(std::span<const std::uint8_t> bytes, const std::string& name);

// Builds a GGUF file (version 3, alignment 32) in memory.
class GgufWriter {
 public:
  void add_string(const std::string& key, std::string_view value);
  void add_u32(const std::string& key, std::uint32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_f32s(const std::string& key, std::span<const float> values);
  void add_i32s(const std::string& key, std::span<const std::int32_t> values);
  // `ne` innermost first; `bytes` holds the tensor in `type`'s layout.
  void add_tensor(const std::string& name, std::vector<std::uint64_t> ne, GgmlType type,
                  std::vector<std::uint8_t> bytes);
  [[nodiscard]] std::vector<std::uint8_t> encode() const;

 private:
  void key(const std::string& key, GgufValueType type);
  struct Pending {
    std::string name;
    std::vector<std::uint64_t> ne;
    GgmlType type;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<std::uint8_t> kv_;
  std::uint64_t kv_count_ = 0;
  std::vector<Pending> tensors_;
};

// ---- ggml's block formats ----
// Note [Q8_0 and Q4_0]
// Both cut a row into blocks of 32 values with one f16 scale d each.
//   Q8_0 (34 bytes): d, then 32 int8 q; value = d * q. Quantizing: d = max|x|
//     / 127, q = round(x / d) (half away from zero).
//   Q4_0 (18 bytes): d, then 16 bytes of nibbles, the low nibble of byte j
//     is value j and the high nibble value j + 16; value = d * (nibble - 8).
//     Quantizing: m = the value of largest magnitude (its sign kept), d = m /
//     -8, nibble = min(15, trunc(x / d + 8.5)).
// The quantizers are ggml's reference ones (quantize_row_q8_0_ref,
// quantize_row_q4_0_ref), so a file we write is byte for byte what ggml's
// own `gguf` package writes for the same f32 values (tested).
constexpr std::uint64_t kQuantBlock = 32;
// Appends `x` (a multiple of 32 values) as blocks of `type` (q8_0 or q4_0).
void quantize_blocks(GgmlType type, std::span<const float> x, std::vector<std::uint8_t>& out);
// Checks that every block of `blocks` (q8_0 or q4_0) has a finite scale; an
// error naming `what` and the block otherwise.
void check_block_scales(GgmlType type, std::span<const std::uint8_t> blocks,
                        const std::string& what);
// Decodes `blocks` of `type` (q8_0 or q4_0) into `out` (32 values per
// block). A scale that is not finite is an error naming `what`.
void dequantize_blocks(GgmlType type, std::span<const std::uint8_t> blocks, std::span<float> out,
                       const std::string& what);

}  // namespace sinkgraph::models::detail

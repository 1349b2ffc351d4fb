// The GGUF container and ggml's Q8_0/Q4_0 blocks (gguf.h). Built with
// -ffp-contract=off: the quantizers must round exactly as ggml's reference
// ones, which an FMA contraction of x * id + 8.5 would change.
#include "models/gguf.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

#include "models/checkpoint_common.h"
#include "sinkgraph/dtype.h"
#include "sinkgraph/error.h"

namespace sinkgraph::models::detail {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint64_t kMaxKeyBytes = 65535;  // the format's bound on keys
constexpr std::uint64_t kMaxNameBytes = 63;    // ggml's GGML_MAX_NAME, less its NUL
constexpr std::uint32_t kMaxDims = 4;          // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;

// ggml's names for the types we do not read, so that a refusal says which
// one the file holds ("q4_k is not supported") instead of a number.
std::string_view other_ggml_type_name(std::uint32_t t) {
  static constexpr std::string_view kNames[] = {
      "f32",   "f16",        "q4_0",       "q4_1",       "q4_2",     "q4_3",     "q5_0",
      "q5_1",  "q8_0",       "q8_1",       "q2_k",       "q3_k",     "q4_k",     "q5_k",
      "q6_k",  "q8_k",       "iq2_xxs",    "iq2_xs",     "iq3_xxs",  "iq1_s",    "iq4_nl",
      "iq3_s", "iq2_s",      "iq4_xs",     "i8",         "i16",      "i32",      "i64",
      "f64",   "iq1_m",      "bf16",       "q4_0_4_4",   "q4_0_4_8", "q4_0_8_8", "tq1_0",
      "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4"};
  return t < std::size(kNames) ? kNames[t] : std::string_view();
}

std::optional<GgmlType> known_type(std::uint32_t t) {
  switch (t) {
    case 0:
      return GgmlType::f32;
    case 1:
      return GgmlType::f16;
    case 2:
      return GgmlType::q4_0;
    case 8:
      return GgmlType::q8_0;
    case 30:
      return GgmlType::bf16;
    default:
      return std::nullopt;
  }
}

std::optional<GgufValueType> value_type(std::uint32_t t) {
  if (t > static_cast<std::uint32_t>(GgufValueType::f64)) return std::nullopt;
  return static_cast<GgufValueType>(t);
}

// Bytes of one scalar of a fixed-size type; 0 for string and array.
std::uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    case GgufValueType::string:
    case GgufValueType::array:
      return 0;
  }
  return 0;
}

// The fewest bytes one value of `t` takes: bounds an array's count by the
// bytes left, so a hostile count cannot make us allocate.
std::uint64_t min_value_bytes(GgufValueType t) {
  if (t == GgufValueType::string) return 8;
  if (t == GgufValueType::array) return 12;
  return scalar_bytes(t);
}

// An f32 as the double its shortest decimal form reads as: metadata written
// as f32 (an epsilon of 1e-5) comes back as 1e-5, not 9.99999974738e-06, so
// a config read from GGUF equals the one that was written.
double f32_as_decimal(float v) {
  if (!std::isfinite(v)) return v;
  char buf[64];
  const auto [end, ec] = std::to_chars(std::begin(buf), std::end(buf), v);
  SG_ASSERT(ec == std::errc(), "f32_as_decimal: to_chars failed");
  double d = 0;
  const auto parsed = std::from_chars(buf, end, d);
  SG_ASSERT(parsed.ec == std::errc(), "f32_as_decimal: from_chars failed");
  return d;
}

class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, const std::string& name)
      : bytes_(bytes), name_(name) {}

  [[nodiscard]] const std::string& file() const { return name_; }
  [[nodiscard]] std::uint64_t pos() const { return pos_; }
  [[nodiscard]] std::uint64_t remaining() const { return bytes_.size() - pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    SG_CHECK(n <= remaining(), name_, ": truncated: ", what, " needs ", n, " bytes at offset ",
             pos_, " but the file has ", bytes_.size(), " bytes");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what, std::uint64_t max_bytes) {
    const auto n = read<std::uint64_t>(what + " (its length)");
    SG_CHECK(n <= max_bytes, name_, ": ", what, " is ", n, " bytes long; at most ", max_bytes,
             " are allowed");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  const std::string& name_;
  std::uint64_t pos_ = 0;
};

void read_scalar_into(Reader& r, GgufValueType t, GgufValue& v, const std::string& what) {
  switch (t) {
    case GgufValueType::u8:
      v.uints.push_back(r.read<std::uint8_t>(what));
      break;
    case GgufValueType::i8:
      v.ints.push_back(r.read<std::int8_t>(what));
      break;
    case GgufValueType::u16:
      v.uints.push_back(r.read<std::uint16_t>(what));
      break;
    case GgufValueType::i16:
      v.ints.push_back(r.read<std::int16_t>(what));
      break;
    case GgufValueType::u32:
      v.uints.push_back(r.read<std::uint32_t>(what));
      break;
    case GgufValueType::i32:
      v.ints.push_back(r.read<std::int32_t>(what));
      break;
    case GgufValueType::u64:
      v.uints.push_back(r.read<std::uint64_t>(what));
      break;
    case GgufValueType::i64:
      v.ints.push_back(r.read<std::int64_t>(what));
      break;
    case GgufValueType::f32:
      v.floats.push_back(f32_as_decimal(r.read<float>(what)));
      break;
    case GgufValueType::f64:
      v.floats.push_back(r.read<double>(what));
      break;
    case GgufValueType::boolean: {
      const auto b = r.read<std::uint8_t>(what);
      SG_CHECK(b <= 1, r.file(), ": ", what, ": a bool must be 0 or 1, got ", static_cast<int>(b));
      v.ints.push_back(b);
      break;
    }
    case GgufValueType::string:
      v.strings.push_back(r.string(what, std::numeric_limits<std::uint64_t>::max()));
      break;
    case GgufValueType::array:
      SG_ASSERT(false, "read_scalar_into: array");
      break;
  }
}

GgufValue read_value(Reader& r, GgufValueType t, const std::string& what, const std::string& file,
                     int depth) {
  GgufValue v;
  if (t != GgufValueType::array) {
    v.type = t;
    read_scalar_into(r, t, v, what);
    return v;
  }
  SG_CHECK(depth < kMaxArrayDepth, file, ": ", what, ": arrays nested more than ", kMaxArrayDepth,
           " deep");
  const auto raw_elem = r.read<std::uint32_t>(what + " (its element type)");
  const auto elem = value_type(raw_elem);
  SG_CHECK(elem.has_value(), file, ": ", what, ": unknown array element type ", raw_elem);
  const auto count = r.read<std::uint64_t>(what + " (its length)");
  const std::uint64_t fits = r.remaining() / min_value_bytes(*elem);
  SG_CHECK(count <= fits, file, ": ", what, ": an array of ", count, " ",
           gguf_value_type_name(*elem), " values cannot fit in the ", r.remaining(), " bytes left");
  v.type = *elem;
  v.is_array = true;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (*elem == GgufValueType::array) {
      v.arrays.push_back(read_value(r, *elem, what, file, depth + 1));
    } else {
      read_scalar_into(r, *elem, v, what);
    }
  }
  return v;
}

std::uint64_t align_up(std::uint64_t n, std::uint64_t alignment) {
  return sat_mul(sat_add(n, alignment - 1) / alignment, alignment);
}

void append_bytes(std::vector<std::uint8_t>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void append(std::vector<std::uint8_t>& out, T v) {
  append_bytes(out, &v, sizeof(T));
}
void append_string(std::vector<std::uint8_t>& out, std::string_view s) {
  append<std::uint64_t>(out, s.size());
  append_bytes(out, s.data(), s.size());
}

}  // namespace

std::string_view ggml_type_name(GgmlType type) {
  return other_ggml_type_name(static_cast<std::uint32_t>(type));
}

std::uint64_t ggml_block_values(GgmlType type) {
  return type == GgmlType::q8_0 || type == GgmlType::q4_0 ? kQuantBlock : 1;
}

std::uint64_t ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 4;
    case GgmlType::f16:
    case GgmlType::bf16:
      return 2;
    case GgmlType::q8_0:
      return 2 + kQuantBlock;
    case GgmlType::q4_0:
      return 2 + kQuantBlock / 2;
  }
  return 0;
}

std::string_view gguf_value_type_name(GgufValueType type) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto i = static_cast<std::size_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::size_t GgufValue::size() const {
  return ints.size() + uints.size() + floats.size() + strings.size() + arrays.size();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

std::optional<std::int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const bool integer = !v->is_array && v->type != GgufValueType::boolean &&
                       (v->ints.size() == 1 || v->uints.size() == 1);
  SG_CHECK(integer, name, ": metadata ", key, " must be an integer, got ",
           v->is_array ? "an array" : gguf_value_type_name(v->type));
  if (!v->ints.empty()) return v->ints[0];
  SG_CHECK(v->uints[0] <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
           name, ": metadata ", key, " is ", v->uints[0], ", too large");
  return static_cast<std::int64_t>(v->uints[0]);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  SG_CHECK(!v->is_array && v->floats.size() == 1, name, ": metadata ", key,
           " must be a float (f32 or f64), got ",
           v->is_array ? "an array" : gguf_value_type_name(v->type));
  return v->floats[0];
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  SG_CHECK(!v->is_array && v->type == GgufValueType::boolean, name, ": metadata ", key,
           " must be a bool, got ", v->is_array ? "an array" : gguf_value_type_name(v->type));
  return v->ints[0] != 0;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  SG_CHECK(!v->is_array && v->type == GgufValueType::string, name, ": metadata ", key,
           " must be a string, got ", v->is_array ? "an array" : gguf_value_type_name(v->type));
  return v->strings[0];
}

const std::vector<std::string>* GgufFile::get_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return nullptr;
  SG_CHECK(v->is_array && v->type == GgufValueType::string, name, ": metadata ", key,
           " must be an array of strings, got ", v->is_array ? "an array of " : "",
           gguf_value_type_name(v->type));
  return &v->strings;
}

namespace {

// The header, metadata and tensor infos; returns the offset where they end.
std::uint64_t parse_header(std::span<const std::uint8_t> bytes, const std::string& name,
                           GgufFile& f) {
  Reader r(bytes, name);
  f.name = name;
  SG_CHECK(bytes.size() >= 4 && r.read<std::uint32_t>("the magic") == kMagic, name,
           ": not a GGUF file (it does not start with \"GGUF\")");
  f.version = r.read<std::uint32_t>("the version");
  SG_CHECK(f.version != 0x03000000 && f.version != 0x02000000, name,
           ": a big-endian GGUF file; sinkgraph reads little-endian ones");
  SG_CHECK(f.version == 2 || f.version == 3, name, ": GGUF version ", f.version,
           "; sinkgraph reads versions 2 and 3");
  const auto n_tensors = r.read<std::uint64_t>("the tensor count");
  const auto n_kv = r.read<std::uint64_t>("the metadata count");
  // Each key-value pair takes at least 13 bytes and each tensor info 32:
  // counts the file cannot hold are refused before anything is allocated.
  SG_CHECK(n_kv <= r.remaining() / 13, name, ": the header claims ", n_kv,
           " metadata entries, more than the file's ", bytes.size(), " bytes can hold");
  SG_CHECK(n_tensors <= r.remaining() / 32, name, ": the header claims ", n_tensors,
           " tensors, more than the file's ", bytes.size(), " bytes can hold");

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = "metadata entry " + std::to_string(i);
    std::string key = r.string(where + " (its key)", kMaxKeyBytes);
    SG_CHECK(!key.empty(), name, ": ", where, " has an empty key");
    const std::string what = "metadata " + key;
    const auto raw_type = r.read<std::uint32_t>(what + " (its type)");
    const auto type = value_type(raw_type);
    SG_CHECK(type.has_value(), name, ": ", what, " has unknown value type ", raw_type);
    GgufValue value = read_value(r, *type, what, name, 0);
    SG_CHECK(!f.metadata.contains(key), name, ": metadata ", key, " appears twice");
    f.metadata.emplace(std::move(key), std::move(value));
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    SG_CHECK(!a->is_array && a->type == GgufValueType::u32, name,
             ": metadata general.alignment must be a u32");
    f.alignment = a->uints[0];
    SG_CHECK(f.alignment != 0 && std::has_single_bit(f.alignment), name,
             ": metadata general.alignment is ", f.alignment, "; it must be a power of two");
  } else {
    f.alignment = kDefaultAlignment;
  }

  f.tensors.reserve(static_cast<std::size_t>(n_tensors));
  std::map<std::string, std::size_t, std::less<>> seen;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.string("tensor info " + std::to_string(i) + " (its name)", kMaxNameBytes);
    const std::string what = "tensor " + t.name;
    SG_CHECK(!t.name.empty(), name, ": tensor info ", i, " has an empty name");
    SG_CHECK(seen.emplace(t.name, i).second, name, ": ", what, " appears twice");
    const auto n_dims = r.read<std::uint32_t>(what + " (its number of dimensions)");
    SG_CHECK(n_dims >= 1 && n_dims <= kMaxDims, name, ": ", what, " has ", n_dims,
             " dimensions; expected 1 to ", kMaxDims);
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = r.read<std::uint64_t>(what + " (its dimensions)");
      SG_CHECK(
          ne >= 1 && ne <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
          name, ": ", what, " has dimension ", d, " of size ", ne);
      t.ne.push_back(ne);
      numel = sat_mul(numel, ne);
    }
    const auto raw_type = r.read<std::uint32_t>(what + " (its type)");
    const auto type = known_type(raw_type);
    if (!type) {
      const std::string_view known = other_ggml_type_name(raw_type);
      SG_CHECK(false, name, ": ", what, " has ggml type ",
               known.empty() ? "number " + std::to_string(raw_type) : std::string(known),
               ", which sinkgraph does not read (it reads f32, f16, bf16, q8_0 and q4_0)");
    }
    t.type = *type;
    const std::uint64_t block = ggml_block_values(t.type);
    SG_CHECK(t.ne[0] % block == 0, name, ": ", what, " is ", ggml_type_name(t.type),
             " but its rows of ", t.ne[0], " values are not whole blocks of ", block);
    t.nbytes = sat_mul(numel / block, ggml_block_bytes(t.type));
    t.offset = r.read<std::uint64_t>(what + " (its offset)");
    SG_CHECK(t.offset % f.alignment == 0, name, ": ", what, " starts at offset ", t.offset,
             " of the data section, not a multiple of the alignment ", f.alignment);
    f.tensors.push_back(std::move(t));
  }

  return r.pos();
}

}  // namespace

GgufFile parse_gguf_metadata(std::span<const std::uint8_t> bytes, const std::string& name) {
  GgufFile f;
  (void)parse_header(bytes, name, f);
  return f;
}

GgufFile parse_gguf_file(std::span<const std::uint8_t> bytes, const std::string& name) {
  GgufFile f;
  const std::uint64_t data_start = align_up(parse_header(bytes, name, f), f.alignment);
  if (f.tensors.empty()) {
    f.data = {};
    return f;
  }
  SG_CHECK(data_start <= bytes.size(), name, ": truncated: the data section would start at byte ",
           data_start, " but the file has ", bytes.size(), " bytes");
  f.data = bytes.subspan(static_cast<std::size_t>(data_start));
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f.tensors.size());
  for (const GgufTensorInfo& t : f.tensors) {
    SG_CHECK(t.offset <= f.data.size() && t.nbytes <= f.data.size() - t.offset, name,
             ": truncated: tensor ", t.name, " needs ", t.nbytes, " bytes at offset ", t.offset,
             " of the data section, which has ", f.data.size(), " bytes");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    SG_CHECK(b.offset >= a.offset + a.nbytes, name, ": tensors ", a.name, " (bytes ", a.offset,
             " to ", a.offset + a.nbytes, ") and ", b.name, " (from ", b.offset, ") overlap");
  }
  return f;
}

// ---- the writer ----

void GgufWriter::key(const std::string& key, GgufValueType type) {
  append_string(kv_, key);
  append<std::uint32_t>(kv_, static_cast<std::uint32_t>(type));
  ++kv_count_;
}

void GgufWriter::add_string(const std::string& k, std::string_view value) {
  key(k, GgufValueType::string);
  append_string(kv_, value);
}

void GgufWriter::add_u32(const std::string& k, std::uint32_t value) {
  key(k, GgufValueType::u32);
  append(kv_, value);
}

void GgufWriter::add_f32(const std::string& k, float value) {
  key(k, GgufValueType::f32);
  append(kv_, value);
}

void GgufWriter::add_bool(const std::string& k, bool value) {
  key(k, GgufValueType::boolean);
  append<std::uint8_t>(kv_, value ? 1 : 0);
}

void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& values) {
  key(k, GgufValueType::array);
  append<std::uint32_t>(kv_, static_cast<std::uint32_t>(GgufValueType::string));
  append<std::uint64_t>(kv_, values.size());
  for (const std::string& s : values) append_string(kv_, s);
}

void GgufWriter::add_f32s(const std::string& k, std::span<const float> values) {
  key(k, GgufValueType::array);
  append<std::uint32_t>(kv_, static_cast<std::uint32_t>(GgufValueType::f32));
  append<std::uint64_t>(kv_, values.size());
  append_bytes(kv_, values.data(), values.size_bytes());
}

void GgufWriter::add_i32s(const std::string& k, std::span<const std::int32_t> values) {
  key(k, GgufValueType::array);
  append<std::uint32_t>(kv_, static_cast<std::uint32_t>(GgufValueType::i32));
  append<std::uint64_t>(kv_, values.size());
  append_bytes(kv_, values.data(), values.size_bytes());
}

void GgufWriter::add_tensor(const std::string& name, std::vector<std::uint64_t> ne, GgmlType type,
                            std::vector<std::uint8_t> bytes) {
  std::uint64_t numel = 1;
  for (const std::uint64_t n : ne) numel *= n;
  SG_ASSERT(!ne.empty() && ne[0] % ggml_block_values(type) == 0 &&
                bytes.size() == numel / ggml_block_values(type) * ggml_block_bytes(type),
            "GgufWriter::add_tensor: ", name, " has ", bytes.size(), " bytes");
  tensors_.push_back({name, std::move(ne), type, std::move(bytes)});
}

std::vector<std::uint8_t> GgufWriter::encode() const {
  std::vector<std::uint8_t> out;
  append<std::uint32_t>(out, kMagic);
  append<std::uint32_t>(out, 3);
  append<std::uint64_t>(out, tensors_.size());
  append<std::uint64_t>(out, kv_count_);
  out.insert(out.end(), kv_.begin(), kv_.end());
  std::uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    append_string(out, t.name);
    append<std::uint32_t>(out, static_cast<std::uint32_t>(t.ne.size()));
    for (const std::uint64_t n : t.ne) append(out, n);
    append<std::uint32_t>(out, static_cast<std::uint32_t>(t.type));
    append(out, offset);
    offset = align_up(offset + t.bytes.size(), kDefaultAlignment);
  }
  out.resize(static_cast<std::size_t>(align_up(out.size(), kDefaultAlignment)), 0);
  for (const Pending& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(static_cast<std::size_t>(align_up(out.size(), kDefaultAlignment)), 0);
  }
  return out;
}

// ---- Q8_0 and Q4_0 (Note [Q8_0 and Q4_0]) ----

void quantize_blocks(GgmlType type, std::span<const float> x, std::vector<std::uint8_t>& out) {
  SG_ASSERT((type == GgmlType::q8_0 || type == GgmlType::q4_0) && x.size() % kQuantBlock == 0,
            "quantize_blocks: ", x.size(), " values of ", ggml_type_name(type));
  out.reserve(out.size() + x.size() / kQuantBlock * ggml_block_bytes(type));
  for (std::size_t b = 0; b < x.size(); b += kQuantBlock) {
    const float* v = x.data() + b;
    if (type == GgmlType::q8_0) {
      float amax = 0;
      for (std::size_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0F;
      const float id = d != 0 ? 1.0F / d : 0.0F;
      append<std::uint16_t>(out, f32_to_f16(d));
      for (std::size_t j = 0; j < kQuantBlock; ++j)
        append<std::int8_t>(out, static_cast<std::int8_t>(std::roundf(v[j] * id)));
    } else {
      float amax = 0;
      float max = 0;
      for (std::size_t j = 0; j < kQuantBlock; ++j) {
        if (amax < std::fabs(v[j])) {
          amax = std::fabs(v[j]);
          max = v[j];
        }
      }
      const float d = max / -8.0F;
      const float id = d != 0 ? 1.0F / d : 0.0F;
      append<std::uint16_t>(out, f32_to_f16(d));
      for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        const float x0 = v[j] * id;
        const float x1 = v[j + kQuantBlock / 2] * id;
        const auto q0 = std::min<int>(15, static_cast<std::int8_t>(x0 + 8.5F));
        const auto q1 = std::min<int>(15, static_cast<std::int8_t>(x1 + 8.5F));
        append<std::uint8_t>(out, static_cast<std::uint8_t>(q0 | (q1 << 4)));
      }
    }
  }
}

void check_block_scales(GgmlType type, std::span<const std::uint8_t> blocks,
                        const std::string& what) {
  const std::uint64_t bb = ggml_block_bytes(type);
  SG_ASSERT(blocks.size() % bb == 0, "check_block_scales: ", blocks.size(), " bytes");
  for (std::size_t b = 0; b < blocks.size() / bb; ++b) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, blocks.data() + b * bb, 2);
    SG_CHECK((bits & 0x7C00U) != 0x7C00U, what, ": block ", b, " (values ", b * kQuantBlock, " to ",
             (b + 1) * kQuantBlock - 1, ") has scale ", f16_to_f32(bits),
             "; a weight must be finite");
  }
}

void dequantize_blocks(GgmlType type, std::span<const std::uint8_t> blocks, std::span<float> out,
                       const std::string& what) {
  const std::uint64_t bb = ggml_block_bytes(type);
  SG_ASSERT((type == GgmlType::q8_0 || type == GgmlType::q4_0) && blocks.size() % bb == 0 &&
                out.size() == blocks.size() / bb * kQuantBlock,
            "dequantize_blocks: ", blocks.size(), " bytes into ", out.size(), " values");
  for (std::size_t b = 0; b < blocks.size() / bb; ++b) {
    const std::uint8_t* p = blocks.data() + b * bb;
    std::uint16_t bits = 0;
    std::memcpy(&bits, p, 2);
    const float d = f16_to_f32(bits);
    SG_CHECK(std::isfinite(d), what, ": block ", b, " (values ", b * kQuantBlock, " to ",
             (b + 1) * kQuantBlock - 1, ") has scale ", d, "; a weight must be finite");
    float* y = out.data() + b * kQuantBlock;
    if (type == GgmlType::q8_0) {
      for (std::size_t j = 0; j < kQuantBlock; ++j)
        y[j] = d * static_cast<float>(static_cast<std::int8_t>(p[2 + j]));
    } else {
      for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        y[j] = d * static_cast<float>((p[2 + j] & 0x0F) - 8);
        y[j + kQuantBlock / 2] = d * static_cast<float>((p[2 + j] >> 4) - 8);
      }
    }
  }
}

}  // namespace sinkgraph::models::detail

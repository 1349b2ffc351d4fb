#include "sinkgraph/dtype.h"

#include <array>

namespace sinkgraph {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {"f32", "f16",  "bf16", "i32",
                                                             "i64", "bool", "u8"};
constexpr std::array<std::size_t, kNumDTypes> kSizes = {4, 2, 2, 4, 8, 1, 1};
}  // namespace

std::string_view dtype_name(DType dtype) { return kNames[static_cast<std::size_t>(dtype)]; }

std::size_t dtype_size(DType dtype) { return kSizes[static_cast<std::size_t>(dtype)]; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace sinkgraph

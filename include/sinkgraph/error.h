#pragma once
// Two error tiers (PyTorch's TORCH_CHECK / TORCH_INTERNAL_ASSERT):
//  - SG_CHECK(cond, parts...) throws sinkgraph::Error for anything a user can
//    cause. The message names the operator, the argument, the shapes and what
//    was expected; parts are streamed with operator<<.
//  - SG_ASSERT(cond, parts...) guards our own invariants and throws
//    sinkgraph::InternalError: seeing one is always a sinkgraph bug.
#include <sstream>
#include <stdexcept>
#include <string>

#include "sinkgraph/export.h"

namespace sinkgraph {

class SG_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

class SG_API InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
[[noreturn]] SG_API void throw_error(const std::string& message);
[[noreturn]] SG_API void throw_internal(const char* file, int line, const char* cond,
                                        const std::string& message);
}  // namespace detail

}  // namespace sinkgraph

#define SG_CHECK(cond, ...)                                                       \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::sinkgraph::detail::throw_error(::sinkgraph::detail::concat(__VA_ARGS__)); \
    }                                                                             \
  } while (false)

#define SG_ASSERT(cond, ...)                                                                      \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      ::sinkgraph::detail::throw_internal(                                                        \
          __FILE__, __LINE__, #cond, ::sinkgraph::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                             \
  } while (false)

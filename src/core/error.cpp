#include "sinkgraph/error.h"

namespace sinkgraph::detail {

void throw_error(const std::string& message) { throw Error(message); }

void throw_internal(const char* file, int line, const char* cond, const std::string& message) {
  throw InternalError(concat("internal error (a sinkgraph bug) at ", file, ":", line,
                             ": assertion `", cond, "` failed", message.empty() ? "" : ": ",
                             message));
}

}  // namespace sinkgraph::detail

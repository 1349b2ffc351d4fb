#pragma once
// The library's one logger (internal): warnings and events go through here,
// never through bare fprintf. Warnings go to stderr by default.
#include <string>

namespace sinkgraph::detail {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

// Writes "sinkgraph: <level>: <message>" to stderr when `level` is enabled.
void log(LogLevel level, const std::string& message);
inline void warn(const std::string& message) { log(LogLevel::warn, message); }

}  // namespace sinkgraph::detail

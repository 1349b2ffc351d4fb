#pragma once
// The library's one logger, internal side (the public controls are in
// sinkgraph/log.h): warnings and events go through here, never through bare
// fprintf.
#include <string>
#include <string_view>

#include "sinkgraph/log.h"

namespace sinkgraph::detail {

inline void warn(std::string_view message) { sinkgraph::log(LogLevel::warn, message); }
inline void info(std::string_view message) { sinkgraph::log(LogLevel::info, message); }

}  // namespace sinkgraph::detail

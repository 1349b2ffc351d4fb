#pragma once
// The library's log (Note [Logging] in src/core/log.cpp). Every message the
// library writes goes through one leveled logger: warnings by default, and at
// `info` the events a user asks "why did that happen?" about: each trace,
// capture, re-capture and eager fallback, as the explain report words them.
//
// The level starts from the environment variable SINKGRAPH_LOG (error, warn,
// info, debug), read once, as TORCH_LOGS is; set_log_level() changes it at any
// time, so a test or a program never depends on the environment.
#include <functional>
#include <string_view>

#include "sinkgraph/export.h"

namespace sinkgraph {

// Ordered: a message is written when its level is <= the current level.
enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

SG_API void set_log_level(LogLevel level);
SG_API LogLevel log_level();
// "error", "warn", "info" or "debug" (what SINKGRAPH_LOG accepts); anything
// else throws sinkgraph::Error naming the accepted values.
SG_API LogLevel parse_log_level(std::string_view name);
SG_API const char* log_level_name(LogLevel level);

// Where messages go. The default handler writes "sinkgraph: <level>: <message>"
// as one line to stderr. A handler is called with the log's lock held, one
// message at a time, on whichever thread logs; it must not log itself. An
// empty function restores the default.
using LogHandler = std::function<void(LogLevel, std::string_view message)>;
SG_API void set_log_handler(LogHandler handler);

// Writes `message` at `level` through the handler when the level is enabled:
// for tools and front ends built on the library, so that their messages obey
// the same level and go to the same place.
SG_API bool log_enabled(LogLevel level);
SG_API void log(LogLevel level, std::string_view message);

}  // namespace sinkgraph

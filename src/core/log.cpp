#include "log.h"

#include <cstdio>
#include <mutex>

namespace sinkgraph::detail {

namespace {
const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error:
      return "error";
    case LogLevel::warn:
      return "warning";
    case LogLevel::info:
      return "info";
    case LogLevel::debug:
      return "debug";
  }
  return "?";
}
}  // namespace

void log(LogLevel level, const std::string& message) {
  if (level > LogLevel::warn) return;  // info and debug are off by default
  static std::mutex mutex;             // one line at a time from several threads
  const std::lock_guard lock(mutex);
  std::fprintf(stderr, "sinkgraph: %s: %s\n", level_name(level), message.c_str());
}

}  // namespace sinkgraph::detail

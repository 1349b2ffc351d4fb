#include "log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <utility>

#include "sinkgraph/error.h"

// Note [Logging]
// One process-wide level and one handler, as TORCH_LOGS and glog have: log
// lines are a side channel for people, never an input to behaviour. The level
// is an atomic read on every call site's fast path; SINKGRAPH_LOG is read the
// first time anything asks for the level (not at load time, so a program that
// sets the variable before its first sinkgraph call still sees it), and
// set_log_level() overrides it from then on. A bad SINKGRAPH_LOG value is not
// an error that stops the program: it is reported once, as a warning, and the
// level stays at warn. Messages are whole lines written under one mutex, so
// lines from several host threads never interleave.

namespace sinkgraph {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}
LogHandler& handler_slot() {  // guarded by log_mutex()
  static LogHandler h;
  return h;
}

void write_default(LogLevel level, std::string_view message) {
  const char* name = level == LogLevel::warn ? "warning" : log_level_name(level);
  std::fprintf(stderr, "sinkgraph: %s: %.*s\n", name, static_cast<int>(message.size()),
               message.data());
}

LogLevel current_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level != kUnset) return static_cast<LogLevel>(level);
  std::string problem;
  LogLevel from_env = LogLevel::warn;
  if (const char* env = std::getenv("SINKGRAPH_LOG"); env != nullptr && *env != '\0') {
    try {
      from_env = parse_log_level(env);
    } catch (const Error& e) {
      problem = std::string("SINKGRAPH_LOG: ") + e.what() + "; using warn";
    }
  }
  int expected = kUnset;
  // A concurrent set_log_level() wins over the environment.
  if (g_level.compare_exchange_strong(expected, static_cast<int>(from_env)) && !problem.empty()) {
    const std::lock_guard lock(log_mutex());
    write_default(LogLevel::warn, problem);
  }
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

}  // namespace

void set_log_level(LogLevel level) {
  SG_CHECK(static_cast<int>(level) >= 0 && static_cast<int>(level) <= 3,
           "set_log_level: not a LogLevel: ", static_cast<int>(level));
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

LogLevel log_level() { return current_level(); }

LogLevel parse_log_level(std::string_view name) {
  for (const LogLevel level : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug}) {
    if (name == log_level_name(level)) return level;
  }
  if (name == "warning") return LogLevel::warn;
  SG_CHECK(false, "unknown log level '", name.substr(0, 40),
           "'; expected error, warn, info or debug");
  return LogLevel::warn;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error:
      return "error";
    case LogLevel::warn:
      return "warn";
    case LogLevel::info:
      return "info";
    case LogLevel::debug:
      return "debug";
  }
  return "?";
}

void set_log_handler(LogHandler handler) {
  const std::lock_guard lock(log_mutex());
  handler_slot() = std::move(handler);
}

bool log_enabled(LogLevel level) { return level <= current_level(); }

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  const std::lock_guard lock(log_mutex());
  if (const LogHandler& h = handler_slot()) {
    h(level, message);
  } else {
    write_default(level, message);
  }
}

}  // namespace sinkgraph

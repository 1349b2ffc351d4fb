// The logger (sinkgraph/log.h) and the version (sinkgraph/version.h).
#include "sinkgraph/log.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"
#include "sinkgraph/version.h"

namespace {

namespace sg = sinkgraph;

// Captures log messages for the test's lifetime and restores the level and
// the default handler afterwards, whatever SINKGRAPH_LOG says.
class LogCapture {
 public:
  explicit LogCapture(sg::LogLevel level) : saved_(sg::log_level()) {
    sg::set_log_level(level);
    sg::set_log_handler(
        [this](sg::LogLevel l, std::string_view m) { lines.emplace_back(l, std::string(m)); });
  }
  ~LogCapture() {
    sg::set_log_handler({});
    sg::set_log_level(saved_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::vector<std::pair<sg::LogLevel, std::string>> lines;

 private:
  sg::LogLevel saved_;
};

TEST(log, level_filters_messages) {
  LogCapture capture(sg::LogLevel::warn);
  sg::log(sg::LogLevel::info, "hidden");
  sg::log(sg::LogLevel::warn, "shown");
  sg::log(sg::LogLevel::error, "also shown");
  ASSERT_EQ(capture.lines.size(), 2U);
  EXPECT_EQ(capture.lines[0].second, "shown");
  EXPECT_EQ(capture.lines[1].first, sg::LogLevel::error);
  EXPECT_FALSE(sg::log_enabled(sg::LogLevel::info));

  sg::set_log_level(sg::LogLevel::debug);
  sg::log(sg::LogLevel::debug, "now shown");
  EXPECT_EQ(capture.lines.back().second, "now shown");
  sg::set_log_level(sg::LogLevel::error);
  sg::log(sg::LogLevel::warn, "not at error");
  EXPECT_EQ(capture.lines.size(), 3U);
}

TEST(log, level_names_parse_and_bad_names_are_errors) {
  for (const auto level :
       {sg::LogLevel::error, sg::LogLevel::warn, sg::LogLevel::info, sg::LogLevel::debug}) {
    EXPECT_EQ(sg::parse_log_level(sg::log_level_name(level)), level);
  }
  try {
    (void)sg::parse_log_level("verbose");
    FAIL() << "expected sinkgraph::Error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("error, warn, info or debug"), std::string::npos);
  }
}

TEST(log, lines_from_several_threads_arrive_whole) {
  LogCapture capture(sg::LogLevel::info);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 100; ++i) sg::log(sg::LogLevel::info, "thread " + std::to_string(t));
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(capture.lines.size(), 400U);
  for (const auto& [level, line] : capture.lines) EXPECT_EQ(line.rfind("thread ", 0), 0U) << line;
}

TEST(version, matches_the_header_macros) {
  const std::string want = std::to_string(SINKGRAPH_VERSION_MAJOR) + "." +
                           std::to_string(SINKGRAPH_VERSION_MINOR) + "." +
                           std::to_string(SINKGRAPH_VERSION_PATCH);
  EXPECT_EQ(std::string(sg::version()), want);
}

}  // namespace

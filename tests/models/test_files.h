#pragma once
// Helpers shared by the checkpoint tests: a temporary folder and an
// expectation on a sinkgraph::Error's message.
#include <filesystem>
#include <functional>
#include <stdlib.h>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"

namespace sgtest {

// Runs `fn`, expects a sinkgraph::Error whose message holds every `parts` entry.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const sinkgraph::Error& e) {
    const std::string message = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(message.find(p), std::string::npos) << "message: " << message << "\nmissing: " << p;
    }
  }
}

// A fresh folder under the system's temporary folder, removed with its contents.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sg_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace sgtest

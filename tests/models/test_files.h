#pragma once
// Helpers shared by the checkpoint tests: a temporary folder and an
// expectation on a sinkgraph::Error's message.
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdlib.h>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"

namespace sgtest {

using Bytes = std::vector<std::uint8_t>;

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// stories260K's reference files (../shared/models/stories260K/README.md) in
// the folder `dir`: the 200 greedy ids from BOS, and the 64 x 512 logits.
inline std::vector<std::int64_t> stories_reference_ids(const std::filesystem::path& dir) {
  std::ifstream in(dir / "bos_greedy_200.txt");
  std::vector<std::int64_t> ids;
  for (std::int64_t v = 0; in >> v;) ids.push_back(v);
  return ids;
}
inline std::vector<float> stories_reference_logits(const std::filesystem::path& dir) {
  std::ifstream in(dir / "bos_logits_64x512.f32", std::ios::binary);
  std::vector<float> v(64 * 512);
  in.read(reinterpret_cast<char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  EXPECT_TRUE(in.good());
  return v;
}

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

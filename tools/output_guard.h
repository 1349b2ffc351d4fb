#pragma once
// Note [Outputs never overwrite inputs]
// A command's output files (generate's --dump-logits and --trace, convert's
// output) are checked against every file the command reads before any work
// starts: the model file, or every regular file of a model folder (config,
// weights, shards, index), and the prompts file. An output that is one of
// them, through any path, symbolic link or hard link (the same device and
// inode: std::filesystem::equivalent), or an output folder that is the
// model's folder, is refused with one line naming both, exit 2: a typo in
// --dump-logits once replaced a user's checkpoint with logits.
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "sinkgraph/error.h"

namespace sinkgraph::tools {

// The files reading `path` may open: the file itself, or a folder's regular
// files. Nothing for a path that does not exist (the reader reports it).
inline std::vector<std::filesystem::path> files_read_from(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return out;
  if (!fs::is_directory(path, ec)) {
    out.emplace_back(path);
    return out;
  }
  out.emplace_back(path);  // the folder itself: an output folder must not be it
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    std::error_code file_ec;
    if (entry.is_regular_file(file_ec)) out.push_back(entry.path());
  }
  return out;
}

// Throws when `output` (given as `flag`) resolves to one of `inputs`, each
// of which is `what` to this command.
inline void check_output_is_no_input(const std::string& output, const char* flag,
                                     const std::vector<std::filesystem::path>& inputs,
                                     const char* what = "an input") {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (output.empty() || !fs::exists(output, ec)) return;
  for (const fs::path& in : inputs) {
    std::error_code eq_ec;
    SG_CHECK(!fs::equivalent(output, in, eq_ec) || eq_ec, flag, ": ", output, " is ", what,
             " of this command (", in.string(), "); refusing to overwrite it (name another path)");
  }
}

}  // namespace sinkgraph::tools

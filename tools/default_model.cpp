#include "default_model.h"

#include <filesystem>
#include <system_error>

#include "sinkgraph/error.h"

namespace sinkgraph::tools {

std::string default_model_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  SG_CHECK(!ec, "cannot find the default model: /proc/self/exe is unreadable (", ec.message(),
           "); pass --model PATH, or --model builtin for the random built-in model");
  const fs::path model =
      exe.parent_path().parent_path() / "share" / "sinkgraph" / "stories260K" / "stories260K.bin";
  SG_CHECK(fs::is_regular_file(model, ec), "the default model is missing: ", model.string(),
           " (it ships with sinkgraph; reinstall, or pass --model PATH, or --model builtin for "
           "the random built-in model)");
  return model.string();
}

}  // namespace sinkgraph::tools

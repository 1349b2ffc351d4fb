// libFuzzer target for config.json (docs/model.md, docs/robustness.md): the
// input is the config, read against a fixed tiny safetensors checkpoint
// (fuzz_models.h), so mutations explore the JSON parser's limits (depth,
// duplicate keys, numbers), the value checks and the config/tensor agreement.
// Any input either parses or raises sinkgraph::Error; anything else is a finding.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "fuzz_models.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace {

// The tiny model's safetensors bytes, written once per process.
const std::vector<std::uint8_t>& checkpoint() {
  static const std::vector<std::uint8_t> bytes = [] {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("sg_config_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto model = sinkgraph::models::random_model(sinkgraph::fuzz::tiny_config(), 1);
    sinkgraph::models::save_model(model, (dir / "model.safetensors").string(),
                                  sinkgraph::models::CheckpointFormat::safetensors);
    std::ifstream in(dir / "model.safetensors", std::ios::binary);
    std::vector<std::uint8_t> out((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    fs::remove_all(dir);
    return out;
  }();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)sinkgraph::models::parse_safetensors(
        checkpoint(), std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const sinkgraph::Error&) {
  }
  return 0;
}

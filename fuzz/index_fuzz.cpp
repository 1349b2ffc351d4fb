// libFuzzer target for model.safetensors.index.json (docs/model.md, "Hugging
// Face checkpoints"): the input is the index, read against a fixed tiny
// Hugging Face checkpoint in two shards held in memory (fuzz_models.h's
// config; make_seeds writes its index as the seed), so mutations explore the
// JSON limits, the weight_map's names and shard names (paths that escape the
// folder), and the agreement between the weight_map and the shards' headers.
// Any input either loads or raises sinkgraph::Error; anything else is a finding.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "fuzz_models.h"
#include "models/safetensors_common.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace {

namespace models = sinkgraph::models;

struct Checkpoint {
  models::LlamaConfig config;
  std::map<std::string, std::vector<std::uint8_t>> shards;  // by file name
};

// The tiny model as two shards, written once per process.
const Checkpoint& checkpoint() {
  static const Checkpoint c = [] {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("sg_index_fuzz_" + std::to_string(::getpid()));
    models::save_hf(models::random_model(sinkgraph::fuzz::tiny_config(), 1), dir.string(),
                    sinkgraph::DType::f32, 2);
    Checkpoint out;
    out.config = models::load_model(dir.string()).config();
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("model-")) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      out.shards[name].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    fs::remove_all(dir);
    return out;
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Checkpoint& c = checkpoint();
  const models::detail::ShardOpener open = [&](const std::string& file, const std::string& tensor) {
    const auto it = c.shards.find(file);
    SG_CHECK(it != c.shards.end(), "fuzz: shard ", file, " of tensor ", tensor, " not found");
    return models::detail::ShardBytes{file, it->second};
  };
  try {
    (void)models::detail::parse_hf_sharded(
        c.config, std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json",
        open);
  } catch (const sinkgraph::Error&) {
  }
  return 0;
}

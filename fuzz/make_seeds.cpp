// Writes the seed corpora of the checkpoint fuzzers: tiny random models of
// fuzz_models.h's config in each format, dtype and classifier layout.
// Usage: make_seeds OUT_DIR   (writes OUT_DIR/llama2c/*, OUT_DIR/safetensors/*,
// OUT_DIR/config/*: the config.json files written beside them, ours and
// Hugging Face's, OUT_DIR/index/*: a Hugging Face shard index, and
// OUT_DIR/gguf/*: GGUF files of each type)
#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz_models.h"
#include "sinkgraph/llama.h"

namespace models = sinkgraph::models;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out / "llama2c");
  fs::create_directories(out / "safetensors");
  fs::create_directories(out / "config");
  fs::create_directories(out / "index");
  fs::create_directories(out / "gguf");
  for (const bool shared : {true, false}) {
    models::LlamaConfig c = sinkgraph::fuzz::tiny_config();
    c.shared_classifier = shared;
    const models::LlamaModel m = models::random_model(c, shared ? 1 : 2);
    const std::string tag = shared ? "shared" : "separate";
    models::save_model(m, (out / "llama2c" / (tag + ".bin")).string(),
                       models::CheckpointFormat::llama2c);
    for (const auto dtype :
         {sinkgraph::DType::f32, sinkgraph::DType::f16, sinkgraph::DType::bf16}) {
      const fs::path dir = out / ("tmp_" + tag);
      fs::create_directories(dir);
      models::save_model(m, (dir / "model.safetensors").string(),
                         models::CheckpointFormat::safetensors, dtype);
      fs::copy_file(dir / "config.json", out / "config" / (tag + ".json"),
                    fs::copy_options::overwrite_existing);
      fs::rename(dir / "model.safetensors",
                 out / "safetensors" /
                     (tag + "_" + std::string(sinkgraph::dtype_name(dtype)) + ".safetensors"));
      fs::remove_all(dir);
    }
  }
  // GGUF: the tiny model in the float types; Q8_0 and Q4_0 need rows of
  // whole 32-value blocks, so a model 32 wide for those.
  for (const auto type : {models::GgufType::f32, models::GgufType::f16, models::GgufType::bf16}) {
    models::save_gguf(
        models::random_model(sinkgraph::fuzz::tiny_config(), 1),
        (out / "gguf" / ("tiny_" + std::to_string(static_cast<int>(type)) + ".gguf")).string(),
        type);
  }
  models::LlamaConfig wide = sinkgraph::fuzz::tiny_config();
  wide.dim = 32;
  wide.hidden_dim = 32;
  wide.n_heads = 4;
  wide.n_kv_heads = 2;
  for (const auto type : {models::GgufType::q8_0, models::GgufType::q4_0}) {
    models::save_gguf(
        models::random_model(wide, 2),
        (out / "gguf" / ("wide_" + std::to_string(static_cast<int>(type)) + ".gguf")).string(),
        type);
  }
  // Hugging Face layout: its config.json (config_fuzz reads it against our
  // layout's tensors, so the HF config parser runs to its end) and the index
  // of the two-shard checkpoint that index_fuzz holds in memory.
  {
    const fs::path dir = out / "tmp_hf";
    models::save_hf(models::random_model(sinkgraph::fuzz::tiny_config(), 1), dir.string(),
                    sinkgraph::DType::f32, 2);
    fs::copy_file(dir / "config.json", out / "config" / "hf.json",
                  fs::copy_options::overwrite_existing);
    fs::copy_file(dir / "model.safetensors.index.json", out / "index" / "two_shards.json",
                  fs::copy_options::overwrite_existing);
    fs::remove_all(dir);
  }
  return 0;
}

// Writes the seed corpora of the checkpoint fuzzers: tiny random models of
// fuzz_models.h's config in each format, dtype and classifier layout.
// Usage: make_seeds OUT_DIR   (writes OUT_DIR/llama2c/*, OUT_DIR/safetensors/*
// and OUT_DIR/config/*: the config.json files written beside them)
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
  return 0;
}

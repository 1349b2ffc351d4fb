// `sinkgraph make-model`: writes a seeded random Llama checkpoint.
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "commands.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::tools {

void add_make_model_command(CLI::App& app, int& status) {
  struct Options {
    models::LlamaConfig config;
    std::uint64_t seed = 0;
    std::string format = "llama2c";
    std::string dtype = "f32";
    std::string rope_style = "interleaved";
    bool separate_classifier = false;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("make-model", "Write a seeded random Llama checkpoint");
  cmd->add_option("--dim", o->config.dim, "model width")->required();
  cmd->add_option("--layers", o->config.n_layers, "decoder layers")->required();
  cmd->add_option("--heads", o->config.n_heads, "query heads")->required();
  cmd->add_option("--kv-heads", o->config.n_kv_heads, "key/value heads")->required();
  cmd->add_option("--hidden", o->config.hidden_dim, "feed-forward width")->required();
  cmd->add_option("--vocab", o->config.vocab_size, "vocabulary size")->required();
  cmd->add_option("--seq-len", o->config.max_seq_len, "maximum sequence length")->required();
  cmd->add_option("--seed", o->seed, "random seed")->required();
  cmd->add_option("--format", o->format, "llama2c or safetensors")
      ->required()
      ->check(CLI::IsMember({"llama2c", "safetensors"}));
  cmd->add_option("--dtype", o->dtype, "safetensors dtype: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--rope-style", o->rope_style, "interleaved (llama2.c) or half (Hugging Face)")
      ->check(CLI::IsMember({"interleaved", "half"}));
  cmd->add_flag("--separate-classifier", o->separate_classifier, "an output.weight of its own");
  cmd->add_option("--out", o->out,
                  "output path; safetensors: a folder (model.safetensors and config.json), or "
                  "a file named *.safetensors with config.json beside it")
      ->required();
  cmd->callback([o, &status] {
    models::LlamaConfig config = o->config;
    config.rope_style =
        o->rope_style == "half" ? ops::RopeStyle::half : ops::RopeStyle::interleaved;
    config.shared_classifier = !o->separate_classifier;
    SG_CHECK(o->format == "safetensors" || config.rope_style == ops::RopeStyle::interleaved,
             "make-model: llama2c checkpoints use interleaved rope; --rope-style half needs "
             "--format safetensors");
    // Resource limit (docs/robustness.md): writing holds the weights about
    // three times (the tensors, their host copy, the file's bytes), so they
    // must fit three times in this machine's memory; say so instead of dying
    // of bad_alloc halfway.
    config.validate("make-model");
    const std::int64_t weight_bytes = config.num_parameters() * 4;
    const auto memory = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) *
                        static_cast<std::int64_t>(::sysconf(_SC_PAGE_SIZE));
    SG_CHECK(memory <= 0 || weight_bytes <= memory / 3, "make-model: ", config.str(), " has ",
             config.num_parameters(), " weights (", weight_bytes,
             " bytes in f32); writing it needs about three times that, and this machine has ",
             memory, " bytes of memory (the limit is a third of it)");
    const models::LlamaModel model = models::random_model(config, o->seed);
    const auto parent = std::filesystem::path(o->out).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    SG_CHECK(!ec, "make-model: cannot create the folder ", parent.string(), ": ", ec.message());
    const auto format = o->format == "safetensors" ? models::CheckpointFormat::safetensors
                                                   : models::CheckpointFormat::llama2c;
    models::save_model(model, o->out, format, *parse_dtype(o->dtype));
    std::cerr << "wrote " << o->out << " (" << config.str() << ")\n";
    status = 0;
  });
}

}  // namespace sinkgraph::tools

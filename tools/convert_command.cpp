// `sinkgraph convert`: rewrites a checkpoint in another format (docs/model.md,
// "sinkgraph convert"), e.g. a llama2.c file as a Hugging Face folder.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "output_guard.h"
#include "sinkgraph/error.h"
#include "sinkgraph/llama.h"

namespace sinkgraph::tools {

namespace {

const char* format_name(models::CheckpointFormat f) {
  switch (f) {
    case models::CheckpointFormat::llama2c:
      return "llama2c";
    case models::CheckpointFormat::safetensors:
      return "safetensors";
    case models::CheckpointFormat::hf:
      return "hf";
    case models::CheckpointFormat::gguf:
      return "gguf";
  }
  return "?";
}

models::CheckpointFormat parse_format(const std::string& name) {
  if (name == "llama2c") return models::CheckpointFormat::llama2c;
  if (name == "safetensors") return models::CheckpointFormat::safetensors;
  if (name == "gguf") return models::CheckpointFormat::gguf;
  SG_ASSERT(name == "hf", "convert: format ", name, " passed the flag check");
  return models::CheckpointFormat::hf;
}

}  // namespace

void add_convert_command(CLI::App& app, int& status) {
  struct Options {
    std::string from, to, input, output, dtype = "f32";
    std::int64_t shards = 1;
    CLI::Option* dtype_option = nullptr;
    CLI::Option* shards_option = nullptr;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "convert", "Rewrite a checkpoint in another format (e.g. llama2.c as Hugging Face)");
  const auto formats = CLI::IsMember({"llama2c", "safetensors", "hf", "gguf"});
  cmd->add_option("--from", o->from, "the input's format: llama2c, safetensors, hf or gguf")
      ->required()
      ->check(formats);
  cmd->add_option("input", o->input, "the input checkpoint (a file or a folder)")->required();
  cmd->add_option("--to", o->to, "the output's format: hf, safetensors, gguf or llama2c")
      ->required()
      ->check(formats);
  cmd->add_option("output", o->output, "the output (a folder for hf)")->required();
  o->dtype_option =
      cmd->add_option("--dtype", o->dtype, "f32 (default), f16 or bf16; gguf also q8_0 or q4_0")
          ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  o->shards_option =
      cmd->add_option("--shards", o->shards, "hf: this many safetensors files (default 1)");
  cmd->callback([o, &status] {
    const auto from = parse_format(o->from);
    const auto to = parse_format(o->to);
    SG_CHECK(o->shards_option->count() == 0 || to == models::CheckpointFormat::hf,
             "convert: --shards needs --to hf");
    SG_CHECK(o->shards >= 1, "convert: --shards must be at least 1, got ", o->shards);
    SG_CHECK(o->dtype_option->count() == 0 || o->dtype == "f32" ||
                 to != models::CheckpointFormat::llama2c,
             "convert: llama2.c checkpoints hold f32 only; --dtype ", o->dtype,
             " needs --to hf, --to safetensors or --to gguf");
    const bool quantized = o->dtype == "q8_0" || o->dtype == "q4_0";
    SG_CHECK(!quantized || to == models::CheckpointFormat::gguf, "convert: --dtype ", o->dtype,
             " needs --to gguf (only GGUF holds quantized weights)");
    // --from says what the input must be: a llama2.c file is read as one
    // whatever its name; a folder must hold the layout named.
    if (from != models::CheckpointFormat::llama2c) {
      const auto found = models::checkpoint_format(o->input);
      SG_CHECK(found == from, "convert: ", o->input, " is a ", format_name(found),
               " checkpoint, not ", o->from, " (--from ", format_name(found), ")");
    }
    // Note [Outputs never overwrite inputs] (output_guard.h). An hf output is
    // a folder of files with fixed names: it must not be the input's folder
    // either, nor the folder an input file lies in.
    const auto inputs = files_read_from(o->input);
    check_output_is_no_input(o->output, "convert: output", inputs);
    if (to == models::CheckpointFormat::hf) {
      std::vector<std::filesystem::path> folders;
      folders.reserve(inputs.size());
      for (const auto& f : inputs)
        folders.push_back(f.parent_path().empty() ? "." : f.parent_path());
      check_output_is_no_input(o->output, "convert: output", folders, "the folder of an input");
    }
    models::LlamaModel model = from == models::CheckpointFormat::llama2c
                                   ? models::load_llama2c(o->input)
                                   : models::load_model(o->input);
    // llama2.c has no room for the rotary convention: it is interleaved.
    if (to == models::CheckpointFormat::llama2c)
      model = models::convert_rope_style(model, ops::RopeStyle::interleaved);
    if (to == models::CheckpointFormat::gguf) {
      const models::GgufType type = o->dtype == "q8_0"   ? models::GgufType::q8_0
                                    : o->dtype == "q4_0" ? models::GgufType::q4_0
                                    : o->dtype == "f16"  ? models::GgufType::f16
                                    : o->dtype == "bf16" ? models::GgufType::bf16
                                                         : models::GgufType::f32;
      models::save_gguf(model, o->output, type);
    } else if (const DType dtype = *parse_dtype(o->dtype); to == models::CheckpointFormat::hf) {
      models::save_hf(model, o->output, dtype, o->shards);
    } else {
      models::save_model(model, o->output, to, dtype);
    }
    std::cerr << "wrote " << o->output << " (" << o->to << ", " << o->dtype;
    if (o->shards > 1) std::cerr << ", " << o->shards << " shards";
    std::cerr << ") from " << o->input << " (" << o->from << ")\n";
    status = 0;
  });
}

}  // namespace sinkgraph::tools

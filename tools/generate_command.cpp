// `sinkgraph generate`: the contract in DESIGN.md ("sinkgraph generate").
#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/core.h>

#include "commands.h"
#include "default_model.h"
#include "generate.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/log.h"

namespace sinkgraph::tools {

namespace {

struct CliOptions {
  std::string model;
  CLI::Option* model_option = nullptr;  // to tell `--model ""` from no --model
  std::string seed_text = "0";
  std::string prompt_ids = "1";
  std::int64_t steps = 128;
  std::string mode = "reduce-overhead";
  double temperature = 0.0;
  std::optional<std::int64_t> stop_id;
  bool print_ids = false;
  std::string dump_logits;
  bool stats = false;
  std::string explain;  // "" (not asked), "summary" or "full"
  bool stream = false;
  std::string trace;
  std::optional<int> threads;
};

std::vector<std::int64_t> parse_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SG_CHECK(used == word.size() && used > 0, "--prompt-ids: '", word,
             "' is not an integer token id");
    ids.push_back(v);
  }
  SG_CHECK(!ids.empty(), "--prompt-ids: expected at least one token id");
  return ids;
}

// An unsigned 64-bit decimal: "-1" and 2^64 are errors, not wrapped values.
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  SG_CHECK(!text.empty() && ec == std::errc() && ptr == end, "--seed: '", text,
           "' is not an integer in [0, 18446744073709551615]");
  return v;
}

// An output file (Note [Temporary files] in sinkgraph/files.h): created before
// any work, so an unwritable destination fails at once; written and renamed
// into place at the end; removed on error or interrupt.
std::unique_ptr<sinkgraph::TempFile> output_file(const std::string& path, const char* flag) {
  if (path.empty()) return nullptr;
  try {
    return std::make_unique<sinkgraph::TempFile>(path);
  } catch (const Error& e) {
    SG_CHECK(false, flag, ": ", e.what());
  }
  return nullptr;
}

// --model: a path, "builtin" (the random built-in model) or, when absent,
// the shipped stories260K checkpoint.
constexpr const char* kBuiltin = "builtin";

int run(const CliOptions& o) {
  SG_CHECK(o.model_option == nullptr || o.model_option->count() == 0 || !o.model.empty(),
           "--model: the path is empty (leave --model out for the shipped stories260K model, or "
           "pass --model builtin for the random built-in model)");
  GenerateOptions g;
  g.prompt = parse_ids(o.prompt_ids);
  g.steps = o.steps;
  g.mode = parse_mode(o.mode);
  g.temperature = o.temperature;
  g.seed = parse_seed(o.seed_text);
  g.stop_id = o.stop_id;
  g.keep_logits = !o.dump_logits.empty();
  g.trace = !o.trace.empty();
  SG_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  if (o.threads) {
    SG_CHECK(*o.threads >= 1 && *o.threads <= kMaxThreads, "--threads must be from 1 to ",
             kMaxThreads, ", got ", *o.threads);
    set_num_threads(*o.threads);
  }
  SG_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  const auto logits_file = output_file(o.dump_logits, "--dump-logits");
  const auto trace_file = output_file(o.trace, "--trace");

  // stdout holds only the requested lines when --print-ids or --stats is given.
  const bool machine = o.print_ids || o.stats;
  std::FILE* report = machine ? stderr : stdout;
  const std::string model_path = o.model.empty() ? default_model_path() : o.model;
  const models::LlamaModel model = model_path == kBuiltin
                                       ? models::random_model(models::builtin_config(), 0)
                                       : models::load_model(model_path);
  const models::LlamaConfig& c = model.config();
  const auto prompt_tokens = static_cast<std::int64_t>(g.prompt.size());
  SG_CHECK(prompt_tokens <= c.max_seq_len && g.steps <= c.max_seq_len - prompt_tokens, "prompt (",
           g.prompt.size(), " tokens) plus --steps ", g.steps, " exceeds the model's seq_len ",
           c.max_seq_len);

  // Note [Streaming]: --stream writes the ids line as the ids come, the same
  // line --print-ids or the summary would print, one id at a time, flushed.
  // Each id must reach the host before it is printed, so the decode loop
  // waits for every token (the loop a stop id uses) instead of chaining
  // tokens on the device; with --stats alone there is no ids line to stream.
  const bool ids_line = o.print_ids || !machine;
  if (o.stream && ids_line) {
    std::fputs("ids:", stdout);
    g.on_token = [](std::int64_t id) {
      std::printf(" %lld", static_cast<long long>(id));
      std::fflush(stdout);
    };
  }
  const GenerateResult r = generate(model, g);
  if (o.stream && ids_line) std::fputs("\n", stdout);
  for (const auto& note : r.notes) sinkgraph::log(LogLevel::warn, note);

  if (logits_file) {
    logits_file->write(std::string_view(reinterpret_cast<const char*>(r.logits.data()),
                                        r.logits.size() * sizeof(float)));
    logits_file->commit();
  }
  if (trace_file) {
    trace_file->write(chrome_trace_json(r));
    trace_file->commit();
  }
  if (!o.explain.empty()) {
    const std::string& text = o.explain == "full" ? r.explain_full : r.explain;
    std::fprintf(report, "%s", text.empty() ? "eager mode: nothing compiled\n" : text.c_str());
  }

  std::string ids;
  for (const auto id : r.ids) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  if (o.print_ids && !o.stream) std::printf("ids: %s\n", ids.c_str());
  if (!machine) {
    const double tps =
        r.decode_seconds > 0 ? static_cast<double>(r.timed_decode_steps) / r.decode_seconds : 0;
    GraphCounters sum = r.prefill_counters;
    sum += r.decode_counters;
    if (!o.stream) std::printf("ids: %s\n", ids.c_str());
    std::printf("model: %s (%s)\n", model_path == kBuiltin ? "built-in random" : model_path.c_str(),
                c.str().c_str());
    std::printf("mode: %s\n", o.mode.c_str());
    std::printf("prefill: %zu tokens in %.2f ms\n", g.prompt.size(), r.prefill_seconds * 1e3);
    std::printf("decode: %.1f tokens/s (%.1f us per token over %lld steps after the first)\n", tps,
                tps > 0 ? 1e6 / tps : 0.0, static_cast<long long>(r.timed_decode_steps));
    std::printf(
        "graphs: %lld captured (prefill %lld, decode %lld), %lld replays; pools reserve %lld "
        "bytes\n",
        static_cast<long long>(sum.captured), static_cast<long long>(r.prefill_counters.captured),
        static_cast<long long>(r.decode_counters.captured), static_cast<long long>(sum.replayed),
        static_cast<long long>(sum.pool_reserved_bytes));
    std::printf("peak allocated: %lld bytes\n", static_cast<long long>(r.peak_allocated_bytes));
  }
  if (o.stats) std::printf("%s\n", stats_json(g, r).c_str());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& status) {
  auto o = std::make_shared<CliOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate token ids with a Llama model");
  o->model_option =
      cmd->add_option("--model", o->model,
                      "llama2.c .bin, .safetensors (config.json beside it), a folder (ours or a "
                      "Hugging Face Llama), or 'builtin' (random, dim 288); default: the shipped "
                      "stories260K");
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "prompt token ids, space separated (default: \"1\", BOS)");
  cmd->add_option("--steps", o->steps, "tokens to generate (default 128)");
  cmd->add_option("--mode", o->mode, "eager, reduce-overhead (default) or max-autotune")
      ->check(CLI::IsMember({"eager", "reduce-overhead", "max-autotune"}));
  cmd->add_option("--temperature", o->temperature, "0 (default) is greedy; > 0 samples");
  cmd->add_option("--seed", o->seed_text, "sampling seed, 0 to 2^64-1 (default 0)");
  cmd->add_option("--stop-id", o->stop_id, "stop after generating this id");
  cmd->add_flag("--print-ids", o->print_ids, "print one line 'ids: ...' with the generated ids");
  cmd->add_option("--dump-logits", o->dump_logits,
                  "write every row of logits as raw little-endian f32");
  cmd->add_flag("--stats", o->stats, "print one JSON line of statistics, last");
  cmd->add_option("--threads", o->threads,
                  "compute threads, the stream's worker included (default: SINKGRAPH_NUM_THREADS, "
                  "else the cores available)");
  cmd->add_flag("--explain{summary}", o->explain,
                "print the explain report: decisions and one line per device graph; "
                "--explain=full adds every node (stderr with --stats or --print-ids)")
      ->check(CLI::IsMember({"summary", "full"}));
  cmd->add_flag("--stream", o->stream,
                "print each id as it is produced (the host waits for every token)");
  cmd->add_option("--trace", o->trace, "write a Chrome trace event JSON file (Perfetto opens it)");
  cmd->callback([o, &status] { status = run(*o); });
}

}  // namespace sinkgraph::tools

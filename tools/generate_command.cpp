// `sinkgraph generate`: the contract in DESIGN.md ("sinkgraph generate").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.h"
#include "default_model.h"
#include "output_guard.h"
#include "sinkgraph/device.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/log.h"
#include "sinkgraph/tokenizer.h"

namespace sinkgraph::tools {

namespace {

struct CliOptions {
  std::string model;
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
  std::optional<std::int64_t> threads;
  std::string prompts_file;
  std::int64_t max_batch = 16;
  std::string capture_sizes;        // "1,2,4"; empty: the default buckets
  std::string graph_memory_budget;  // bytes; empty: no bound
  bool warmup_buckets = false;
  std::optional<std::int64_t> tensor_parallel;
  std::string tp_classifier = "vocab";
  std::string quantize;  // "", "q8_0" or "q4_0"
  std::string prompt;    // --prompt: text, encoded by the model's tokenizer
  CLI::Option* prompt_ids_option = nullptr;
  CLI::Option* prompt_option = nullptr;
  // Options that act only with --prompts-file; given without it they would
  // be silently ignored, so they are refused.
  std::vector<CLI::Option*> batch_only;
};

// Space-separated token ids, each a decimal integer read as every number of
// the command line is (Note [One way to read a value]); `where` names the
// text in messages.
std::vector<std::int64_t> parse_ids(const std::string& text,
                                    const std::string& where = "--prompt-ids") {
  std::vector<std::int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) ids.push_back(parse_integer(word, where));
  SG_CHECK(!ids.empty(), where, ": expected at least one token id");
  return ids;
}

// --prompts-file: one prompt per line, space-separated ids; a final newline
// is fine, an empty line in between is an error naming it.
std::vector<std::vector<std::int64_t>> read_prompts(const std::string& path) {
  const std::string text = read_text_file(path, std::uint64_t{64} << 20, "--prompts-file");
  std::vector<std::vector<std::int64_t>> prompts;
  std::istringstream in(text);
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    prompts.push_back(parse_ids(line, fmt::format("--prompts-file {} line {}", path, number)));
  }
  SG_CHECK(!prompts.empty(), "--prompts-file ", path, ": the file has no prompts");
  return prompts;
}

// An unsigned 64-bit decimal: "-1" and 2^64 are errors, not wrapped values.
std::uint64_t parse_seed(const std::string& text) { return parse_unsigned(text, "--seed"); }

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

// Note [Tensor-parallel generate]
// `mpirun -np N sinkgraph generate --tensor-parallel N ...` runs one rank per
// process, each holding its shard of the model (Note [Tensor-parallel Llama]
// in src/models/llama.cpp) and loading only that shard from the checkpoint.
// MPI is initialised only under a launcher or with --tensor-parallel: a plain
// run never touches it (nor, in a build without MPI, a run under a launcher
// without the flag: it runs as one process). N must be the world size, checked on every rank
// before anything else, so a mismatch is the same clear error everywhere,
// and each rank exits with it by itself (SameOnEveryRank, commands.h).
// Every rank runs the same decode loop (the same collectives in the same
// order) and computes the same ids; rank 0 alone writes stdout and output
// files, and only its explain report goes to stderr. A rank that fails ends
// the job (main() calls dist::abort), so the others never wait in a
// collective for it. Without --threads or SINKGRAPH_NUM_THREADS each rank
// takes its share of the machine's cores.
struct Parallel {
  models::TensorParallel tp;
  bool primary = true;  // rank 0, or no tensor parallelism
};

Parallel setup_parallel(const CliOptions& o) {
  if (!o.tensor_parallel && (!dist::launched_by_mpi() || !dist::available())) return {};
  const std::int64_t n = o.tensor_parallel.value_or(1);
  SG_CHECK(n >= 1, "--tensor-parallel must be >= 1, got ", n);
  dist::init();
  const int world = dist::world_size();
  if (n != world) {
    throw SameOnEveryRank(detail::concat(
        "--tensor-parallel ", n, " must equal the MPI world size, ", world,
        world == 1 ? " (start it as mpirun -np N sinkgraph generate --tensor-parallel N ...)"
                   : " (give --tensor-parallel the -np of mpirun)"));
  }
  const int local = dist::local_size();
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread of ours starts
  if (!o.threads && std::getenv("SINKGRAPH_NUM_THREADS") == nullptr) {
    set_num_threads(std::max(1, available_cores() / local));
  }
  const dist::Communicator comm = dist::Communicator::world();
  Parallel p;
  p.tp = {comm.group(), comm.rank(), comm.size(),
          o.tp_classifier == "replicated" ? models::ClassifierSplit::replicated
                                          : models::ClassifierSplit::vocab};
  p.primary = comm.rank() == 0;
  if (!p.primary) {
    // Only rank 0 prints; stderr stays, so every rank's error is seen.
    SG_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "cannot redirect rank ",
             comm.rank(), "'s stdout to /dev/null");
  }
  return p;
}

// The model --model names, holding rank tp.rank's shard only, its weight
// matrices quantized when --quantize asks.
models::LlamaModel load(const std::string& path, const models::TensorParallel& tp,
                        const std::string& quantize) {
  models::LlamaModel model = [&] {
    if (path != kBuiltin) return models::load_model(path, tp);
    models::LlamaModel whole = models::random_model(models::builtin_config(), 0);
    return tp.size == 1 ? whole : models::shard_model(whole, tp);
  }();
  if (quantize.empty()) return model;
  return models::quantize_model(
      model, quantize == "q8_0" ? ops::QuantFormat::q8_0 : ops::QuantFormat::q4_0);
}

// The library names a bad stop id; the command names its flag.
void check_stop_id(const CliOptions& o, const models::LlamaModel& model) {
  const std::int64_t vocab = model.config().vocab_size;
  SG_CHECK(!o.stop_id || (*o.stop_id >= 0 && *o.stop_id < vocab), "generate: --stop-id ",
           o.stop_id.value_or(0), " is out of range for a vocabulary of ", vocab,
           " (it could never be generated)");
}

int run_batched(const CliOptions& o, std::vector<std::vector<std::int64_t>> prompts,
                const models::LlamaModel& model, const std::string& model_path, bool primary) {
  SG_CHECK(o.prompt_ids_option == nullptr || o.prompt_ids_option->count() == 0,
           "--prompts-file and --prompt-ids: give one of them");
  SG_CHECK(o.prompt_option == nullptr || o.prompt_option->count() == 0,
           "--prompts-file and --prompt: give one of them");
  SG_CHECK(o.dump_logits.empty() && o.trace.empty() && !o.stream,
           "--prompts-file does not support --dump-logits, --trace or --stream yet");
  check_stop_id(o, model);
  BatchOptions b;
  b.prompts = std::move(prompts);
  b.steps = o.steps;
  b.temperature = o.temperature;
  b.seed = parse_seed(o.seed_text);
  if (o.stop_id) b.stop_ids = {*o.stop_id};
  GeneratorConfig g;
  g.mode = parse_mode(o.mode);
  g.max_batch = o.max_batch;
  // The buckets and their budget are CompilerConfig options: one parser.
  CompilerConfig config;
  if (!o.capture_sizes.empty()) config.set("capture_sizes", o.capture_sizes);
  if (!o.graph_memory_budget.empty()) config.set("graph_memory_budget", o.graph_memory_budget);
  g.capture_sizes = config.capture_sizes;
  g.graph_memory_budget = config.graph_memory_budget;
  g.warmup_buckets = o.warmup_buckets;
  const bool machine = o.print_ids || o.stats;
  std::FILE* report = machine ? stderr : stdout;
  const BatchResult r = generate_batch(model, b, g);
  for (const auto& note : r.notes) sinkgraph::log(LogLevel::warn, note);
  if (!o.explain.empty() && primary) {
    const std::string& text = o.explain == "full" ? r.explain_full : r.explain;
    std::fprintf(report, "%s%s", text.empty() ? "eager mode: nothing compiled\n" : text.c_str(),
                 r.bucket_report().c_str());
  }
  if (o.print_ids || !machine) {
    for (const auto& ids : r.ids) {
      std::string line;
      for (const auto id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
      std::printf("ids: %s\n", line.c_str());
    }
  }
  if (!machine) {
    std::printf("model: %s (%s)\n", model_path == kBuiltin ? "built-in random" : model_path.c_str(),
                model.config().str().c_str());
    std::printf("mode: %s\n", o.mode.c_str());
    std::printf("prompts: %zu, at most %lld decoded together\n", b.prompts.size(),
                static_cast<long long>(g.max_batch));
    std::printf("decode: %.1f tokens/s over all sequences (%lld steps)\n", r.decode_tokens_per_s(),
                static_cast<long long>(r.decode_steps));
    std::printf("batch buckets captured: %lld\n", static_cast<long long>(r.batch_buckets_captured));
  }
  if (o.stats) std::printf("%s\n", r.stats_json().c_str());
  return 0;
}

int run(const CliOptions& o) {
  SG_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  SG_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  if (o.threads) {
    SG_CHECK(*o.threads >= 1 && *o.threads <= kMaxThreads, "--threads must be from 1 to ",
             kMaxThreads, ", got ", *o.threads);
    set_num_threads(static_cast<int>(*o.threads));
  }
  if (o.prompts_file.empty()) {
    for (const CLI::Option* opt : o.batch_only) {
      SG_CHECK(opt->count() == 0, opt->get_name(),
               " acts only with --prompts-file (many prompts decoded together); without it the "
               "flag would change nothing");
    }
  }
  const Parallel parallel = setup_parallel(o);
  if (!o.prompts_file.empty()) {
    SG_CHECK(o.max_batch >= 1, "--max-batch must be >= 1, got ", o.max_batch);
    auto prompts = read_prompts(o.prompts_file);  // a bad file fails before the model loads
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    return run_batched(o, std::move(prompts), load(path, parallel.tp, o.quantize), path,
                       parallel.primary);
  }
  GenerateOptions g;
  // Note [Text in and out]: --prompt is encoded with the tokenizer the
  // checkpoint carries (load_tokenizer: GGUF metadata, or a Hugging Face
  // folder's tokenizer.json); the summary then prints the text of the prompt
  // and the generated ids. --print-ids, --stats and --stream keep to ids.
  const std::string model_path = o.model.empty() ? default_model_path() : o.model;
  const std::optional<models::Tokenizer> tokenizer =
      model_path == kBuiltin ? std::nullopt : models::load_tokenizer(model_path);
  if (o.prompt_option->count() > 0) {
    SG_CHECK(o.prompt_ids_option->count() == 0, "--prompt and --prompt-ids: give one of them");
    SG_CHECK(tokenizer.has_value(), "--prompt: ", model_path,
             " carries no tokenizer (a GGUF file with tokenizer.ggml.* metadata, or a Hugging "
             "Face folder with tokenizer.json, has one); give token ids with --prompt-ids");
    g.prompt = tokenizer->encode(o.prompt, tokenizer->add_bos());
    SG_CHECK(!g.prompt.empty(), "--prompt: \"", o.prompt, "\" encodes to no tokens");
  } else {
    g.prompt = parse_ids(o.prompt_ids);
  }
  g.steps = o.steps;
  g.temperature = o.temperature;
  g.seed = parse_seed(o.seed_text);
  if (o.stop_id) g.stop_ids = {*o.stop_id};
  GeneratorConfig config;
  config.mode = parse_mode(o.mode);
  g.keep_logits = !o.dump_logits.empty();
  g.trace = !o.trace.empty();
  // Output files are rank 0's (Note [Tensor-parallel generate]), and never
  // an input (Note [Outputs never overwrite inputs]).
  {
    auto inputs = files_read_from(o.model.empty() ? default_model_path() : o.model);
    check_output_is_no_input(o.dump_logits, "--dump-logits", inputs);
    check_output_is_no_input(o.trace, "--trace", inputs);
    std::error_code ec;
    SG_CHECK(o.dump_logits.empty() || o.trace.empty() ||
                 std::filesystem::weakly_canonical(o.dump_logits, ec) !=
                     std::filesystem::weakly_canonical(o.trace, ec),
             "--dump-logits and --trace name the same file ", o.dump_logits);
  }
  const auto logits_file = output_file(parallel.primary ? o.dump_logits : "", "--dump-logits");
  const auto trace_file = output_file(parallel.primary ? o.trace : "", "--trace");

  // stdout holds only the requested lines when --print-ids or --stats is given.
  const bool machine = o.print_ids || o.stats;
  std::FILE* report = machine ? stderr : stdout;
  const models::LlamaModel model = load(model_path, parallel.tp, o.quantize);
  const models::LlamaConfig& c = model.config();
  check_stop_id(o, model);
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
  const GenerateResult r = generate(model, g, config);
  if (o.stream && ids_line) std::fputs("\n", stdout);
  for (const auto& note : r.notes) sinkgraph::log(LogLevel::warn, note);

  if (logits_file) {
    logits_file->write(std::string_view(reinterpret_cast<const char*>(r.logits.data()),
                                        r.logits.size() * sizeof(float)));
    logits_file->commit();
  }
  if (trace_file) {
    trace_file->write(r.chrome_trace_json());
    trace_file->commit();
  }
  if (!o.explain.empty() && parallel.primary) {
    const std::string& text = o.explain == "full" ? r.explain_full : r.explain;
    std::fprintf(report, "%s", text.empty() ? "eager mode: nothing compiled\n" : text.c_str());
  }

  std::string ids;
  for (const auto id : r.ids) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  if (o.print_ids && !o.stream) std::printf("ids: %s\n", ids.c_str());
  if (!machine) {
    const double tps = r.decode_tokens_per_s();
    GraphCounters sum = r.prefill_counters;
    sum += r.decode_counters;
    if (!o.stream) std::printf("ids: %s\n", ids.c_str());
    if (tokenizer) {
      std::vector<std::int64_t> all = g.prompt;
      all.insert(all.end(), r.ids.begin(), r.ids.end());
      std::printf("text: %s\n", tokenizer->decode(all).c_str());
    }
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
  if (o.stats) std::printf("%s\n", r.stats_json().c_str());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& status) {
  auto o = std::make_shared<CliOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate token ids with a Llama model");
  cmd->add_option("--model", o->model,
                  "llama2.c .bin, .safetensors (config.json beside it), a folder (ours or a "
                  "Hugging Face Llama), or 'builtin' (random, dim 288); default: the shipped "
                  "stories260K");
  o->prompt_option = cmd->add_option(
      "--prompt", o->prompt,
      "prompt text, encoded by the model's tokenizer (GGUF or Hugging Face tokenizer.json)");
  o->prompt_ids_option = cmd->add_option("--prompt-ids", o->prompt_ids,
                                         "prompt token ids, space separated (default: \"1\", BOS)");
  cmd->add_option("--prompts-file", o->prompts_file,
                  "decode many prompts together: one prompt per line, space-separated ids");
  o->batch_only = {
      cmd->add_option("--max-batch", o->max_batch,
                      "with --prompts-file: sequences decoded together (default 16)"),
      cmd->add_option("--capture-sizes", o->capture_sizes,
                      "with --prompts-file: batch buckets, one graph each (default "
                      "1,2,4,8,16,32)"),
      cmd->add_option("--graph-memory-budget", o->graph_memory_budget,
                      "with --prompts-file: bytes the bucket graphs' pools may reach; past it, "
                      "larger buckets run eagerly (default: no bound)"),
      cmd->add_flag("--warmup-buckets", o->warmup_buckets,
                    "with --prompts-file: capture every bucket before decoding, not on first "
                    "use")};
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
  cmd->add_option("--quantize", o->quantize,
                  "compute with the weight matrices quantized at load: q8_0 or q4_0 (ggml's "
                  "block formats; a GGUF file's Q8_0/Q4_0 weights need no flag)")
      ->check(CLI::IsMember({"q8_0", "q4_0"}));
  cmd->add_option("--tensor-parallel", o->tensor_parallel,
                  "split the model over N processes: mpirun -np N sinkgraph generate "
                  "--tensor-parallel N (rank 0 prints)");
  cmd->add_option("--tp-classifier", o->tp_classifier,
                  "with --tensor-parallel: vocab (default; each rank holds a slice of the "
                  "classifier's rows, logits gathered) or replicated")
      ->check(CLI::IsMember({"vocab", "replicated"}));
  cmd->callback([o, &status] { status = run(*o); });
}

}  // namespace sinkgraph::tools

// bench_e2e: decode speed of one Llama model in every way we can run it, in
// one run, on one compute thread (docs/performance.md, "End to end"):
//   (a) reference       a plain hand-written forward pass (reference.cpp,
//                       -O3 -march=native -ffast-math): the zero-overhead bar
//   (b) eager           sinkgraph, operator by operator
//   (c) reduce-overhead sinkgraph, captured and replayed
//   (d) max-autotune    sinkgraph, passes + capture and replay
//   (e) torch           a PyTorch eager implementation (torch_llama.py), when
//                       Debian's python3-torch is installed
// on stories260K (greedy from BOS; every column must produce the reference
// ids), on a larger random model and on any checkpoint given with --model
// (teacher-forced logits must agree within 1e-3, since greedy near-ties make
// ids fragile there). Columns alternate within each repetition, so machine
// noise hits them alike; figures are medians. Per model it also reports the
// bandwidth floor (the weights read per step over this machine's single-core
// read bandwidth, bench/read_bandwidth.h), each column's step over that
// floor, peak allocated bytes, and the time to first token of max-autotune
// with an empty compile cache (cold) and a filled one (warm) and of
// reduce-overhead, each in a fresh process. Writes a table (stdout and
// results.md), results.json and one SVG plot per model of per-token latency
// against position.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "line_plot.h"
#include "random_config.h"
#include "read_bandwidth.h"
#include "reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/stream.h"

namespace {

namespace fs = std::filesystem;
namespace sg = sinkgraph;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One decode run of one column.
struct Run {
  std::vector<std::int64_t> ids;
  std::vector<double> step_us;  // per decode step (positions 1 .. N-1)
  double us_per_token = 0;      // decode steps after the first, wall time
};

struct Column {
  std::string key, label;
  std::vector<Run> runs;
  std::int64_t pool_bytes = -1;  // graph pools after the last run (graph modes)
  // generate's peak_allocated_bytes (weights included), the largest over the
  // runs (sinkgraph columns).
  std::int64_t peak_bytes = -1;
  // The decode graph's planned arena and the liveness lower bound (max-autotune).
  std::int64_t planned_bytes = -1, lower_bound_bytes = -1;
  [[nodiscard]] double us_per_token() const {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(r.us_per_token);
    return median(v);
  }
  // Per position: the median over runs.
  [[nodiscard]] std::vector<double> latency_by_position() const {
    std::vector<double> out;
    if (runs.empty()) return out;
    for (std::size_t i = 0; i < runs.front().step_us.size(); ++i) {
      std::vector<double> v;
      for (const Run& r : runs) {
        if (i < r.step_us.size()) v.push_back(r.step_us[i]);
      }
      out.push_back(median(v));
    }
    return out;
  }
};

std::int64_t argmax(std::span<const float> row) {
  return static_cast<std::int64_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// (a): greedy from BOS, or teacher-forced when `forced` is given (then the
// logits of every position are appended to `logits`).
Run run_reference(sg::e2e::ReferenceLlama& ref, std::int64_t steps,
                  const std::vector<std::int64_t>* forced = nullptr,
                  std::vector<float>* logits = nullptr) {
  ref.reset();
  Run run;
  std::int64_t token = 1;
  Clock::time_point decode_start;
  for (std::int64_t pos = 0; pos < steps; ++pos) {
    if (pos == 2) decode_start = Clock::now();
    const auto t0 = Clock::now();
    const std::span<const float> row = ref.forward(token, pos);
    const std::int64_t next = argmax(row);
    if (pos >= 1) run.step_us.push_back(1e6 * seconds_since(t0));
    if (logits != nullptr) logits->insert(logits->end(), row.begin(), row.end());
    run.ids.push_back(next);
    token = forced != nullptr ? (*forced)[static_cast<std::size_t>(pos)] : next;
  }
  if (steps > 2)
    run.us_per_token = 1e6 * seconds_since(decode_start) / static_cast<double>(steps - 2);
  return run;
}

// sinkgraph's generate driver in one mode: fresh compiled functions (prefill
// and decode), prefill of BOS, then steps - 1 decode steps.
sg::GenerateResult generate_in_mode(const sg::models::LlamaModel& model, sg::Mode mode,
                                    std::int64_t steps,
                                    const std::vector<std::int64_t>* forced = nullptr) {
  sg::GenerateOptions options;
  options.steps = steps;
  if (forced != nullptr) {
    options.forced_ids.assign(forced->begin(), forced->begin() + (steps - 1));
    options.keep_logits = true;
  }
  return sg::generate(model, options, {mode});
}

// (b)-(d): one decode run of one mode.
Run run_mode(const sg::models::LlamaModel& model, sg::Mode mode, std::int64_t steps, Column* column,
             const std::vector<std::int64_t>* forced = nullptr,
             std::vector<float>* logits = nullptr) {
  sg::GenerateResult r = generate_in_mode(model, mode, steps, forced);
  Run run;
  run.ids = std::move(r.ids);
  run.step_us = std::move(r.step_us);
  run.us_per_token = r.timed_decode_steps > 0
                         ? 1e6 * r.decode_seconds / static_cast<double>(r.timed_decode_steps)
                         : 0;
  if (column != nullptr) column->peak_bytes = std::max(column->peak_bytes, r.peak_allocated_bytes);
  if (column != nullptr && mode != sg::Mode::eager) {
    column->pool_bytes =
        r.prefill_counters.pool_reserved_bytes + r.decode_counters.pool_reserved_bytes;
    if (mode == sg::Mode::max_autotune) {
      column->planned_bytes = r.decode_counters.planned_arena_bytes;
      column->lower_bound_bytes = r.decode_counters.liveness_lower_bound_bytes;
    }
  }
  if (logits != nullptr) *logits = std::move(r.logits);
  return run;
}

// (e): torch_llama.py through Debian's python3. Returns false when torch is
// not installed (exit status 3) and throws on any other failure.
bool run_torch(const std::string& script, const std::string& model_path, std::int64_t steps,
               const fs::path& out, Run& run, const std::vector<std::int64_t>* forced = nullptr,
               std::vector<float>* logits = nullptr) {
  std::string cmd = "/usr/bin/python3 '" + script + "' '" + model_path + "' --steps " +
                    std::to_string(steps) + " --json '" + out.string() + "'";
  if (forced != nullptr) {
    std::string ids;
    for (std::int64_t i = 0; i + 1 < steps; ++i) ids += std::to_string((*forced)[i]) + " ";
    cmd += " --teacher-forced-ids '" + ids + "'";
  }
  cmd += " > /dev/null";
  const int status = std::system(cmd.c_str());
  if (status != 0 && WIFEXITED(status) && WEXITSTATUS(status) == 3) return false;
  SG_CHECK(status == 0, "bench_e2e: '", cmd, "' failed with status ", status);
  std::ifstream file(out);
  const json j = json::parse(file);
  run.ids = j.at("ids").get<std::vector<std::int64_t>>();
  const auto steps_us = j.at("step_us").get<std::vector<double>>();
  // step_us[0] is position 0 (BOS); the decode steps are the rest.
  run.step_us.assign(steps_us.begin() + (steps_us.empty() ? 0 : 1), steps_us.end());
  std::vector<double> timed(run.step_us.begin() + (run.step_us.empty() ? 0 : 1), run.step_us.end());
  double total = 0;
  for (const double t : timed) total += t;
  run.us_per_token = timed.empty() ? 0 : total / static_cast<double>(timed.size());
  if (logits != nullptr) {
    logits->clear();
    for (const auto& row : j.at("logits")) {
      for (const auto& v : row) logits->push_back(v.get<float>());
    }
  }
  return true;
}

// The memory-bound floor of one decode step: the same matrix-vector products
// the step does, run back to back by OpenBLAS alone (median of `reps`), on
// the model's own weight tensors: the same bytes in the same memory (2 MiB
// pages, Note [Huge pages for large blocks]), so the floor is not slowed by
// a different page size than the step it bounds.
double sgemv_floor_us(const sg::models::LlamaModel& model, int reps) {
  struct Mat {
    sg::Tensor t;  // contiguous f32 [rows, cols]
    int rows, cols;
  };
  std::vector<Mat> mats;
  const auto add = [&](const sg::Tensor& t) {
    SG_CHECK(t.dtype() == sg::DType::f32, "bench_e2e: the floor expects f32 weights");
    mats.push_back(
        {t.contiguous(), static_cast<int>(t.shape()[0]), static_cast<int>(t.shape()[1])});
  };
  for (const auto& l : model.weights().layers) {
    for (const sg::Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3, &l.w2}) add(*t);
  }
  add(model.weights().output);
  sg::current_stream().synchronize();
  int widest = 0;
  for (const Mat& m : mats) widest = std::max({widest, m.rows, m.cols});
  std::vector<float> x(static_cast<std::size_t>(widest), 0.5F), y(x.size());
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (const Mat& m : mats) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, m.rows, m.cols, 1.0F,
                  static_cast<const float*>(m.t.data_ptr()), m.cols, x.data(), 1, 0.0F, y.data(),
                  1);
    }
    times.push_back(1e6 * seconds_since(t0));
  }
  return median(times);
}

// Bytes of the model's weights: held (each tensor once, a shared classifier
// once) and read by one decode step (every layer weight and norm, the final
// norm and the classifier; of a separate embedding table only the one row).
// The KV cache's reads are not counted: at these positions they are a few
// percent of the weights, and the floor stays a lower bound.
struct WeightBytes {
  std::int64_t held = 0, per_step = 0;
};

WeightBytes weight_bytes(const sg::models::LlamaModel& model) {
  const auto bytes_of = [](const sg::Tensor& t) {
    return t.numel() * static_cast<std::int64_t>(sg::dtype_size(t.dtype()));
  };
  const sg::models::LlamaWeights& w = model.weights();
  std::set<const void*> seen;
  WeightBytes out;
  const auto hold = [&](const sg::Tensor& t) {
    if (seen.insert(t.data_ptr()).second) out.held += bytes_of(t);
  };
  hold(w.tok_embeddings);
  for (const auto& l : w.layers) {
    for (const sg::Tensor* t :
         {&l.attention_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w1, &l.w2, &l.w3}) {
      hold(*t);
    }
  }
  hold(w.norm);
  hold(w.output);
  out.per_step = out.held;
  if (w.output.data_ptr() != w.tok_embeddings.data_ptr()) {
    out.per_step -= bytes_of(w.tok_embeddings);
    out.per_step +=
        bytes_of(w.tok_embeddings) / std::max<std::int64_t>(w.tok_embeddings.size(0), 1);
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A private temporary folder (mkdtemp: 0700, as the compile cache wants),
// removed with everything in it when this goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sinkgraph-bench-XXXXXX").string();
    SG_CHECK(::mkdtemp(pattern.data()) != nullptr, "bench_e2e: cannot create a folder like ",
             pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Time to first token, measured in a process of its own (bench_e2e
// --ttft-child): the compile cache keeps every region it loaded for the
// life of the process (docs/codegen.md), so in this process a second
// compile of the same graph would be served from memory, neither cold nor
// from the disk cache.
//
// Note [Warm start is bounded by the weights]
// A warm start takes compilation out (the generated objects and saved graphs
// come from the disk), but not the work: the prefill and the first decode
// step each read every weight once. On a small model that is microseconds
// and warm ÷ cold is a fraction of a percent; on a model of gigabytes one
// pass is a large share of the cold start itself, and no cache can take it
// out. So the report prints that pass (the step's bandwidth floor) and the
// ratio below which warm ÷ cold cannot fall on this machine.
struct FirstToken {
  double ms = 0;          // fresh compiled functions + prefill + first decode step
  double prefill_ms = 0;  // of which: compile and run the prefill
  std::int64_t codegen_kernels = 0, compile_cache_hits = 0;
  std::vector<std::int64_t> ids;
};

// The child: loads the model (not timed), points the compile cache at
// `cache`, then times generate() of 2 tokens: compiling both functions,
// prefill of BOS (the first id) and the first decode step (the second).
int first_token_child(const std::string& mode_text, const std::string& cache,
                      const std::string& out, const std::string& model_path,
                      const std::string& random_kind);

FirstToken first_token_in_child(const std::string& model_args, sg::Mode mode, const fs::path& cache,
                                const fs::path& out) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = shell_quote(self) + " --ttft-child " + sg::mode_name(mode) +
                          " --ttft-cache " + shell_quote(cache.string()) + " --ttft-out " +
                          shell_quote(out.string()) + " " + model_args + " > /dev/null";
  std::error_code ec;
  fs::remove(out, ec);
  const int status = std::system(cmd.c_str());
  SG_CHECK(status == 0, "bench_e2e: '", cmd, "' failed with status ", status);
  std::ifstream file(out);
  const json j = json::parse(file);
  FirstToken t;
  t.ms = j.at("ms").get<double>();
  t.prefill_ms = j.at("prefill_ms").get<double>();
  t.codegen_kernels = j.at("codegen_kernels").get<std::int64_t>();
  t.compile_cache_hits = j.at("compile_cache_hits").get<std::int64_t>();
  t.ids = j.at("ids").get<std::vector<std::int64_t>>();
  return t;
}

std::string svg_plot(const std::string& title, const std::vector<const Column*>& columns) {
  std::vector<sg::bench::PlotSeries> series;
  for (const Column* c : columns) {
    sg::bench::PlotSeries s{c->label, {}, c->latency_by_position()};
    for (std::size_t i = 0; i < s.y.size(); ++i) s.x.push_back(static_cast<double>(i + 1));
    series.push_back(std::move(s));
  }
  return sg::bench::line_plot({.title = title,
                               .x_label = "position (decode step)",
                               .y_label = "µs per token (median over runs)",
                               .clip_outliers = true},
                              series);
}

// One model to bench. It is loaded only when its turn comes and freed after:
// generate's peak_allocated_bytes counts everything the device allocator
// holds, so another model's weights must not be resident meanwhile.
struct Bench {
  std::string name;
  std::function<sg::models::LlamaModel()> load;  // also writes model_path when torch needs it
  std::string model_path;                        // for torch_llama.py
  std::int64_t steps;
  bool check_ids;  // stories260K: ids; else teacher-forced logits
  std::vector<std::int64_t> expected_ids;
  std::string child_model_args;  // how a --ttft-child process loads the same model
  bool torch = true;             // false: --model checkpoints, run without PyTorch
};

using sg::e2e::random_config;

int first_token_child(const std::string& mode_text, const std::string& cache,
                      const std::string& out, const std::string& model_path,
                      const std::string& random_kind) {
  SG_CHECK(!cache.empty() && !out.empty(),
           "bench_e2e: --ttft-child needs --ttft-cache and --ttft-out");
  SG_CHECK(::setenv("SINKGRAPH_CACHE_DIR", cache.c_str(), 1) == 0,
           "bench_e2e: cannot set SINKGRAPH_CACHE_DIR");
  sg::set_num_threads(1);
  const sg::Mode mode = sg::parse_mode(mode_text);
  const sg::models::LlamaModel model =
      model_path.empty() ? sg::models::random_model(random_config(random_kind == "tiny"), 0)
                         : sg::models::load_model(model_path);
  sg::current_stream().synchronize();
  const auto t0 = Clock::now();
  const sg::GenerateResult r = generate_in_mode(model, mode, 2);
  const double ms = 1e3 * seconds_since(t0);
  sg::GraphCounters sum = r.prefill_counters;
  sum += r.decode_counters;
  const json j = {{"mode", mode_text},
                  {"ms", ms},
                  {"prefill_ms", 1e3 * r.prefill_seconds},
                  {"codegen_kernels", r.decode_counters.codegen_kernels},
                  {"compile_cache_hits", sum.compile_cache_hits},
                  {"ids", r.ids}};
  std::ofstream file(out);
  file << j.dump() << "\n";
  file.close();
  SG_CHECK(file.good(), "bench_e2e: cannot write ", out);
  return 0;
}

// The name a --model checkpoint is reported under: NAME=PATH names it;
// else the file's stem, or its folder's name for a "model.safetensors" file
// or a folder.
std::pair<std::string, std::string> model_name_and_path(const std::string& arg) {
  const std::size_t eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && arg.find('/') > eq) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  fs::path p(arg);
  if (!p.has_filename()) p = p.parent_path();  // "folder/"
  std::string name = fs::is_directory(p) ? p.filename().string() : p.stem().string();
  if ((name == "model" || name.empty()) && p.has_parent_path()) {
    name = p.parent_path().filename().string();
  }
  return {name.empty() ? "model" : name, arg};
}

double median_of(const std::vector<FirstToken>& runs, double FirstToken::*field) {
  std::vector<double> v;
  for (const FirstToken& r : runs) v.push_back(r.*field);
  return median(v);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bench_e2e: decode tokens/s of the reference, eager, reduce-overhead, max-autotune "
      "and PyTorch, in one run"};
  std::string stories = std::string(SG_SHARED_DIR) + "/models/stories260K";
  std::string out_dir = "bench-e2e";
  std::string torch = "auto";
  int reps = 5;
  bool tiny = false;
  std::vector<std::string> model_args;
  std::int64_t model_steps = 64;
  std::vector<std::string> only;
  bool skip_builtin = false;
  // 512 MiB, or twice the last-level cache the CPU reports when that is more.
  std::size_t bandwidth_bytes =
      std::max(std::size_t{512} << 20, 2 * sg::bench::last_level_cache_bytes());
  int bandwidth_reps = 5;
  int ttft_reps = 3;
  // The time-to-first-token child (hidden: bench_e2e starts it itself).
  std::string child_mode, child_cache, child_out, child_model, child_random;
  app.add_option("--stories", stories, "folder of stories260K (skipped when absent)");
  app.add_option("--out", out_dir, "folder for results.md, results.json and the plots");
  app.add_option("--reps", reps, "repetitions per column (medians are reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--torch", torch, "auto (when python3-torch is installed) or off")
      ->check(CLI::IsMember({"auto", "off"}));
  app.add_flag("--tiny", tiny,
               "smoke test: a tiny random model, 24 tokens, one repetition (asserts agreement, "
               "not speed)");
  app.add_option("--model", model_args,
                 "also bench this checkpoint (anything `sinkgraph generate --model` reads; "
                 "NAME=PATH names it), teacher-forced logits checked against (a), no PyTorch "
                 "column; repeatable");
  app.add_option("--steps", model_steps, "decode steps for the --model checkpoints")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{3}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--only", only,
                 "bench only these models, comma-separated: stories260K, random-512 "
                 "(random-tiny with --tiny), and the --model names")
      ->delimiter(',');
  app.add_flag("--skip-builtin", skip_builtin,
               "bench only the --model checkpoints (no stories260K, no random model)");
  app.add_option("--bandwidth-bytes", bandwidth_bytes,
                 "buffer for the single-core read bandwidth behind the floor (default 512 MiB or "
                 "twice the reported last-level cache, whichever is more; 64 MiB with --tiny)")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 40));
  app.add_option("--bandwidth-reps", bandwidth_reps,
                 "repetitions of that measurement, median used (default 5; 3 with --tiny)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ttft-reps", ttft_reps,
                 "time-to-first-token rounds per model (each: max-autotune cold in an empty "
                 "temporary compile cache, then warm, then reduce-overhead, each a fresh "
                 "process; 1 with --tiny); 0 skips them")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ttft-child", child_mode)->group("");
  app.add_option("--ttft-cache", child_cache)->group("");
  app.add_option("--ttft-out", child_out)->group("");
  app.add_option("--ttft-model", child_model)->group("");
  app.add_option("--ttft-random", child_random)->group("");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!child_mode.empty()) {
      return first_token_child(child_mode, child_cache, child_out, child_model, child_random);
    }
    sg::set_num_threads(1);
    fs::create_directories(out_dir);
    const std::string script = std::string(SG_BENCH_DIR) + "/e2e/torch_llama.py";
    if (tiny) {
      reps = 1;
      if (app.count("--bandwidth-bytes") == 0) bandwidth_bytes = std::size_t{64} << 20;
      if (app.count("--bandwidth-reps") == 0) bandwidth_reps = 3;
      if (app.count("--ttft-reps") == 0) ttft_reps = 1;
    }

    // Which models: names first, so a typo fails before any work.
    const std::string random_name = tiny ? "random-tiny" : "random-512";
    std::vector<std::pair<std::string, std::string>> models;
    for (const std::string& a : model_args) {
      auto [name, path] = model_name_and_path(a);
      std::string unique = name;
      for (int k = 2; std::any_of(models.begin(), models.end(),
                                  [&](const auto& m) { return m.first == unique; }) ||
                      unique == random_name || unique == "stories260K";
           ++k) {
        unique = name + "-" + std::to_string(k);
      }
      models.emplace_back(unique, path);
    }
    for (const std::string& n : only) {
      const bool known =
          n == "stories260K" || n == random_name ||
          std::any_of(models.begin(), models.end(), [&](const auto& m) { return m.first == n; });
      std::string names = "stories260K, " + random_name;
      for (const auto& m : models) names += ", " + m.first;
      SG_CHECK(known, "bench_e2e: --only names '", n, "', not one of: ", names);
    }
    const auto wanted = [&](const std::string& name, bool builtin) {
      if (builtin && skip_builtin) return false;
      return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
    };

    // The machine's single-core read bandwidth, once per run, before any
    // model is loaded.
    std::fprintf(stderr, "bench_e2e: single-core read bandwidth over %zu MiB, %d repetitions\n",
                 bandwidth_bytes >> 20, bandwidth_reps);
    const sg::bench::BandwidthResult bandwidth =
        sg::bench::measure_single_core_read_bandwidth(bandwidth_bytes, bandwidth_reps);
    const double gb_per_s = bandwidth.median_gb_per_s;

    std::vector<Bench> benches;
    const fs::path stories_bin = fs::path(stories) / "stories260K.bin";
    if (!tiny && wanted("stories260K", true) && fs::exists(stories_bin)) {
      std::vector<std::int64_t> ids;
      std::ifstream f(fs::path(stories) / "bos_greedy_200.txt");
      for (std::int64_t id = 0; f >> id;) ids.push_back(id);
      benches.push_back({"stories260K",
                         [p = stories_bin.string()] { return sg::models::load_model(p); },
                         stories_bin.string(), 200, true, ids,
                         "--ttft-model " + shell_quote(stories_bin.string())});
    } else if (!tiny && wanted("stories260K", true)) {
      std::fprintf(stderr, "bench_e2e: %s not found; skipping stories260K\n",
                   stories_bin.string().c_str());
    }
    if (wanted(random_name, true)) {
      const std::string path = (fs::path(out_dir) / "random_model.safetensors").string();
      const auto load = [tiny, path, save = torch != "off"] {
        sg::models::LlamaModel random = sg::models::random_model(random_config(tiny), 0);
        if (save) sg::models::save_model(random, path, sg::models::CheckpointFormat::safetensors);
        return random;
      };
      benches.push_back({random_name,
                         load,
                         path,
                         tiny ? 24 : 256,
                         false,
                         {},
                         std::string("--ttft-random ") + (tiny ? "tiny" : "512")});
    }
    for (const auto& [name, path] : models) {
      if (!wanted(name, false)) continue;
      SG_CHECK(fs::exists(path), "bench_e2e: --model ", path, " does not exist");
      const auto load = [path, model_steps] {
        sg::models::LlamaModel m = sg::models::load_model(path);
        SG_CHECK(model_steps < m.config().max_seq_len, "bench_e2e: --steps ", model_steps,
                 " needs more positions than ", path, "'s max_seq_len ", m.config().max_seq_len);
        return m;
      };
      benches.push_back(
          {name, load, path, model_steps, false, {}, "--ttft-model " + shell_quote(path), false});
    }

    json results = json::object();
    results["single_core_read_bandwidth"] = {{"bytes", bandwidth.bytes},
                                             {"reps", bandwidth_reps},
                                             {"median_gb_per_s", bandwidth.median_gb_per_s},
                                             {"min_gb_per_s", bandwidth.min_gb_per_s},
                                             {"max_gb_per_s", bandwidth.max_gb_per_s},
                                             {"gb_per_s", bandwidth.gb_per_s}};
    std::string table = fmt::format(
        "\nSingle-core read bandwidth (bench/read_bandwidth.h, {} MiB summed by one thread, "
        "median of {}): {:.2f} GB/s (min {:.2f}, max {:.2f}). Bandwidth floor of a decode step "
        "= the weight bytes it reads ÷ that.\n",
        bandwidth.bytes >> 20, bandwidth_reps, gb_per_s, bandwidth.min_gb_per_s,
        bandwidth.max_gb_per_s);
    bool all_agree = true;
    bool torch_available = torch != "off";
    bool torch_skipped_for_models = false;
    for (Bench& b : benches) {
      std::fprintf(stderr, "bench_e2e: loading %s\n", b.name.c_str());
      const sg::models::LlamaModel model = b.load();
      std::fprintf(stderr, "bench_e2e: %s (%s), %lld tokens, %d repetitions\n", b.name.c_str(),
                   model.config().str().c_str(), static_cast<long long>(b.steps), reps);
      const WeightBytes wb = weight_bytes(model);
      const double floor_us = static_cast<double>(wb.per_step) / (gb_per_s * 1e3);

      // Time to first token, each in a fresh process (FirstToken), before
      // this process builds the reference's copy of the weights.
      std::vector<FirstToken> cold, warm, ro;
      for (int r = 0; r < ttft_reps; ++r) {
        const TempDir tmp;
        const fs::path cache = tmp.path() / "cache";
        fs::create_directory(cache);
        fs::permissions(cache, fs::perms::owner_all, fs::perm_options::replace);
        const fs::path out = tmp.path() / "first_token.json";
        std::fprintf(stderr, "bench_e2e: %s: time to first token, round %d of %d\n", b.name.c_str(),
                     r + 1, ttft_reps);
        cold.push_back(
            first_token_in_child(b.child_model_args, sg::Mode::max_autotune, cache, out));
        warm.push_back(
            first_token_in_child(b.child_model_args, sg::Mode::max_autotune, cache, out));
        ro.push_back(
            first_token_in_child(b.child_model_args, sg::Mode::reduce_overhead, cache, out));
      }

      sg::e2e::ReferenceLlama ref(model);
      std::vector<Column> cols = {{"a", "(a) reference", {}},
                                  {"b", "(b) eager", {}},
                                  {"c", "(c) reduce-overhead", {}},
                                  {"d", "(d) max-autotune", {}},
                                  {"e", "(e) torch eager", {}}};
      const sg::Mode modes[] = {sg::Mode::eager, sg::Mode::reduce_overhead, sg::Mode::max_autotune};
      bool torch_here = torch_available && b.torch;
      if (torch_available && !b.torch) torch_skipped_for_models = true;
      for (int r = 0; r < reps; ++r) {
        cols[0].runs.push_back(run_reference(ref, b.steps));
        for (int m = 0; m < 3; ++m) {
          Column& col = cols[static_cast<std::size_t>(1 + m)];
          col.runs.push_back(run_mode(model, modes[m], b.steps, &col));
        }
        if (torch_here) {
          Run t;
          torch_available =
              run_torch(script, b.model_path, b.steps, fs::path(out_dir) / "torch.json", t);
          torch_here = torch_available;
          if (torch_available) cols[4].runs.push_back(std::move(t));
        }
      }
      if (!torch_here) cols.pop_back();

      // Agreement.
      json agreement = json::object();
      if (b.check_ids) {
        for (const Column& c : cols) {
          bool same = true;
          for (const Run& run : c.runs) {
            same = same &&
                   std::equal(run.ids.begin(), run.ids.end(), b.expected_ids.begin(),
                              b.expected_ids.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                           run.ids.size(), b.expected_ids.size())));
            same = same && run.ids.size() == static_cast<std::size_t>(b.steps);
          }
          agreement[c.key] = same ? "ids equal the reference file" : "IDS DIFFER";
          all_agree = all_agree && same;
        }
      } else {
        // Teacher-forced on (a)'s greedy ids: every column's logits at every
        // position against (a)'s.
        const std::vector<std::int64_t> forced = cols[0].runs.front().ids;
        std::vector<float> want;
        (void)run_reference(ref, b.steps, &forced, &want);
        const auto compare = [&](const std::vector<float>& got, std::size_t rows) {
          const std::size_t n = rows * static_cast<std::size_t>(model.config().vocab_size);
          if (got.size() < n) return std::numeric_limits<double>::infinity();
          double worst = 0;
          for (std::size_t i = 0; i < n; ++i) {
            worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
          }
          return worst;
        };
        agreement["a"] = "the reference";
        for (int m = 0; m < 3; ++m) {
          std::vector<float> got;
          (void)run_mode(model, modes[m], b.steps, nullptr, &forced, &got);
          const double worst = compare(got, static_cast<std::size_t>(b.steps));
          agreement[cols[static_cast<std::size_t>(1 + m)].key] =
              fmt::format("max abs logit diff {:.2e} over {} positions", worst, b.steps);
          all_agree = all_agree && worst <= 1e-3;
        }
        if (torch_here) {
          // torch writes its logits as JSON text: check the first 32 positions.
          const std::int64_t n = std::min<std::int64_t>(b.steps, 32);
          Run t;
          std::vector<float> got;
          (void)run_torch(script, b.model_path, n, fs::path(out_dir) / "torch_forced.json", t,
                          &forced, &got);
          const double worst = compare(got, static_cast<std::size_t>(n));
          agreement["e"] = fmt::format("max abs logit diff {:.2e} over {} positions", worst, n);
          all_agree = all_agree && worst <= 1e-3;
        }
      }
      // The first-token processes decode two greedy ids from BOS: where ids
      // are checked (stories260K) every process's equal the reference file's;
      // elsewhere the max-autotune processes, cold and warm, run the same
      // code and must agree with each other.
      {
        bool same = true;
        for (const auto* runs : {&cold, &warm}) {
          for (const FirstToken& t : *runs) same = same && t.ids == cold.front().ids;
        }
        if (b.check_ids) {
          for (const auto* runs : {&cold, &warm, &ro}) {
            for (const FirstToken& t : *runs) {
              same = same && t.ids.size() == 2 && b.expected_ids.size() >= 2 &&
                     std::equal(t.ids.begin(), t.ids.end(), b.expected_ids.begin());
            }
          }
        }
        if (!same) {
          std::fprintf(stderr, "bench_e2e: %s: the first-token processes' ids DIFFER\n",
                       b.name.c_str());
        }
        all_agree = all_agree && same;
      }

      // Table.
      const double ref_us = cols[0].us_per_token();
      table += fmt::format("\n### {} ({} decode steps, {} repetitions, medians)\n\n", b.name,
                           b.steps, reps);
      if (!b.torch && torch != "off") {
        table += "(no (e) column: --model checkpoints run without PyTorch)\n\n";
      }
      table +=
          "| column | tokens/s | µs/token | tokens/s ÷ (a) | step ÷ floor | graph pool bytes | "
          "peak allocated bytes | agreement |\n";
      table += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
      json jcols = json::object();
      for (const Column& c : cols) {
        const double us = c.us_per_token();
        table += fmt::format("| {} | {:.0f} | {:.1f} | {:.2f}× | {:.2f} | {} | {} | {} |\n",
                             c.label, 1e6 / us, us, ref_us / us, us / floor_us,
                             c.pool_bytes >= 0 ? std::to_string(c.pool_bytes) : "",
                             c.peak_bytes >= 0 ? std::to_string(c.peak_bytes) : "",
                             agreement.value(c.key, std::string()));
        std::vector<double> per_run;
        for (const Run& run : c.runs) per_run.push_back(run.us_per_token);
        jcols[c.key] = {{"label", c.label},
                        {"us_per_token", us},
                        {"tokens_per_s", 1e6 / us},
                        {"ratio_to_reference", ref_us / us},
                        {"step_over_floor", us / floor_us},
                        {"us_per_token_runs", per_run},
                        {"latency_by_position_us", c.latency_by_position()}};
        if (c.pool_bytes >= 0) jcols[c.key]["pool_reserved_bytes"] = c.pool_bytes;
        if (c.peak_bytes >= 0) jcols[c.key]["peak_allocated_bytes"] = c.peak_bytes;
        if (c.planned_bytes >= 0) {
          jcols[c.key]["decode_planned_arena_bytes"] = c.planned_bytes;
          jcols[c.key]["decode_liveness_lower_bound_bytes"] = c.lower_bound_bytes;
        }
      }
      const Column& ma = cols[3];
      const Column& ro_col = cols[2];
      if (ma.planned_bytes >= 0) {
        table += fmt::format(
            "\nMemory (decode graph): max-autotune's planned arena {} B against a liveness lower "
            "bound of {} B ({:.3f}×); graph pools reserve {} B in max-autotune and {} B in "
            "reduce-overhead (prefill + decode).\n",
            ma.planned_bytes, ma.lower_bound_bytes,
            ma.lower_bound_bytes > 0
                ? static_cast<double>(ma.planned_bytes) / static_cast<double>(ma.lower_bound_bytes)
                : 0.0,
            ma.pool_bytes, cols[2].pool_bytes);
      }
      const double peak_ratio = ro_col.peak_bytes > 0 ? static_cast<double>(ma.peak_bytes) /
                                                            static_cast<double>(ro_col.peak_bytes)
                                                      : 0.0;
      table += fmt::format(
          "\nPeak allocated (generate's peak_allocated_bytes, weights included, largest over the "
          "runs): max-autotune {} B, reduce-overhead {} B, eager {} B; max-autotune ÷ "
          "reduce-overhead {:.3f}× (issue 15: ≤ 1.05×, {}).\n",
          ma.peak_bytes, ro_col.peak_bytes, cols[1].peak_bytes, peak_ratio,
          peak_ratio <= 1.05 ? "met" : "NOT met");
      const double ma_over_floor = ma.us_per_token() / floor_us;
      table += fmt::format(
          "\nBandwidth floor: {} B of weights read per step ({} B held) ÷ {:.2f} GB/s = {:.1f} µs "
          "per step; max-autotune's step is {:.2f}× that",
          wb.per_step, wb.held, gb_per_s, floor_us, ma_over_floor);
      table += b.name == "random-512" ? fmt::format(" (issue 15: ≤ 1.15×, {}).\n",
                                                    ma_over_floor <= 1.15 ? "met" : "NOT met")
                                      : ".\n";
      json entry = {{"steps", b.steps},
                    {"reps", reps},
                    {"columns", jcols},
                    {"agreement", agreement},
                    {"weight_bytes_held", wb.held},
                    {"weight_bytes_per_step", wb.per_step},
                    {"bandwidth_floor_us", floor_us},
                    {"max_autotune_over_bandwidth_floor", ma_over_floor},
                    {"max_autotune_peak_over_reduce_overhead", peak_ratio}};
      if (!cold.empty()) {
        const double cold_ms = median_of(cold, &FirstToken::ms);
        const double warm_ms = median_of(warm, &FirstToken::ms);
        const double ro_ms = median_of(ro, &FirstToken::ms);
        table += fmt::format(
            "\nTime to first token (fresh process; compile both functions, prefill, first decode "
            "step; median of {}): max-autotune cold {:.1f} ms (empty compile cache; {} generated "
            "kernels, {} regions served by the cache), warm {:.1f} ms (same cache; {} served), "
            "warm ÷ cold {:.3f}; reduce-overhead {:.1f} ms.\n",
            cold.size(), cold_ms, cold.front().codegen_kernels, cold.front().compile_cache_hits,
            warm_ms, warm.front().compile_cache_hits, warm_ms / cold_ms, ro_ms);
        // The first generated token alone (compile + prefill), and the bound
        // the weights set: every token reads each weight once, so a warm
        // start, however little it compiles, takes at least one pass over
        // them per token (Note [Warm start is bounded by the weights]).
        const double cold_prefill_ms = median_of(cold, &FirstToken::prefill_ms);
        const double warm_prefill_ms = median_of(warm, &FirstToken::prefill_ms);
        const double pass_ms = floor_us / 1e3;
        const double warm_bound = 2 * pass_ms / cold_ms;  // two passes: prefill, first step
        table += fmt::format(
            "Of that, compile and prefill alone (the first generated token): cold {:.1f} ms, warm "
            "{:.1f} ms, warm ÷ cold {:.3f}. One pass over the weights at the measured bandwidth "
            "takes {:.3g} ms, so here warm ÷ cold cannot fall below {:.3g} (two passes), nor the "
            "prefill's below {:.3g} (one).\n",
            cold_prefill_ms, warm_prefill_ms, warm_prefill_ms / cold_prefill_ms, pass_ms,
            warm_bound, pass_ms / cold_prefill_ms);
        const auto runs_json = [](const std::vector<FirstToken>& v) {
          json a = json::array();
          for (const FirstToken& t : v) {
            a.push_back({{"ms", t.ms},
                         {"prefill_ms", t.prefill_ms},
                         {"codegen_kernels", t.codegen_kernels},
                         {"compile_cache_hits", t.compile_cache_hits}});
          }
          return a;
        };
        entry["time_to_first_token"] = {{"max_autotune_cold_ms", cold_ms},
                                        {"max_autotune_warm_ms", warm_ms},
                                        {"warm_over_cold", warm_ms / cold_ms},
                                        {"reduce_overhead_ms", ro_ms},
                                        {"max_autotune_cold_prefill_ms", cold_prefill_ms},
                                        {"max_autotune_warm_prefill_ms", warm_prefill_ms},
                                        {"weight_pass_ms", pass_ms},
                                        {"warm_over_cold_bound", warm_bound},
                                        {"max_autotune_cold_runs", runs_json(cold)},
                                        {"max_autotune_warm_runs", runs_json(warm)},
                                        {"reduce_overhead_runs", runs_json(ro)}};
      }
      if (!b.check_ids && !tiny) {
        const double floor = sgemv_floor_us(model, 20);
        const double d_us = cols[3].us_per_token();
        table += fmt::format(
            "\nMemory-bound floor (the step's matrix-vector products back to back in OpenBLAS): "
            "{:.1f} µs; max-autotune's step is {:.2f}× that.\n",
            floor, d_us / floor);
        entry["sgemv_floor_us"] = floor;
        entry["max_autotune_over_floor"] = d_us / floor;
      }
      results[b.name] = entry;
      std::vector<const Column*> plotted;
      for (const Column& c : cols) plotted.push_back(&c);
      std::ofstream(fs::path(out_dir) / (b.name + ".svg"))
          << svg_plot(b.name + ": decode latency per token", plotted);
    }
    std::printf("%s", table.c_str());
    std::ofstream(fs::path(out_dir) / "results.md") << table;
    std::ofstream(fs::path(out_dir) / "results.json") << results.dump(2) << "\n";
    if (!torch_available && torch != "off") {
      std::printf("\n(e) skipped: Debian's python3-torch is not installed\n");
    } else if (torch_skipped_for_models) {
      std::printf(
          "\n(e) not run for the --model checkpoints (the random model and stories260K "
          "only)\n");
    }
    if (!all_agree) {
      std::fprintf(stderr, "bench_e2e: the columns DISAGREE (see the agreement column)\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_e2e: error: %s\n", e.what());
    return 1;
  }
}

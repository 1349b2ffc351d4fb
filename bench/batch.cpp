// bench_batch: generated tokens/s against the batch size (docs/performance.md,
// "Batched decoding"). For each model and each B it decodes B prompts together
// (`generate --prompts-file` with --max-batch B --warmup-buckets, through
// include/sinkgraph/generate.h) in every mode, beside a hand-written reference that
// runs each step's products as one cblas_sgemm over all B rows
// (ReferenceLlama::forward_batched, bench/e2e/reference.h). Columns alternate
// within each round, so machine noise hits them alike; figures are medians
// with min-max. tokens/s is every sequence's decoded ids over the decode
// steps' wall time, as `--stats`'s decode_tokens_per_s (prefill excluded, the
// host reads each step's ids).
//
// Padding: a B that is not a capture size runs the next bucket up with the
// extra rows computed and discarded. For each such B the bench also runs
// reduce-overhead with that B as its only capture size ("exact"), and reports
// the padding overhead as exact tokens/s over bucketed tokens/s, minus 1.
//
// Checks, which fail the run: a prompt's ids are the same in every sinkgraph
// run that decodes it, whatever the mode, B and bucket (batch invariance), and
// the batched reference's first-step logits match its one-sequence forward()
// within 1e-3 (relative to the largest logit). The reference's own ids are
// compared with sinkgraph's and reported (its summation order differs, so a
// near-tie may flip).
//
//   bench_batch [--model NAME=PATH]... [--batches 1,2,...] [--steps N]
//               [--rounds R] [--threads T] [--out DIR] [--tiny]
//
// Writes the tables to stdout and DIR/results.md, every run to
// DIR/results.json, and one plot per model to DIR/batch-NAME.svg.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "line_plot.h"
#include "random_config.h"
#include "reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"

namespace {

namespace fs = std::filesystem;
namespace sg = sinkgraph;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using Prompts = std::vector<std::vector<std::int64_t>>;

struct Stat {
  double median = 0, min = 0, max = 0;
};

Stat stat_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double med = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), v.back()};
}

// Prompt i: BOS, then i % 4 more ids, so sequences decode at different
// positions (attention masks each to its own length).
Prompts make_prompts(std::int64_t count, std::int64_t vocab) {
  Prompts prompts;
  for (std::int64_t i = 0; i < count; ++i) {
    std::vector<std::int64_t> p{1};
    for (std::int64_t j = 0; j < i % 4; ++j) p.push_back((7 * i + 13 * j + 2) % vocab);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

struct Outcome {
  double tokens_per_s = 0;
  Prompts ids;
};

std::int64_t argmax(const float* row, std::size_t n) {
  return std::max_element(row, row + n) - row;
}

// The hand-written reference, driven as batch_generate drives sinkgraph:
// each prompt prefilled alone into its slot (its first id from the last
// prompt position), then steps - 1 batched decode steps over every slot.
Outcome run_reference(sg::e2e::ReferenceLlama& ref, const Prompts& prompts, std::int64_t steps) {
  const auto vocab = static_cast<std::size_t>(ref.config().vocab_size);
  const std::size_t rows = prompts.size();
  ref.reset();
  Outcome out;
  out.ids.resize(rows);
  std::vector<std::int64_t> tokens(rows), pos(rows), slots(rows);
  for (std::size_t s = 0; s < rows; ++s) {
    const auto& p = prompts[s];
    const auto slot = static_cast<std::int64_t>(s);
    std::span<const float> logits;
    for (std::size_t t = 0; t < p.size(); ++t) {
      const auto at = static_cast<std::int64_t>(t);
      logits = ref.forward_batched({&p[t], 1}, {&at, 1}, {&slot, 1});
    }
    tokens[s] = argmax(logits.data(), vocab);
    pos[s] = static_cast<std::int64_t>(p.size());
    slots[s] = slot;
    out.ids[s].push_back(tokens[s]);
  }
  const auto t0 = Clock::now();
  for (std::int64_t step = 1; step < steps; ++step) {
    const std::span<const float> logits = ref.forward_batched(tokens, pos, slots);
    for (std::size_t s = 0; s < rows; ++s) {
      tokens[s] = argmax(logits.data() + s * vocab, vocab);
      ++pos[s];
      out.ids[s].push_back(tokens[s]);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.tokens_per_s = static_cast<double>(rows) * static_cast<double>(steps - 1) / seconds;
  return out;
}

Outcome run_sinkgraph(const sg::models::LlamaModel& model, sg::Mode mode, const Prompts& prompts,
                      std::int64_t steps, std::vector<std::int64_t> capture_sizes) {
  sg::BatchOptions o;
  o.prompts = prompts;
  o.steps = steps;
  sg::GeneratorConfig config;
  config.mode = mode;
  config.max_batch = static_cast<std::int64_t>(prompts.size());
  config.capture_sizes = std::move(capture_sizes);
  config.warmup_buckets = true;
  const sg::BatchResult r = sg::generate_batch(model, o, config);
  return {static_cast<double>(r.decode_tokens) / r.decode_seconds, r.ids};
}

// forward_batched's first step against forward() for each prompt alone.
void check_reference(sg::e2e::ReferenceLlama& ref, const Prompts& prompts) {
  const auto vocab = static_cast<std::size_t>(ref.config().vocab_size);
  std::vector<float> solo;
  for (const auto& p : prompts) {
    ref.reset();
    std::span<const float> l;
    for (std::size_t t = 0; t < p.size(); ++t) l = ref.forward(p[t], static_cast<std::int64_t>(t));
    solo.insert(solo.end(), l.begin(), l.end());
  }
  ref.reset();
  std::vector<std::int64_t> tokens, pos, slots;
  const std::size_t longest =
      std::max_element(prompts.begin(), prompts.end(), [](const auto& a, const auto& b) {
        return a.size() < b.size();
      })->size();
  std::vector<float> batched(solo.size());
  for (std::size_t t = 0; t < longest; ++t) {  // every prompt with a token at t, together
    tokens.clear(), pos.clear(), slots.clear();
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      if (t >= prompts[s].size()) continue;
      tokens.push_back(prompts[s][t]);
      pos.push_back(static_cast<std::int64_t>(t));
      slots.push_back(static_cast<std::int64_t>(s));
    }
    const std::span<const float> l = ref.forward_batched(tokens, pos, slots);
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const auto s = static_cast<std::size_t>(slots[r]);
      if (t + 1 == prompts[s].size()) {
        std::copy_n(l.data() + r * vocab, vocab, batched.data() + s * vocab);
      }
    }
  }
  float scale = 1, worst = 0;
  for (std::size_t i = 0; i < solo.size(); ++i) {
    scale = std::max(scale, std::fabs(solo[i]));
    const float d = std::fabs(solo[i] - batched[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  SG_CHECK(worst <= 1e-3F * scale, "bench_batch: the batched reference's logits differ from its ",
           "one-sequence forward by ", worst, " (largest logit ", scale, ")");
}

struct BenchModel {
  std::string name;
  std::function<sg::models::LlamaModel()> load;
};

using sg::e2e::random_config;

int run(int argc, char** argv) {
  CLI::App app{
      "bench_batch: generated tokens/s against the batch size, every mode and a "
      "hand-written cblas_sgemm reference, in one run"};
  std::vector<std::string> model_args;
  std::vector<std::int64_t> batches{1, 2, 3, 4, 5, 8, 9, 16, 17, 32};
  std::int64_t steps = 32, rounds = 3, threads = 1;
  std::string out_dir = "bench-batch";
  bool tiny = false;
  app.add_option("--model", model_args,
                 "NAME=PATH of a checkpoint (repeatable); default: the built-in model and a "
                 "random dim-512 model (make-model's shape)");
  app.add_option("--batches", batches, "batch sizes B (default 1,2,3,4,5,8,9,16,17,32)")
      ->delimiter(',');
  app.add_option("--steps", steps, "ids per prompt (default 32)")->check(CLI::Range(2, 100000));
  app.add_option("--rounds", rounds, "rounds; medians over them (default 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads,
                 "sinkgraph's compute threads (default 1; the reference's OpenBLAS is serial)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--out", out_dir, "folder for results.md, results.json and the plots");
  app.add_flag("--tiny", tiny,
               "smoke test: a tiny random model, B = 1..4, 6 steps, one round (checks only)");
  CLI11_PARSE(app, argc, argv);
  if (tiny) {
    batches = {1, 2, 3, 4};
    steps = 6;
    rounds = 1;
  }
  for (const std::int64_t b : batches) SG_CHECK(b >= 1, "bench_batch: batch sizes must be >= 1");

  std::vector<BenchModel> models;
  for (const std::string& arg : model_args) {
    const auto eq = arg.find('=');
    SG_CHECK(eq != std::string::npos && eq > 0, "bench_batch: --model wants NAME=PATH, got '", arg,
             "'");
    models.push_back(
        {arg.substr(0, eq), [path = arg.substr(eq + 1)] { return sg::models::load_model(path); }});
  }
  if (models.empty() && tiny) {
    models.push_back(
        {"random-tiny", [] { return sg::models::random_model(random_config(true), 0); }});
  } else if (models.empty()) {
    models.push_back(
        {"builtin", [] { return sg::models::random_model(sg::models::builtin_config(), 0); }});
    models.push_back(
        {"random-512", [] { return sg::models::random_model(random_config(false), 1); }});
  }

  sg::set_num_threads(static_cast<int>(threads));
  fs::create_directories(out_dir);
  const std::vector<std::int64_t> buckets = sg::CompilerConfig{}.capture_sizes;
  const std::vector<sg::Mode> modes{sg::Mode::eager, sg::Mode::reduce_overhead,
                                    sg::Mode::max_autotune};
  std::string table = fmt::format(
      "bench_batch: {} ids per prompt, {} round(s), {} sinkgraph compute thread(s), OpenBLAS core "
      "{}; tokens/s, median (min-max)\n",
      steps, rounds, threads, openblas_get_corename());
  json results = {{"steps", steps},
                  {"rounds", rounds},
                  {"threads", threads},
                  {"openblas_core", openblas_get_corename()},
                  {"models", json::object()}};

  for (const BenchModel& bm : models) {
    const sg::models::LlamaModel model = bm.load();
    sg::e2e::ReferenceLlama ref(model);
    const std::int64_t vocab = model.config().vocab_size;
    check_reference(ref, make_prompts(std::min<std::int64_t>(4, batches.back()), vocab));

    // column -> B -> tokens/s of each round
    std::map<std::string, std::map<std::int64_t, std::vector<double>>> runs;
    std::map<std::size_t, std::vector<std::int64_t>> expected_ids;  // prompt -> its ids
    std::int64_t reference_ids_equal = 0, reference_ids_total = 0;
    const auto check_ids = [&](const std::string& column, std::int64_t b, const Prompts& ids) {
      for (std::size_t i = 0; i < ids.size(); ++i) {
        auto [it, first] = expected_ids.emplace(i, ids[i]);
        SG_CHECK(first || it->second == ids[i], "bench_batch: ", bm.name, ": prompt ", i,
                 "'s ids at B = ", b, " (", column,
                 ") differ from its ids in an earlier run: batch invariance is broken");
      }
    };
    for (std::int64_t round = 0; round < rounds; ++round) {
      for (const std::int64_t b : batches) {
        const Prompts prompts = make_prompts(b, vocab);
        for (const sg::Mode m : modes) {
          const Outcome o = run_sinkgraph(model, m, prompts, steps, buckets);
          check_ids(sg::mode_name(m), b, o.ids);
          runs[sg::mode_name(m)][b].push_back(o.tokens_per_s);
        }
        if (!std::binary_search(buckets.begin(), buckets.end(), b)) {
          const Outcome o = run_sinkgraph(model, sg::Mode::reduce_overhead, prompts, steps, {b});
          check_ids("reduce-overhead, exact", b, o.ids);
          runs["exact"][b].push_back(o.tokens_per_s);
        }
        const Outcome r = run_reference(ref, prompts, steps);
        runs["reference"][b].push_back(r.tokens_per_s);
        for (std::size_t i = 0; i < r.ids.size(); ++i) {
          for (std::size_t k = 0; k < r.ids[i].size(); ++k) {
            reference_ids_equal += r.ids[i][k] == expected_ids[i][k] ? 1 : 0;
            ++reference_ids_total;
          }
        }
        std::fprintf(stderr, "%s round %lld B=%lld done\n", bm.name.c_str(),
                     static_cast<long long>(round) + 1, static_cast<long long>(b));
      }
    }

    // Throughput table.
    const std::vector<std::string> columns{"reference", "eager", "reduce-overhead", "max-autotune"};
    table += fmt::format("\n### {} ({})\n\n| B | bucket |", bm.name, model.config().str());
    for (const auto& c : columns) table += " " + c + " |";
    table += " reduce-overhead ÷ eager | reduce-overhead ÷ its B = 1 |\n|---:|---:|";
    for (std::size_t i = 0; i < columns.size() + 2; ++i) table += "---:|";
    table += "\n";
    json model_json = {{"config", model.config().str()}, {"columns", json::object()}};
    const Stat ro1 = stat_of(runs["reduce-overhead"][batches.front()]);
    for (const std::int64_t b : batches) {
      const auto bucket_it = std::lower_bound(buckets.begin(), buckets.end(), b);
      const std::int64_t bucket = bucket_it == buckets.end() ? b : *bucket_it;
      table += fmt::format("| {} | {} |", b, bucket);
      for (const auto& c : columns) {
        const Stat s = stat_of(runs[c][b]);
        table += fmt::format(" {:.0f} ({:.0f}–{:.0f}) |", s.median, s.min, s.max);
      }
      const Stat ro = stat_of(runs["reduce-overhead"][b]);
      const Stat eager = stat_of(runs["eager"][b]);
      table +=
          fmt::format(" {:.2f}× | {:.2f}× |\n", ro.median / eager.median, ro.median / ro1.median);
    }
    // Padding table: each B between buckets against its exact-size graph.
    if (!runs["exact"].empty()) {
      table +=
          "\nPadding (reduce-overhead): B live rows in the next bucket up, against a graph "
          "captured for exactly B rows\n\n| B | bucket | padded rows | bucketed | exact | "
          "padding overhead |\n|---:|---:|---:|---:|---:|---:|\n";
      for (const auto& [b, v] : runs["exact"]) {
        const auto bucket_it = std::lower_bound(buckets.begin(), buckets.end(), b);
        const std::int64_t bucket = bucket_it == buckets.end() ? b : *bucket_it;
        const Stat exact = stat_of(v), padded = stat_of(runs["reduce-overhead"][b]);
        table +=
            fmt::format("| {} | {} | {} | {:.0f} | {:.0f} | {:+.0f}% |\n", b, bucket, bucket - b,
                        padded.median, exact.median, 100.0 * (exact.median / padded.median - 1.0));
      }
    }
    table += fmt::format(
        "\nEvery sinkgraph run gave each prompt the same ids (batch invariance); the reference's "
        "greedy ids equal sinkgraph's for {} of {} ids.\n",
        reference_ids_equal, reference_ids_total);

    std::vector<sg::bench::PlotSeries> series;
    for (const std::string& c : {std::string("reference"), std::string("eager"),
                                 std::string("reduce-overhead"), std::string("max-autotune")}) {
      sg::bench::PlotSeries s{c, {}, {}};
      json col = json::object();
      for (const auto& [b, v] : runs[c]) {
        s.x.push_back(static_cast<double>(b));
        s.y.push_back(stat_of(v).median);
        col[std::to_string(b)] = v;
      }
      model_json["columns"][c] = col;
      series.push_back(std::move(s));
    }
    json exact = json::object();
    for (const auto& [b, v] : runs["exact"]) exact[std::to_string(b)] = v;
    model_json["columns"]["reduce-overhead-exact"] = exact;
    model_json["reference_ids_equal"] = reference_ids_equal;
    model_json["reference_ids_total"] = reference_ids_total;
    results["models"][bm.name] = model_json;
    std::ofstream(fs::path(out_dir) / ("batch-" + bm.name + ".svg"))
        << sg::bench::line_plot({.title = bm.name + ": generated tokens/s against the batch size",
                                 .x_label = "sequences decoded together (B)",
                                 .y_label = fmt::format("tokens/s, {} thread(s) (median)", threads),
                                 .log2_x = true,
                                 .markers = true},
                                series);
  }
  std::printf("%s", table.c_str());
  std::ofstream(fs::path(out_dir) / "results.md") << table;
  std::ofstream(fs::path(out_dir) / "results.json") << results.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_batch: %s\n", e.what());
    return 1;
  }
}

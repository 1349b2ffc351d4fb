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
// ids) and on a larger random model (teacher-forced logits must agree within
// 1e-3, since greedy near-ties make ids fragile there). Columns alternate
// within each repetition, so machine noise hits them alike; figures are
// medians. Writes a table (stdout and results.md), results.json and one SVG
// plot per model of per-token latency against position.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generate.h"
#include "reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
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

// (b)-(d): sinkgraph's generate driver in one mode.
Run run_mode(const sg::models::LlamaModel& model, sg::Mode mode, std::int64_t steps, Column* column,
             const std::vector<std::int64_t>* forced = nullptr,
             std::vector<float>* logits = nullptr) {
  sg::tools::GenerateOptions options;
  options.steps = steps;
  options.mode = mode;
  if (forced != nullptr) {
    options.forced_ids.assign(forced->begin(), forced->begin() + (steps - 1));
    options.keep_logits = true;
  }
  sg::tools::GenerateResult r = sg::tools::generate(model, options);
  Run run;
  run.ids = std::move(r.ids);
  run.step_us = std::move(r.step_us);
  run.us_per_token = r.timed_decode_steps > 0
                         ? 1e6 * r.decode_seconds / static_cast<double>(r.timed_decode_steps)
                         : 0;
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

std::string svg_plot(const std::string& title, const std::vector<const Column*>& columns) {
  constexpr double kW = 760, kH = 420, kL = 70, kR = 170, kT = 40, kB = 50;
  double ymin = std::numeric_limits<double>::infinity(), ymax = 1, xmax = 1;
  for (const Column* c : columns) {
    const auto lat = c->latency_by_position();
    xmax = std::max(xmax, static_cast<double>(lat.size()));
    // Clip the scale at the 1st and 99th percentiles so one outlier does not
    // flatten the rest.
    std::vector<double> sorted = lat;
    std::sort(sorted.begin(), sorted.end());
    if (!sorted.empty()) {
      ymax = std::max(ymax, sorted[sorted.size() * 99 / 100]);
      ymin = std::min(ymin, sorted[sorted.size() / 100]);
    }
  }
  ymax *= 1.1;
  ymin = std::isfinite(ymin) && ymin > 0 ? ymin / 1.1 : ymax / 10;
  // Columns an order of magnitude apart (PyTorch beside the rest) get a log
  // axis, or the fast ones would be a flat line at the bottom.
  const bool log_axis = ymax / ymin > 8;
  if (!log_axis) ymin = 0;
  const double pw = kW - kL - kR, ph = kH - kT - kB;
  const auto y_of = [&](double v) {
    v = std::clamp(v, log_axis ? ymin : 0.0, ymax);
    const double f = log_axis ? std::log(v / ymin) / std::log(ymax / ymin) : v / ymax;
    return kT + ph - ph * f;
  };
  std::vector<double> ticks;
  if (log_axis) {  // 1, 2, 5 times powers of ten
    for (double decade = std::pow(10.0, std::floor(std::log10(ymin))); decade <= ymax;
         decade *= 10) {
      for (const double m : {1.0, 2.0, 5.0}) {
        if (m * decade >= ymin && m * decade <= ymax) ticks.push_back(m * decade);
      }
    }
  } else {
    for (int i = 0; i <= 4; ++i) ticks.push_back(ymax * i / 4);
  }
  const char* colors[] = {"#222222", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
  std::ostringstream out;
  out << fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)svg"
      "\n",
      kW, kH);
  out << fmt::format(R"svg(<rect width="{}" height="{}" fill="white"/>)svg"
                     "\n",
                     kW, kH);
  out << fmt::format(R"svg(<text x="{}" y="22" font-size="14">{}</text>)svg"
                     "\n",
                     kL, title);
  out << fmt::format(
      R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)svg"
      "\n",
      kL, kT, pw, ph);
  for (const double v : ticks) {
    const double y = y_of(v);
    out << fmt::format(R"svg(<text x="{}" y="{}" text-anchor="end">{:.0f}</text>)svg"
                       "\n",
                       kL - 6, y + 4, v);
    out << fmt::format(R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#eee"/>)svg"
                       "\n",
                       kL, y, kL + pw, y);
  }
  for (int i = 0; i <= 4; ++i) {
    const double xv = xmax * i / 4;
    out << fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">{:.0f}</text>)svg"
                       "\n",
                       kL + pw * i / 4, kT + ph + 18, xv);
  }
  out << fmt::format(
      R"svg(<text x="{}" y="{}" text-anchor="middle">position (decode step)</text>)svg"
      "\n",
      kL + pw / 2, kH - 10);
  out << fmt::format(
      R"svg(<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">µs per token (median over runs{})</text>)svg"
      "\n",
      kT + ph / 2, kT + ph / 2, log_axis ? ", log scale" : "");
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const auto lat = columns[c]->latency_by_position();
    std::string points;
    for (std::size_t i = 0; i < lat.size(); ++i) {
      const double x = kL + pw * static_cast<double>(i + 1) / xmax;
      const double y = y_of(lat[i]);
      points += fmt::format("{:.1f},{:.1f} ", x, y);
    }
    const char* color = colors[c % 6];
    out << fmt::format(R"svg(<polyline fill="none" stroke="{}" stroke-width="1.2" points="{}"/>)svg"
                       "\n",
                       color, points);
    const double ly = kT + 16 + 18 * static_cast<double>(c);
    out << fmt::format(
        R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="3"/>)svg"
        "\n",
        kL + pw + 12, ly - 4, kL + pw + 32, ly - 4, color);
    out << fmt::format(R"svg(<text x="{}" y="{}">{}</text>)svg"
                       "\n",
                       kL + pw + 38, ly, columns[c]->label);
  }
  out << "</svg>\n";
  return out.str();
}

struct Bench {
  std::string name;
  sg::models::LlamaModel model;
  std::string model_path;  // for torch_llama.py
  std::int64_t steps;
  bool check_ids;  // stories260K: ids; else teacher-forced logits
  std::vector<std::int64_t> expected_ids;
};

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
  app.add_option("--stories", stories, "folder of stories260K (skipped when absent)");
  app.add_option("--out", out_dir, "folder for results.md, results.json and the plots");
  app.add_option("--reps", reps, "repetitions per column (medians are reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--torch", torch, "auto (when python3-torch is installed) or off")
      ->check(CLI::IsMember({"auto", "off"}));
  app.add_flag("--tiny", tiny,
               "smoke test: a tiny random model, 24 tokens, one repetition (asserts agreement, "
               "not speed)");
  CLI11_PARSE(app, argc, argv);

  try {
    sg::set_num_threads(1);
    fs::create_directories(out_dir);
    const std::string script = std::string(SG_BENCH_DIR) + "/e2e/torch_llama.py";
    if (tiny) reps = 1;

    std::vector<Bench> benches;
    const fs::path stories_bin = fs::path(stories) / "stories260K.bin";
    if (!tiny && fs::exists(stories_bin)) {
      std::vector<std::int64_t> ids;
      std::ifstream f(fs::path(stories) / "bos_greedy_200.txt");
      for (std::int64_t id = 0; f >> id;) ids.push_back(id);
      benches.push_back({"stories260K", sg::models::load_model(stories_bin.string()),
                         stories_bin.string(), 200, true, ids});
    } else if (!tiny) {
      std::fprintf(stderr, "bench_e2e: %s not found; skipping stories260K\n",
                   stories_bin.string().c_str());
    }
    sg::models::LlamaConfig rc;
    if (tiny) {
      rc.dim = 64;
      rc.hidden_dim = 160;
      rc.n_layers = 2;
      rc.n_heads = 4;
      rc.n_kv_heads = 2;
      rc.vocab_size = 256;
      rc.max_seq_len = 64;
    } else {
      rc.dim = 512;
      rc.hidden_dim = 1376;
      rc.n_layers = 8;
      rc.n_heads = 8;
      rc.n_kv_heads = 8;
      rc.vocab_size = 32000;
      rc.max_seq_len = 512;
    }
    {
      sg::models::LlamaModel random = sg::models::random_model(rc, 0);
      const std::string path = (fs::path(out_dir) / "random_model.safetensors").string();
      if (torch != "off")
        sg::models::save_model(random, path, sg::models::CheckpointFormat::safetensors);
      benches.push_back({tiny ? "random-tiny" : "random-512",
                         std::move(random),
                         path,
                         tiny ? 24 : 256,
                         false,
                         {}});
    }

    json results = json::object();
    std::string table;
    bool all_agree = true;
    bool torch_available = torch != "off";
    for (Bench& b : benches) {
      std::fprintf(stderr, "bench_e2e: %s (%s), %lld tokens, %d repetitions\n", b.name.c_str(),
                   b.model.config().str().c_str(), static_cast<long long>(b.steps), reps);
      sg::e2e::ReferenceLlama ref(b.model);
      std::vector<Column> cols = {{"a", "(a) reference", {}},
                                  {"b", "(b) eager", {}},
                                  {"c", "(c) reduce-overhead", {}},
                                  {"d", "(d) max-autotune", {}},
                                  {"e", "(e) torch eager", {}}};
      const sg::Mode modes[] = {sg::Mode::eager, sg::Mode::reduce_overhead, sg::Mode::max_autotune};
      for (int r = 0; r < reps; ++r) {
        cols[0].runs.push_back(run_reference(ref, b.steps));
        for (int m = 0; m < 3; ++m) {
          Column& col = cols[static_cast<std::size_t>(1 + m)];
          col.runs.push_back(run_mode(b.model, modes[m], b.steps, &col));
        }
        if (torch_available) {
          Run t;
          torch_available =
              run_torch(script, b.model_path, b.steps, fs::path(out_dir) / "torch.json", t);
          if (torch_available) cols[4].runs.push_back(std::move(t));
        }
      }
      if (!torch_available) cols.pop_back();

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
          const std::size_t n = rows * static_cast<std::size_t>(b.model.config().vocab_size);
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
          (void)run_mode(b.model, modes[m], b.steps, nullptr, &forced, &got);
          const double worst = compare(got, static_cast<std::size_t>(b.steps));
          agreement[cols[static_cast<std::size_t>(1 + m)].key] =
              fmt::format("max abs logit diff {:.2e} over {} positions", worst, b.steps);
          all_agree = all_agree && worst <= 1e-3;
        }
        if (torch_available) {
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

      // Table.
      const double ref_us = cols[0].us_per_token();
      table += fmt::format("\n### {} ({} decode steps, {} repetitions, medians)\n\n", b.name,
                           b.steps, reps);
      table += "| column | tokens/s | µs/token | tokens/s ÷ (a) | graph pool bytes | agreement |\n";
      table += "| --- | ---: | ---: | ---: | ---: | --- |\n";
      json jcols = json::object();
      for (const Column& c : cols) {
        const double us = c.us_per_token();
        table += fmt::format("| {} | {:.0f} | {:.1f} | {:.2f}× | {} | {} |\n", c.label, 1e6 / us,
                             us, ref_us / us, c.pool_bytes >= 0 ? std::to_string(c.pool_bytes) : "",
                             agreement.value(c.key, std::string()));
        std::vector<double> per_run;
        for (const Run& run : c.runs) per_run.push_back(run.us_per_token);
        jcols[c.key] = {{"label", c.label},
                        {"us_per_token", us},
                        {"tokens_per_s", 1e6 / us},
                        {"ratio_to_reference", ref_us / us},
                        {"us_per_token_runs", per_run},
                        {"latency_by_position_us", c.latency_by_position()}};
        if (c.pool_bytes >= 0) jcols[c.key]["pool_reserved_bytes"] = c.pool_bytes;
        if (c.planned_bytes >= 0) {
          jcols[c.key]["decode_planned_arena_bytes"] = c.planned_bytes;
          jcols[c.key]["decode_liveness_lower_bound_bytes"] = c.lower_bound_bytes;
        }
      }
      const Column& ma = cols[3];
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
      json entry = {
          {"steps", b.steps}, {"reps", reps}, {"columns", jcols}, {"agreement", agreement}};
      if (!b.check_ids && !tiny) {
        const double floor = sgemv_floor_us(b.model, 20);
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

// bench_e2e_reference_check: checks ReferenceLlama against stories260K's
// reference outputs and reports its decode speed.
//
//   bench_e2e_reference_check MODEL.bin [REFERENCE_DIR]
//
// REFERENCE_DIR (default: MODEL's folder) holds bos_greedy_200.txt (one line,
// 200 greedy ids from BOS) and bos_logits_64x512.f32 (64 rows x vocab f32:
// row p = logits at position p, teacher-forced with BOS then the greedy ids).
// Exits 1 unless all 200 greedy ids match and the 64 logit rows are within
// 1e-3 (max abs), from forward() and from forward_batched() with three
// sequences at staggered positions; prints decode tokens/s (median of 5 runs
// of 200 tokens).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "reference.h"
#include "sinkgraph/llama.h"

namespace {

namespace fs = std::filesystem;
using sinkgraph::e2e::ReferenceLlama;

constexpr std::int64_t kBos = 1;
constexpr std::size_t kGreedySteps = 200;
constexpr std::size_t kLogitRows = 64;
constexpr float kTolerance = 1e-3F;
constexpr int kTimedRuns = 5;

// First index wins on ties, as sinkgraph's argmax kernel.
std::int64_t argmax(std::span<const float> v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

std::vector<std::int64_t> read_ids(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::vector<std::int64_t> ids;
  std::int64_t id = 0;
  while (in >> id) ids.push_back(id);
  if (!in.eof()) throw std::runtime_error(path.string() + ": not a list of integer ids");
  return ids;
}

std::vector<float> read_f32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  const auto bytes = static_cast<std::size_t>(fs::file_size(path));
  if (bytes % sizeof(float) != 0) {
    throw std::runtime_error(path.string() + ": size is not a multiple of 4");
  }
  std::vector<float> v(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  if (!in) throw std::runtime_error(path.string() + ": short read");
  return v;
}

// Greedy decode of `steps` tokens from BOS at position 0; ids[k] = argmax at position k.
std::vector<std::int64_t> greedy(ReferenceLlama& ref, std::size_t steps) {
  std::vector<std::int64_t> ids;
  ids.reserve(steps);
  std::int64_t token = kBos;
  for (std::size_t pos = 0; pos < steps; ++pos) {
    token = argmax(ref.forward(token, static_cast<std::int64_t>(pos)));
    ids.push_back(token);
  }
  return ids;
}

int run(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: " << argv[0] << " MODEL.bin [REFERENCE_DIR]\n";
    return 2;
  }
  const fs::path model_path = argv[1];
  const fs::path ref_dir = argc == 3 ? fs::path(argv[2]) : model_path.parent_path();
  const auto model = sinkgraph::models::load_model(model_path.string());
  ReferenceLlama ref(model);
  const auto vocab = static_cast<std::size_t>(ref.config().vocab_size);
  std::cout << "model: " << model_path.string() << " (" << ref.config().str() << ")\n";
  if (static_cast<std::size_t>(ref.config().max_seq_len) < kGreedySteps) {
    std::cerr << "FAIL: max_seq_len " << ref.config().max_seq_len << " < " << kGreedySteps << "\n";
    return 1;
  }

  const std::vector<std::int64_t> want_ids = read_ids(ref_dir / "bos_greedy_200.txt");
  const std::vector<float> want_logits = read_f32(ref_dir / "bos_logits_64x512.f32");
  if (want_ids.size() != kGreedySteps) {
    std::cerr << "FAIL: bos_greedy_200.txt holds " << want_ids.size() << " ids, expected "
              << kGreedySteps << "\n";
    return 1;
  }
  if (want_logits.size() != kLogitRows * vocab) {
    std::cerr << "FAIL: bos_logits_64x512.f32 holds " << want_logits.size() << " floats, expected "
              << kLogitRows << " x vocab " << vocab << "\n";
    return 1;
  }

  bool ok = true;
  // 1. Greedy ids.
  const std::vector<std::int64_t> ids = greedy(ref, kGreedySteps);
  std::size_t matching = 0;
  while (matching < kGreedySteps && ids[matching] == want_ids[matching]) ++matching;
  if (matching == kGreedySteps) {
    std::cout << "greedy ids: all " << kGreedySteps << " match bos_greedy_200.txt\n";
  } else {
    std::cerr << "FAIL: greedy id " << matching << " is " << ids[matching] << ", expected "
              << want_ids[matching] << " (" << matching << " of " << kGreedySteps
              << " leading ids match)\n";
    ok = false;
  }

  // 2. Teacher-forced logits: BOS at position 0, then reference id p-1 at position p.
  ref.reset();
  float worst = 0.0F;
  std::size_t worst_row = 0, worst_col = 0;
  for (std::size_t p = 0; p < kLogitRows; ++p) {
    const std::int64_t token = p == 0 ? kBos : want_ids[p - 1];
    const std::span<const float> logits = ref.forward(token, static_cast<std::int64_t>(p));
    for (std::size_t j = 0; j < vocab; ++j) {
      const float diff = std::fabs(logits[j] - want_logits[p * vocab + j]);
      if (!(diff <= worst)) {  // also catches NaN
        worst = diff;
        worst_row = p;
        worst_col = j;
      }
    }
  }
  if (worst <= kTolerance) {
    std::cout << "teacher-forced logits: " << kLogitRows << " rows, max abs diff " << worst
              << " (row " << worst_row << ", col " << worst_col << ") <= " << kTolerance << "\n";
  } else {
    std::cerr << "FAIL: teacher-forced logits differ by " << worst << " at row " << worst_row
              << ", col " << worst_col << " (tolerance " << kTolerance << ")\n";
    ok = false;
  }

  // 3. The same logits from forward_batched(): three sequences in slots 2, 0
  // and 1, the second starting one step after the first and the third two
  // (so every step mixes positions); each row checked against its position.
  constexpr std::size_t kStagger = 3;
  ref.reset();
  float worst_batched = 0.0F;
  for (std::size_t step = 0; step < kLogitRows + kStagger - 1; ++step) {
    std::vector<std::int64_t> tokens, positions, slots;
    for (std::size_t s = 0; s < kStagger; ++s) {
      if (step < s || step - s >= kLogitRows) continue;
      const std::size_t p = step - s;
      tokens.push_back(p == 0 ? kBos : want_ids[p - 1]);
      positions.push_back(static_cast<std::int64_t>(p));
      slots.push_back(static_cast<std::int64_t>((s + 2) % kStagger));
    }
    const std::span<const float> logits = ref.forward_batched(tokens, positions, slots);
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const auto p = static_cast<std::size_t>(positions[r]);
      for (std::size_t j = 0; j < vocab; ++j) {
        const float diff = std::fabs(logits[r * vocab + j] - want_logits[p * vocab + j]);
        if (!(diff <= worst_batched)) {  // a NaN stays as infinity
          worst_batched = std::isnan(diff) ? std::numeric_limits<float>::infinity() : diff;
        }
      }
    }
  }
  if (worst_batched <= kTolerance) {
    std::cout << "batched teacher-forced logits (" << kStagger << " staggered sequences): max abs "
              << "diff " << worst_batched << " <= " << kTolerance << "\n";
  } else {
    std::cerr << "FAIL: batched teacher-forced logits differ by " << worst_batched << " (tolerance "
              << kTolerance << ")\n";
    ok = false;
  }

  // 4. Decode speed: median of 5 timed greedy runs of 200 tokens, after a warm-up.
  ref.reset();
  (void)greedy(ref, kGreedySteps);
  std::vector<double> seconds;
  for (int r = 0; r < kTimedRuns; ++r) {
    ref.reset();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::int64_t> run_ids = greedy(ref, kGreedySteps);
    const auto t1 = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (run_ids != ids) {
      std::cerr << "FAIL: timed run " << r << " produced different ids\n";
      ok = false;
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::cout << "decode: " << kGreedySteps / median << " tokens/s, " << median * 1e6 / kGreedySteps
            << " us/token (median of " << kTimedRuns << " runs of " << kGreedySteps
            << " tokens; min " << kGreedySteps / seconds.back() << ", max "
            << kGreedySteps / seconds.front() << " tokens/s)\n";

  std::cout << (ok ? "PASS" : "FAIL") << "\n";
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "FAIL: " << e.what() << "\n";
    return 1;
  }
}

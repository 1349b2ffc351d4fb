// bench_bandwidth: memory read bandwidth with 1 and N threads (issues 15 and
// 16; docs/performance.md, "Read bandwidth and the bandwidth floor"). A
// buffer far larger than the last-level cache (default 1 GiB) is written
// once, then summed as 64-bit words by each thread count in turn, every
// thread over its own contiguous slice (bench/read_bandwidth.h). Prints the
// median and the min/max GB/s (1e9 bytes per second) over the repetitions.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "read_bandwidth.h"

int main(int argc, char** argv) {
  CLI::App app{"bench_bandwidth: memory read bandwidth (64-bit sums) with 1 and N threads"};
  std::size_t bytes = std::size_t{1} << 30;
  std::vector<int> threads;
  int reps = 7;
  std::string json_path;
  bool small_pages = false;
  const int hw = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  app.add_option("--bytes", bytes, "buffer size in bytes; far above the last-level cache")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 40));
  app.add_option("--threads", threads,
                 "thread counts, comma-separated (default: 1," + std::to_string(hw) + ")")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "repetitions per thread count (median, min and max reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the figures to this JSON file");
  app.add_flag("--small-pages", small_pages,
               "do not advise 2 MiB transparent huge pages for the buffer");
  CLI11_PARSE(app, argc, argv);
  if (threads.empty()) threads = {1, hw};
  // Each count once, in the order given.
  std::vector<int> counts;
  for (const int t : threads) {
    if (std::find(counts.begin(), counts.end(), t) == counts.end()) counts.push_back(t);
  }

  try {
    const sinkgraph::bench::ReadBuffer buffer(bytes, !small_pages);
    std::printf("bench_bandwidth: read bandwidth over %.0f MiB (%s), %d repetitions, %d CPUs\n",
                static_cast<double>(buffer.bytes()) / (1 << 20),
                buffer.huge_pages() ? "2 MiB huge pages advised" : "default pages", reps, hw);
    if (const std::size_t llc = sinkgraph::bench::last_level_cache_bytes(); llc > 0) {
      std::printf("last-level cache (as reported): %.0f MiB%s\n",
                  static_cast<double>(llc) / (1 << 20),
                  buffer.bytes() < 2 * llc ? "; the buffer is under twice that, so part of it "
                                             "may be read from the cache"
                                           : "");
    }
    std::printf("%8s %12s %10s %10s\n", "threads", "median GB/s", "min GB/s", "max GB/s");
    nlohmann::json runs = nlohmann::json::array();
    for (const int t : counts) {
      const auto r = sinkgraph::bench::measure_read_bandwidth(buffer, t, reps);
      std::printf("%8d %12.2f %10.2f %10.2f\n", t, r.median_gb_per_s, r.min_gb_per_s,
                  r.max_gb_per_s);
      std::fflush(stdout);
      runs.push_back({{"threads", t},
                      {"median_gb_per_s", r.median_gb_per_s},
                      {"min_gb_per_s", r.min_gb_per_s},
                      {"max_gb_per_s", r.max_gb_per_s},
                      {"gb_per_s", r.gb_per_s},
                      {"checksum", r.checksum}});
    }
    if (!json_path.empty()) {
      const nlohmann::json j = {
          {"bytes", buffer.bytes()},
          {"last_level_cache_bytes", sinkgraph::bench::last_level_cache_bytes()},
          {"huge_pages_advised", buffer.huge_pages()},
          {"reps", reps},
          {"hardware_concurrency", hw},
          {"results", runs}};
      std::ofstream out(json_path);
      out << j.dump(2) << "\n";
      out.close();
      if (!out) {
        std::fprintf(stderr, "bench_bandwidth: cannot write %s\n", json_path.c_str());
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bandwidth: error: %s\n", e.what());
    return 1;
  }
}

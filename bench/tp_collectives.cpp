// bench_tp_collectives: what a tensor-parallel decode step pays for its
// collectives (docs/performance.md, "Tensor parallelism"). Run under
// `mpirun -np N`: one token's pattern for a Llama of `--layers` layers is
// 2 * layers all_reduces of [1, dim] floats (after wo and w2) and one
// all_gather of [1, vocab / N] (the classifier split by vocabulary). The
// pattern runs eagerly (one host call per collective, a stream sync at the
// end) and as one captured graph replayed (reduce-overhead), with nothing
// else in between, so the figure is the collectives alone with every rank
// in step; in a real step a rank also waits for the slowest rank's compute.
// Rank 0 prints microseconds per token (median and min-max over rounds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "sinkgraph/compiler.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"

namespace {

namespace sg = sinkgraph;

struct Shape {
  std::int64_t dim = 512, layers = 8, vocab = 32000;
};

std::vector<sg::Tensor> one_token(const sg::Tensor& x, const sg::Tensor& logits, const Shape& s,
                                  const sg::dist::Communicator& comm) {
  sg::Tensor h = x;
  for (std::int64_t i = 0; i < 2 * s.layers; ++i) {
    h = sg::ops::all_reduce(sg::ops::add_scalar(h, 0.0), comm.group());
  }
  return {h, sg::ops::all_gather(logits, comm.group(), comm.size())};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"per-token collective cost of tensor-parallel decode (run under mpirun)"};
  Shape s;
  int tokens = 500, rounds = 7;
  app.add_option("--dim", s.dim);
  app.add_option("--layers", s.layers);
  app.add_option("--vocab", s.vocab);
  app.add_option("--tokens", tokens, "tokens per round");
  app.add_option("--rounds", rounds);
  CLI11_PARSE(app, argc, argv);

  const sg::dist::Communicator comm = sg::dist::Communicator::world();
  const sg::Tensor x = sg::ops::zeros({1, s.dim});
  const sg::Tensor logits = sg::ops::zeros({1, s.vocab / comm.size()});

  sg::CompilerConfig config;
  config.set("mode", "reduce-overhead");
  auto graph = sg::compile(
      [&](std::span<const sg::Arg> args) {
        return one_token(std::get<sg::Tensor>(args[0]), std::get<sg::Tensor>(args[1]), s, comm);
      },
      sg::get_backend(config));

  std::vector<double> eager_us, graph_us;
  for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up (and captures)
    for (const bool captured : {false, true}) {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int t = 0; t < tokens; ++t) {
        const auto out = captured ? (*graph)({x, logits}) : one_token(x, logits, s, comm);
        if (t == tokens - 1) sg::current_stream().synchronize();
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          tokens;
      if (round > 0) (captured ? graph_us : eager_us).push_back(us);
    }
  }
  if (comm.rank() == 0) {
    const auto line = [&](const char* name, const std::vector<double>& v) {
      std::printf("%-8s %8.1f us per token (%5.1f-%5.1f), %6.2f us per collective\n", name,
                  median(v), *std::min_element(v.begin(), v.end()),
                  *std::max_element(v.begin(), v.end()),
                  median(v) / static_cast<double>(2 * s.layers + 1));
    };
    std::printf(
        "ranks %d, dim %lld, layers %lld, vocab %lld: %lld all_reduces of %lld floats "
        "and 1 all_gather of %lld floats per token, %d tokens x %d rounds\n",
        comm.size(), static_cast<long long>(s.dim), static_cast<long long>(s.layers),
        static_cast<long long>(s.vocab), static_cast<long long>(2 * s.layers),
        static_cast<long long>(s.dim), static_cast<long long>(s.vocab / comm.size()), tokens,
        rounds);
    line("eager", eager_us);
    line("graph", graph_us);
  }
  return 0;
}

// bench_conv: conv2d through oneDNN against sinkgraph's own kernels, per
// shape and thread count, interleaved in one run (Note [Convolutions through
// oneDNN] in src/kernels/cpu/onednn.h; docs/performance.md, "Convolutions
// through oneDNN").
//
// For every shape and thread count, each round times `--calls` eager conv2d
// calls (synchronized, ReLU epilogue, as a ResNet block runs them) with
// set_use_onednn(true) and then (false), in alternating order; the table
// gives each side's median per call and the median ratio own / oneDNN with
// its min..max over the rounds. Shapes: resnet18's convolutions at 112x112
// and at 224x224, mobilenet_v3_small's depthwise and pointwise layers, and
// small problems around the size below which our own path is kept
// (onednn::kMinMacs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "sinkgraph/device.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"

namespace sg = sinkgraph;

namespace {

struct Shape {
  const char* what;
  std::int64_t c, o, h, k, stride, pad, groups;
};

const Shape kShapes[] = {
    {"resnet18@112 conv1 7x7/2", 3, 64, 112, 7, 2, 3, 1},
    {"resnet18@112 layer1 3x3", 64, 64, 28, 3, 1, 1, 1},
    {"resnet18@112 layer2 3x3/2", 64, 128, 28, 3, 2, 1, 1},
    {"resnet18@112 layer2 3x3", 128, 128, 14, 3, 1, 1, 1},
    {"resnet18@112 layer2 down 1x1/2", 64, 128, 28, 1, 2, 0, 1},
    {"resnet18@112 layer3 3x3", 256, 256, 7, 3, 1, 1, 1},
    {"resnet18@112 layer4 3x3", 512, 512, 4, 3, 1, 1, 1},
    {"resnet18@224 layer1 3x3", 64, 64, 56, 3, 1, 1, 1},
    {"resnext 3x3 groups 32 @14", 128, 128, 14, 3, 1, 1, 32},
    {"mobilenet dw 3x3/2 16ch", 16, 16, 112, 3, 2, 1, 16},
    {"mobilenet dw 3x3 72ch", 72, 72, 28, 3, 1, 1, 72},
    {"mobilenet dw 5x5 96ch", 96, 96, 14, 5, 1, 2, 96},
    {"mobilenet dw 5x5 576ch", 576, 576, 7, 5, 1, 2, 576},
    {"mobilenet 1x1 16->72", 16, 72, 56, 1, 1, 0, 1},
    {"mobilenet 1x1 96->576", 96, 576, 7, 1, 1, 0, 1},
    {"small 3x3 8->8 @8", 8, 8, 8, 3, 1, 1, 1},
    {"small 3x3 16->16 @8", 16, 16, 8, 3, 1, 1, 1},
    {"small 3x3 16->16 @14", 16, 16, 14, 3, 1, 1, 1},
    {"small 1x1 32->32 @8", 32, 32, 8, 1, 1, 0, 1},
};

sg::Tensor noise(const sg::Shape& shape, unsigned seed) {
  std::vector<float> v(static_cast<std::size_t>(sg::numel(shape)));
  unsigned s = seed;
  for (float& x : v) {
    s = s * 1664525U + 1013904223U;
    x = static_cast<float>(s >> 8) / static_cast<float>(1U << 24) - 0.5F;
  }
  return sg::Tensor::from_floats(v, shape);
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conv2d through oneDNN against sinkgraph's own kernels"};
  int rounds = 7;
  int calls = 20;
  std::vector<int> threads = {1, 2};
  app.add_option("--rounds", rounds, "interleaved rounds per shape")->check(CLI::Range(1, 1000));
  app.add_option("--calls", calls, "calls timed per round and side")->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "compute thread counts")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);
  if (!sg::ops::onednn_built()) {
    std::fprintf(stderr, "error: this build has no oneDNN (SINKGRAPH_ONEDNN=OFF)\n");
    return 2;
  }

  std::printf("| shape | MACs | threads | oneDNN | own | own / oneDNN |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Shape& s : kShapes) {
    const std::int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1;
    const double macs =
        static_cast<double>(s.o * oh * oh) * static_cast<double>(s.c / s.groups * s.k * s.k);
    const sg::Tensor x = noise({1, s.c, s.h, s.h}, 1);
    const sg::Tensor w = noise({s.o, s.c / s.groups, s.k, s.k}, 2);
    const sg::Tensor b = noise({s.o}, 3);
    const auto once = [&] {
      const sg::Tensor y =
          sg::ops::conv2d(x, w, b, s.stride, s.stride, s.pad, s.pad, 1, 1, s.groups,
                          /*relu*/ 5);
      sg::current_stream().synchronize();
    };
    for (const int t : threads) {
      sg::set_num_threads(t);
      std::vector<double> with, without, ratio;
      for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms both paths up
        double us[2] = {};
        for (int side = 0; side < 2; ++side) {
          const bool use = ((r + side) % 2) == 0;
          sg::ops::set_use_onednn(use);
          const double t0 = now_us();
          for (int i = 0; i < calls; ++i) once();
          us[use ? 0 : 1] = (now_us() - t0) / calls;
        }
        if (r == 0) continue;
        with.push_back(us[0]);
        without.push_back(us[1]);
        ratio.push_back(us[1] / us[0]);
      }
      std::printf("| %s | %.2g | %d | %.1f us | %.1f us | %.2fx (%.2f..%.2f) |\n", s.what, macs, t,
                  median(with), median(without), median(ratio),
                  *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()));
      std::fflush(stdout);
    }
  }
  sg::ops::set_use_onednn(true);
  return 0;
}

// A program built on the installed sinkgraph package: it loads the shipped
// stories260K checkpoint, decodes greedily from BOS once eagerly and once
// through a reduce-overhead compiled function (captured once, replayed per
// token), and checks both against the reference ids shipped beside the model.
//
// Usage: consumer MODEL_DIR [STEPS]   (MODEL_DIR: P/share/sinkgraph/stories260K)
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sinkgraph/compiler.h>
#include <sinkgraph/error.h>
#include <sinkgraph/llama.h>
#include <sinkgraph/ops.h>
#include <sinkgraph/version.h>
#include <string>
#include <vector>

namespace sg = sinkgraph;

namespace {

// Greedy ids from BOS: one forward call per token through `run`.
template <typename Run>
std::vector<std::int64_t> greedy(const sg::models::LlamaModel& model, std::int64_t steps, Run run) {
  const sg::Tensor kv = model.new_kv_cache(steps);
  std::vector<std::int64_t> ids;
  std::int64_t token = 1;  // BOS
  for (std::int64_t pos = 0; pos < steps; ++pos) {
    const sg::Tensor logits = run(sg::Tensor::from_ints({token}, {1}), pos, kv);
    token = sg::ops::argmax(logits).to_ints()[0];
    ids.push_back(token);
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  // The header this program was compiled against and the library it loaded.
  const std::string header_version = std::to_string(SINKGRAPH_VERSION_MAJOR) + "." +
                                     std::to_string(SINKGRAPH_VERSION_MINOR) + "." +
                                     std::to_string(SINKGRAPH_VERSION_PATCH);
  std::printf("sinkgraph %s (headers %s)\n", sg::version(), header_version.c_str());
  try {
    const std::string dir = argv[1];
    const std::int64_t steps = argc > 2 ? std::stoll(argv[2]) : 32;
    const sg::models::LlamaModel model = sg::models::load_model(dir + "/stories260K.bin");

    std::vector<std::int64_t> reference;
    std::ifstream ref(dir + "/bos_greedy_200.txt");
    for (std::int64_t id = 0; ref >> id;) reference.push_back(id);
    if (static_cast<std::int64_t>(reference.size()) < steps) {
      std::fprintf(stderr, "error: %s/bos_greedy_200.txt holds %zu ids, fewer than %lld\n",
                   dir.c_str(), reference.size(), static_cast<long long>(steps));
      return 1;
    }
    reference.resize(static_cast<std::size_t>(steps));

    const sg::TracedFn fn = model.as_function();
    const std::vector<std::int64_t> eager =
        greedy(model, steps, [&](const sg::Tensor& t, std::int64_t pos, const sg::Tensor& kv) {
          return model.forward(t, sg::SymInt(pos), kv);
        });

    sg::CompilerConfig config;
    config.mode = sg::Mode::reduce_overhead;
    sg::TraceOptions options;
    options.graph_name = "decode";
    options.parameters = [&model] { return model.named_parameters(); };
    const auto decode = sg::compile(fn, sg::get_backend(config), options);
    const std::vector<std::int64_t> graph =
        greedy(model, steps, [&](const sg::Tensor& t, std::int64_t pos, const sg::Tensor& kv) {
          return (*decode)({t, sg::SymInt(pos), kv})[0];
        });

    const sg::GraphCounters c = decode->counters();
    std::printf("eager ids match the reference: %s\n", eager == reference ? "yes" : "NO");
    std::printf("reduce-overhead ids match the reference: %s (captured %lld, replayed %lld)\n",
                graph == reference ? "yes" : "NO", static_cast<long long>(c.captured),
                static_cast<long long>(c.replayed));
    return eager == reference && graph == reference && c.captured == 1 ? 0 : 1;
  } catch (const sg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}

// Golden tests: golden/<name>.ir is parsed, the pass named in
// golden/<name>.<pass>.expected.ir runs on it, and the printed result must
// equal that file. SG_UPDATE_GOLDEN=1 rewrites the expected files.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pass_test_util.h"

namespace sgtest {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  fs::path input;
  fs::path expected;
  std::string pass;
};

std::vector<Case> cases() {
  constexpr std::string_view kSuffix = ".expected.ir";
  std::vector<Case> out;
  for (const auto& entry : fs::directory_iterator(SG_PASSES_GOLDEN_DIR)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= kSuffix.size() || !file.ends_with(kSuffix)) continue;
    const std::string stem = file.substr(0, file.size() - kSuffix.size());  // name.pass
    const auto dot = stem.rfind('.');
    if (dot == std::string::npos) continue;
    out.push_back({entry.path().parent_path() / (stem.substr(0, dot) + ".ir"), entry.path(),
                   stem.substr(dot + 1)});
  }
  std::sort(out.begin(), out.end(),
            [](const Case& a, const Case& b) { return a.expected < b.expected; });
  return out;
}

TEST(passes_golden, EveryPassPrintsTheExpectedGraph) {
  const auto all = cases();
  ASSERT_GE(all.size(), 4U) << "golden files missing in " << SG_PASSES_GOLDEN_DIR;
  const bool update = std::getenv("SG_UPDATE_GOLDEN") != nullptr;
  for (const Case& c : all) {
    SCOPED_TRACE(c.expected.filename().string());
    ASSERT_TRUE(fs::exists(c.input)) << c.input;
    std::unique_ptr<ir::Graph> graph;
    try {
      graph = ir::parse(read(c.input), c.input.filename().string());
    } catch (const sinkgraph::InternalError& e) {
      GTEST_SKIP() << "ir::parse is not implemented yet: " << e.what();
    }
    ir::verify(*graph, c.input.filename().string());
    passes::PassContext ctx;
    // An input marked "# golden: frozen_parameter" runs with frozen params,
    // each given zeros as its data (passes that read param data need some).
    if (read(c.input).find("# golden: frozen_parameter") != std::string::npos) {
      ctx.frozen_parameter = true;
      for (const ir::Value* in : graph->inputs()) {
        if (!in->is_sym && in->kind == ir::InputKind::param) {
          ctx.param_data[in->name] = sinkgraph::ops::zeros(in->meta.shape, in->meta.dtype);
        }
      }
    }
    passes::find_pass(c.pass).run(*graph, ctx);
    ir::verify(*graph, c.expected.filename().string());
    const std::string got = ir::print(*graph);
    if (update) {
      std::ofstream(c.expected, std::ios::binary) << got;
      continue;
    }
    EXPECT_EQ(got, read(c.expected));
    // The expected text is itself a valid graph that prints back unchanged.
    EXPECT_EQ(ir::print(*ir::parse(got, c.expected.filename().string())), got);
  }
}

}  // namespace
}  // namespace sgtest

// The compile front end: CompilerConfig, get_backend, compile, guards, modes.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "../trace/models.h"
#include "helpers.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"

namespace {

namespace sg = sinkgraph;
using sgtest::error_of;

TEST(compiler_config, modes_parse_and_print_as_their_exact_strings) {
  for (const char* m : {"eager", "reduce-overhead", "max-autotune"}) {
    EXPECT_EQ(sg::mode_name(sg::parse_mode(m)), std::string(m));
    sg::CompilerConfig c;
    c.set("mode", m);
    EXPECT_EQ(c.get("mode"), m);
  }
  EXPECT_NE(error_of([] { (void)sg::parse_mode("reduce_overhead"); }).find("reduce-overhead"),
            std::string::npos);
}

TEST(compiler_config, defaults_are_torchairs) {
  const sg::CompilerConfig c;
  EXPECT_EQ(c.get("mode"), "max-autotune");
  EXPECT_EQ(c.get("force_eager"), "false");
  EXPECT_EQ(c.get("capture_limit"), "64");
  EXPECT_EQ(c.get("force_recapture"), "false");
  EXPECT_EQ(c.get("capture_error_mode"), "global");
  EXPECT_EQ(c.get("clone_input"), "true");
  EXPECT_EQ(c.get("clone_output"), "false");
  EXPECT_EQ(c.get("frozen_parameter"), "false");
  EXPECT_EQ(c.get("reuse_graph_pool_in_same_fx"), "true");
  EXPECT_EQ(c.get("use_graph_pool"), "none");
  EXPECT_EQ(c.get("warmup_iters"), "0");
  for (const char* on : {"inplace_pass", "input_inplace_pass", "pattern_fusion_pass",
                         "remove_noop_ops", "remove_cat_ops", "memory_planning"}) {
    EXPECT_EQ(c.get(on), "true") << on;
  }
  EXPECT_EQ(c.get("debug_save"), "");
  EXPECT_EQ(c.get("data_dump"), "");
  EXPECT_EQ(c.get("codegen"), "true");
  EXPECT_EQ(c.get("cache_dir"), "");
  EXPECT_EQ(c.get("capture_sizes"), "1,2,4,8,16,32");
  EXPECT_EQ(c.get("graph_memory_budget"), "0");
  EXPECT_EQ(sg::CompilerConfig::option_names().size(), 24U);
}

TEST(compiler_config, capture_sizes_and_the_graph_memory_budget_parse_from_text) {
  sg::CompilerConfig c;
  c.set("capture_sizes", "1,3,8");
  EXPECT_EQ(c.capture_sizes, (std::vector<std::int64_t>{1, 3, 8}));
  EXPECT_EQ(c.get("capture_sizes"), "1,3,8");
  for (const char* bad : {"", "1,,2", "2,1", "0,1", "1,x", "1,2,"}) {
    EXPECT_NE(error_of([&] { c.set("capture_sizes", bad); }).find("increasing batch sizes"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(c.get("capture_sizes"), "1,3,8");  // a bad value changes nothing
  c.set("graph_memory_budget", "1048576");
  EXPECT_EQ(c.graph_memory_budget, 1048576);
  EXPECT_NE(error_of([&] { c.set("graph_memory_budget", "-1"); }).find("graph_memory_budget"),
            std::string::npos);
}

TEST(compiler_config, unknown_names_and_invalid_values_are_clear_errors) {
  sg::CompilerConfig c;
  EXPECT_NE(
      error_of([&] { c.set("capture_limt", "3"); }).find("unknown compiler option 'capture_limt'"),
      std::string::npos);
  EXPECT_NE(error_of([&] { c.set("capture_limit", "-1"); }).find("capture_limit"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.set("capture_limit", "3x"); }).find("integer"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("force_eager", "yes"); }).find("true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.set("capture_error_mode", "strict"); }).find("relaxed"),
            std::string::npos);
  c.set("capture_limit", "3");
  EXPECT_EQ(c.capture_limit, 3);
}

sg::CompilerConfig config_with_mode(const char* mode) {
  sg::CompilerConfig c;
  c.set("mode", mode);
  return c;
}

TEST(compile, traces_once_per_guard_set_and_matches_eager) {
  const sgtest::Mlp mlp;
  sg::TraceOptions options;
  options.dynamic_dims[0] = {0};
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(config_with_mode("eager")), options);
  for (const std::int64_t rows : {2, 7, 2}) {
    const sg::Tensor x = sgtest::random_tensor({rows, 64}, 3);
    EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  }
  EXPECT_EQ(fn->num_traces(), 1);  // the dynamic dim does not re-trace
}

TEST(compile, changed_static_dim_retraces_and_explain_says_why) {
  const auto fn_body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    return {sg::ops::softmax(std::get<sg::Tensor>(args[0]))};
  };
  auto fn = sg::compile(fn_body, sg::get_backend(config_with_mode("eager")));
  (void)(*fn)({sgtest::random_tensor({2, 3}, 1)});
  (void)(*fn)({sgtest::random_tensor({2, 3}, 2)});
  EXPECT_EQ(fn->num_traces(), 1);
  const sg::Tensor other = sgtest::random_tensor({2, 5}, 3);
  EXPECT_EQ((*fn)({other})[0].to_floats(), sg::ops::softmax(other).to_floats());
  EXPECT_EQ(fn->num_traces(), 2);
  const std::string report = fn->explain();
  EXPECT_NE(report.find("first call"), std::string::npos) << report;
  EXPECT_NE(report.find("dimension 1 is 5, traced as the static size 3"), std::string::npos)
      << report;
}

TEST(compile, changed_specialized_integer_retraces) {
  const auto body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    return {sg::ops::mul_scalar(std::get<sg::Tensor>(args[0]),
                                static_cast<double>(std::get<std::int64_t>(args[1])))};
  };
  auto fn = sg::compile(body, sg::get_backend(config_with_mode("eager")));
  const sg::Tensor x = sg::Tensor::from_floats({1, 2}, {2});
  EXPECT_EQ((*fn)({x, std::int64_t{3}})[0].to_floats(), (std::vector<float>{3, 6}));
  EXPECT_EQ((*fn)({x, std::int64_t{3}})[0].to_floats(), (std::vector<float>{3, 6}));
  EXPECT_EQ(fn->num_traces(), 1);
  EXPECT_EQ((*fn)({x, std::int64_t{5}})[0].to_floats(), (std::vector<float>{5, 10}));
  EXPECT_EQ(fn->num_traces(), 2);
}

TEST(compile, recompile_limit_warns_and_runs_eagerly) {
  const auto body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    return {sg::ops::relu(std::get<sg::Tensor>(args[0]))};
  };
  sg::CompilerConfig config = config_with_mode("eager");
  config.set("recompile_limit", "2");
  auto fn = sg::compile(body, sg::get_backend(config));
  testing::internal::CaptureStderr();
  for (const std::int64_t n : {1, 2, 3, 4}) {
    const sg::Tensor x = sgtest::random_tensor({n}, 1);
    EXPECT_EQ((*fn)({x})[0].to_floats(), sg::ops::relu(x).to_floats());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(fn->num_traces(), 2);
  EXPECT_EQ(fn->num_graphs(), 2U);
  EXPECT_NE(err.find("recompile limit (2) reached"), std::string::npos) << err;
  // Warned once, although two calls ran eagerly.
  EXPECT_EQ(err.find("recompile limit", err.find("recompile limit") + 1), std::string::npos) << err;
  EXPECT_NE(fn->explain().find("eager calls past the recompile limit: 2"), std::string::npos);
}

TEST(compile, max_autotune_runs_every_pass_silently_and_matches_eager) {
  const sgtest::Mlp mlp;
  sg::CompilerConfig c = config_with_mode("max-autotune");
  c.codegen = false;  // bitwise against eager: the kernels (tests/codegen checks generated code)
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(c));
  testing::internal::CaptureStderr();
  const sg::Tensor x = sgtest::random_tensor({2, 64}, 5);
  EXPECT_EQ((*fn)({x})[0].to_floats(), mlp(std::vector<sg::Arg>{x})[0].to_floats());
  const sg::Tensor y = sgtest::random_tensor({3, 64}, 6);  // a new static shape: compiles again
  EXPECT_EQ((*fn)({y})[0].to_floats(), mlp(std::vector<sg::Arg>{y})[0].to_floats());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("not implemented"), std::string::npos) << err;
  EXPECT_EQ(fn->explain().find("not implemented"), std::string::npos) << fn->explain();
}

TEST(compile, eager_mode_and_force_eager_run_the_traced_graph_without_passes) {
  sg::CompilerConfig c = config_with_mode("reduce-overhead");
  c.set("force_eager", "true");
  EXPECT_TRUE(sg::GraphCompiler(c).pipeline().empty());
  EXPECT_TRUE(sg::GraphCompiler(config_with_mode("eager")).pipeline().empty());
  const auto ro = sg::GraphCompiler(config_with_mode("reduce-overhead")).pipeline();
  EXPECT_NE(std::find(ro.begin(), ro.end(), "cse"), ro.end());
  EXPECT_EQ(std::find(ro.begin(), ro.end(), "fuse_elementwise"), ro.end());
}

TEST(compile, max_autotune_runs_the_fusion_passes_after_the_cleanup_passes) {
  const auto ma = sg::GraphCompiler(config_with_mode("max-autotune")).pipeline();
  const auto at = [&](const char* name) { return std::find(ma.begin(), ma.end(), name); };
  ASSERT_NE(at("pattern_fusion_pass"), ma.end());
  ASSERT_NE(at("fuse_elementwise"), ma.end());
  EXPECT_LT(at("remove_noop_ops"), at("pattern_fusion_pass"));
  EXPECT_LT(at("pattern_fusion_pass"), at("fuse_elementwise"));
  sg::CompilerConfig c = config_with_mode("max-autotune");
  c.set("pattern_fusion_pass", "false");
  const auto off = sg::GraphCompiler(c).pipeline();
  EXPECT_EQ(std::find(off.begin(), off.end(), "pattern_fusion_pass"), off.end());
  EXPECT_NE(std::find(off.begin(), off.end(), "fuse_elementwise"), off.end());
}

TEST(compile, custom_decompositions_reach_the_tracer) {
  sg::Decompositions d;
  d["gelu"] = [](std::span<const sg::Tensor> t, std::span<const sg::ScalarValue>) {
    const sg::Tensor e = sg::ops::erf(sg::ops::mul_scalar(t[0], 0.70710678118654752));
    return sg::ops::mul_scalar(sg::ops::mul(t[0], sg::ops::add_scalar(e, 1.0)), 0.5);
  };
  const auto body = [](std::span<const sg::Arg> args) -> std::vector<sg::Tensor> {
    return {sg::ops::gelu(std::get<sg::Tensor>(args[0]))};
  };
  auto fn = sg::compile(body, sg::get_backend(config_with_mode("eager"), d));
  const sg::Tensor x = sgtest::random_tensor({32}, 9, 3.0F);
  EXPECT_EQ((*fn)({x})[0].to_floats(), sg::ops::gelu(x).to_floats());
  for (const auto& node : fn->graph(0).nodes()) EXPECT_NE(node->op_name(), "gelu");
  EXPECT_NE(error_of([] {
              sg::Decompositions bad;
              bad["no_such_op"] = nullptr;
              (void)sg::compile([](std::span<const sg::Arg>) { return std::vector<sg::Tensor>{}; },
                                sg::get_backend(sg::CompilerConfig{}, bad));
            }).find("no_such_op"),
            std::string::npos);
}

TEST(compile, debug_save_writes_the_ir_after_every_pass_and_a_dot_file) {
  const auto dir = std::filesystem::temp_directory_path() / "sinkgraph_debug_save_test";
  std::filesystem::remove_all(dir);
  sg::CompilerConfig c = config_with_mode("reduce-overhead");
  c.debug_save = dir.string();
  const sgtest::Mlp mlp;
  testing::internal::CaptureStderr();
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(c));
  (void)(*fn)({sgtest::random_tensor({2, 64}, 1)});
  (void)testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::filesystem::exists(dir / "00_input.ir"));
  EXPECT_TRUE(std::filesystem::exists(dir / "final.dot"));
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, sg::GraphCompiler(c).pipeline().size() + 2);
  std::filesystem::remove_all(dir);
}

TEST(compile, data_dump_writes_every_nodes_output_from_one_eager_run) {
  for (const char* mode : {"eager", "reduce-overhead"}) {
    const auto dir =
        std::filesystem::temp_directory_path() / (std::string("sinkgraph_dump_") + mode);
    std::filesystem::remove_all(dir);
    sg::CompilerConfig c = config_with_mode(mode);
    c.data_dump = dir.string();
    c.inplace_pass = c.input_inplace_pass = false;
    const sgtest::Mlp mlp;
    auto fn = sg::compile(std::cref(mlp), sg::get_backend(c));
    const sg::Tensor x = sgtest::random_tensor({2, 64}, 4);
    const std::vector<float> y = (*fn)({x})[0].to_floats();
    (void)(*fn)({x});  // dumped once only
    std::ifstream index(dir / "index.txt");
    std::vector<std::string> lines;
    for (std::string line; std::getline(index, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), fn->graph(0).nodes().size()) << mode;
    EXPECT_NE(lines.back().find("matmul [2,64]"), std::string::npos) << lines.back();
    std::ifstream last(dir / lines.back().substr(0, lines.back().find(' ')), std::ios::binary);
    std::vector<float> dumped(y.size());
    last.read(reinterpret_cast<char*>(dumped.data()),
              static_cast<std::streamsize>(dumped.size() * 4));
    EXPECT_EQ(dumped, y) << mode;
    std::filesystem::remove_all(dir);
  }
}

TEST(compile, calls_from_several_threads_are_serialized_and_correct) {
  const sgtest::Mlp mlp;
  auto fn = sg::compile(std::cref(mlp), sg::get_backend(config_with_mode("eager")));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const sg::Tensor x = sgtest::random_tensor({2, 64}, static_cast<std::uint32_t>(t * 10 + i));
        if ((*fn)({x})[0].to_floats() != mlp(std::vector<sg::Arg>{x})[0].to_floats()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fn->num_traces(), 1);
}

// CallOptions{.wait = true}: the same values, complete when call() returns
// (the replay runs on the calling thread), from several threads at once, and
// mixed with plain calls whose work is still queued.
TEST(compile, calls_that_wait_give_the_values_of_plain_calls_in_every_mode) {
  const sgtest::Mlp mlp;
  for (const char* mode : {"eager", "reduce-overhead", "max-autotune"}) {
    SCOPED_TRACE(mode);
    sg::CompilerConfig c = config_with_mode(mode);
    c.clone_output = true;  // outputs kept across calls from several threads
    auto fn = sg::compile(std::cref(mlp), sg::get_backend(c));
    // Captured before the threads start: under capture_error_mode=global a
    // capture forbids every other thread's device work while it runs.
    (void)fn->call({sgtest::random_tensor({2, 64}, 99)}, {.wait = true});
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::pair<sg::Tensor, sg::Tensor>> kept;  // (input, output)
        for (int i = 0; i < 20; ++i) {
          const sg::Tensor x =
              sgtest::random_tensor({2, 64}, static_cast<std::uint32_t>(t * 100 + i));
          const bool wait = (i + t) % 2 == 0;
          kept.emplace_back(x, wait ? fn->call({x}, {.wait = true})[0] : (*fn)({x})[0]);
        }
        for (const auto& [x, y] : kept) {
          // max-autotune's generated code rounds differently: close, not equal.
          const std::vector<float> got = y.to_floats();
          const std::vector<float> want = mlp(std::vector<sg::Arg>{x})[0].to_floats();
          bool close = got.size() == want.size();
          for (std::size_t k = 0; close && k < got.size(); ++k) {
            close = std::abs(got[k] - want[k]) <= 1e-5F + 1e-4F * std::abs(want[k]);
          }
          if (!close) ++wrong;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0);
  }
}

}  // namespace

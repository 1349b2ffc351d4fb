// Saved graphs (Note [Saved graphs] in src/compiler/saved_graphs.cpp): a
// compiled function's post-pass graphs and guards written by one "process" and
// read by another, which must then skip tracing and compute what a traced
// function computes, bit for bit; and every way a file can be wrong refused
// before anything changes.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdlib.h>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "sinkgraph/llama.h"
#include "sinkgraph/log.h"
#include "sinkgraph/ops.h"
#include "trace/models.h"

namespace sg = sinkgraph;
namespace fs = std::filesystem;
using json = nlohmann::json;
using sgtest::error_of;

namespace {

// A small Llama: every operator the real decode graph has, in milliseconds.
sg::models::LlamaModel small_llama(std::uint64_t seed = 7, std::int64_t hidden = 96) {
  sg::models::LlamaConfig c;
  c.dim = 32;
  c.hidden_dim = hidden;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  return sg::models::random_model(c, seed);
}

// A per-test folder, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sg-saved-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

sg::CompilerConfig config_for(const std::string& mode, const fs::path& cache) {
  sg::CompilerConfig c;
  c.set("mode", mode);
  c.cache_dir = cache.string();  // generated code, and the cache_key files
  return c;
}

// The decode-style function of a model: tokens [s0] at pos0, KV cache in place.
std::shared_ptr<sg::CompiledFunction> compile_llama(const sg::models::LlamaModel& model,
                                                    const sg::CompilerConfig& config,
                                                    const std::string& cache_key = "") {
  sg::TraceOptions options;
  options.graph_name = "forward";
  options.dynamic_dims[0] = {0};
  options.parameters = [&model] { return model.named_parameters(); };
  options.cache_key = cache_key;
  return sg::compile(model.as_function(), sg::get_backend(config), options);
}

// A prompt of 3 tokens, then 4 single-token steps: logits of every call.
std::vector<std::vector<float>> run_llama(sg::CompiledFunction& fn,
                                          const sg::models::LlamaModel& model) {
  const sg::Tensor kv = model.new_kv_cache(8);
  std::vector<std::vector<float>> out;
  out.push_back(fn({sg::Tensor::from_ints({1, 5, 9}, {3}), sg::SymInt(0), kv})[0].to_floats());
  for (std::int64_t pos = 3; pos < 7; ++pos) {
    out.push_back(fn({sg::Tensor::from_ints({pos * 3}, {1}), sg::SymInt(pos), kv})[0].to_floats());
  }
  return out;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}
void write_json(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(1); }

// Warnings sent to the logger while alive.
struct CapturedWarnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  CapturedWarnings() {
    sg::set_log_handler([this](sg::LogLevel level, std::string_view message) {
      if (level != sg::LogLevel::warn) return;
      const std::lock_guard lock(mutex);
      lines.emplace_back(message);
    });
  }
  ~CapturedWarnings() { sg::set_log_handler(nullptr); }
  CapturedWarnings(const CapturedWarnings&) = delete;
  CapturedWarnings& operator=(const CapturedWarnings&) = delete;
  bool any_contains(const std::string& text) {
    const std::lock_guard lock(mutex);
    for (const auto& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

}  // namespace

// The restart: a new model object (same checkpoint) and a new compiled
// function load the file, trace nothing, and compute the traced function's
// logits bit for bit, in both capturing modes.
TEST(saved_graphs, a_restart_skips_tracing_and_computes_the_same) {
  for (const std::string mode : {"reduce-overhead", "max-autotune"}) {
    SCOPED_TRACE(mode);
    const TempDir dir;
    const sg::CompilerConfig config = config_for(mode, dir.path);
    const fs::path file = dir.path / "forward.graphs.json";
    std::vector<std::vector<float>> traced;
    std::int64_t captures = 0;
    {
      const sg::models::LlamaModel model = small_llama();
      auto fn = compile_llama(model, config);
      traced = run_llama(*fn, model);
      ASSERT_EQ(fn->num_traces(), 1);
      captures = fn->counters().captured;  // one per prompt length
      fn->save(file.string());
    }
    const sg::models::LlamaModel model = small_llama();
    auto fn = compile_llama(model, config);
    EXPECT_EQ(fn->load(file.string()), 1U);
    EXPECT_EQ(run_llama(*fn, model), traced);
    EXPECT_EQ(fn->num_traces(), 0);
    EXPECT_EQ(fn->counters().captured, captures);
    EXPECT_NE(fn->explain().find("loaded from " + file.string()), std::string::npos)
        << fn->explain();
  }
}

// TraceOptions::cache_key: the first function writes the file into the cache
// folder, the next one finds it; a file that went bad warns once, is traced
// around and written again.
TEST(saved_graphs, a_cache_key_keeps_graphs_across_functions) {
  const TempDir dir;
  const sg::CompilerConfig config = config_for("reduce-overhead", dir.path);
  const sg::models::LlamaModel model = small_llama();
  auto first = compile_llama(model, config, model.trace_key());
  const auto expected = run_llama(*first, model);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    if (e.path().string().ends_with(".graphs.json")) files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1U);

  auto second = compile_llama(model, config, model.trace_key());
  EXPECT_EQ(run_llama(*second, model), expected);
  EXPECT_EQ(second->num_traces(), 0);

  // Another key (another model's code) does not see it.
  auto other = compile_llama(model, config, model.trace_key() + " v2");
  EXPECT_EQ(run_llama(*other, model), expected);
  EXPECT_EQ(other->num_traces(), 1);

  std::ofstream(files[0]) << "{ truncated";
  CapturedWarnings warnings;
  auto third = compile_llama(model, config, model.trace_key());
  EXPECT_EQ(run_llama(*third, model), expected);
  EXPECT_EQ(third->num_traces(), 1);
  EXPECT_TRUE(warnings.any_contains("ignoring saved graphs")) << warnings.lines.size();
  auto fourth = compile_llama(model, config, model.trace_key());
  EXPECT_EQ(run_llama(*fourth, model), expected);
  EXPECT_EQ(fourth->num_traces(), 0);
}

// Every way a file can be wrong is an error naming it, and leaves the
// function as it was: it traces on its next call as if nothing happened.
TEST(saved_graphs, a_bad_file_is_refused_and_changes_nothing) {
  const TempDir dir;
  const sg::CompilerConfig config = config_for("reduce-overhead", dir.path);
  const sg::models::LlamaModel model = small_llama();
  const fs::path good = dir.path / "good.json";
  std::vector<std::vector<float>> expected;
  {
    auto fn = compile_llama(model, config);
    expected = run_llama(*fn, model);
    fn->save(good.string());
  }
  const json saved = read_json(good);
  const fs::path bad = dir.path / "bad.json";
  const auto refused = [&](const std::function<void(json&)>& edit, const std::string& message,
                           const sg::models::LlamaModel& into = small_llama(),
                           const sg::CompilerConfig& with = config_for("reduce-overhead", "")) {
    json j = saved;
    edit(j);
    write_json(bad, j);
    auto fn = compile_llama(into, with);
    const std::string err = error_of([&] { (void)fn->load(bad.string()); });
    EXPECT_NE(err.find(message), std::string::npos) << "expected '" << message << "', got: " << err;
    EXPECT_EQ(fn->num_graphs(), 0U);
  };
  refused([](json& j) { j["format"] = "something else"; }, "not a sinkgraph saved-graphs file");
  refused([](json& j) { j["sinkgraph"] = "0.0.1"; }, "saved by sinkgraph 0.0.1");
  refused([](json& j) { j["graph_name"] = "decode"; }, "saved for @decode, not @forward");
  refused([](json& j) { j["options"]["inplace_pass"] = "false"; }, "saved with inplace_pass=false");
  refused([](json& j) { j["passes"].erase(0); }, "other passes");
  refused(
      [](json& j) { j["graphs"][0]["ir"] = "graph @forward(%x: f32[2]) {\n  %y = nope(%x)\n}"; },
      "graph 0");
  refused(
      [](json& j) {
        j["graphs"][0]["inputs"][0] = {{"arg", 2}};
      },
      "where tracing binds argument 0");
  refused([](json& j) { j["graphs"][0]["inputs"].erase(0); }, "input bindings for");
  refused([](json& j) { j["graphs"][0]["args"][0]["dtype"] = "f32"; },
          "i64 in the graph but f32 in its guard");
  refused([](json& j) { j["graphs"][0]["args"][0]["dims"] = {5}; }, "dimension 0 is s0");
  refused([](json& j) { j["graphs"][0]["args"][2]["alias_of"] = 7; }, "alias_of 7");
  refused([](json& j) { j["graphs"][0]["args"][1]["kind"] = "float"; }, "kind 'float'");
  refused(
      [](json& j) {
        for (auto& in : j["graphs"][0]["inputs"]) {
          if (in.contains("param")) {
            in["param"] = "no.such.weight";
            break;
          }
        }
      },
      "the model has no parameter 'no.such.weight'");
  // The same file into a model of other shapes: the params disagree.
  refused([](json&) {}, "in the model but", small_llama(7, 128));
  // Into a backend that runs other passes.
  sg::CompilerConfig other = config_for("reduce-overhead", "");
  other.inplace_pass = false;
  refused([](json&) {}, "this function's backend has inplace_pass=false", small_llama(), other);

  std::ofstream(bad) << "not json";
  auto fn = compile_llama(model, config);
  EXPECT_NE(error_of([&] { (void)fn->load(bad.string()); }).find("not a valid saved-graphs file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)fn->load((dir.path / "missing.json").string()); }), "");
  // Nothing changed: the function traces and computes as usual.
  EXPECT_EQ(run_llama(*fn, model), expected);
  EXPECT_EQ(fn->num_traces(), 1);
  // A function that already has graphs takes no file.
  EXPECT_NE(error_of([&] { (void)fn->load(good.string()); }).find("before its first call"),
            std::string::npos);
}

// A param the model does not list by name cannot be written by name: save()
// says so instead of writing a file that could not be loaded.
TEST(saved_graphs, a_graph_reading_an_unnamed_tensor_cannot_be_saved) {
  const TempDir dir;
  const sg::Tensor w = sgtest::random_tensor({4, 4}, 3);
  const auto body = [&w](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return {sg::ops::matmul(std::get<sg::Tensor>(a[0]), w)};
  };
  auto fn = sg::compile(body, sg::get_backend(sgtest::reduce_overhead()));
  (void)(*fn)({sgtest::random_tensor({2, 4}, 1)});
  const fs::path file = dir.path / "f.json";
  EXPECT_NE(error_of([&] { fn->save(file.string()); }).find("does not list by name"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(file));
}

// Several guard sets, an integer guard and a model object's named params: each
// saved graph comes back under its own guards, and a weight reassigned after
// loading still re-traces.
TEST(saved_graphs, every_guard_set_comes_back) {
  const TempDir dir;
  sgtest::Mlp mlp;
  const auto scaled = [&mlp](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    const std::vector<sg::Arg> x{a[0]};
    const auto k = std::get<std::int64_t>(a[1]);
    return {sg::ops::mul_scalar(mlp(x)[0], static_cast<double>(k))};
  };
  sg::TraceOptions options;
  options.parameters = [&mlp] { return mlp.named_parameters(); };
  const auto backend = sg::get_backend(sgtest::reduce_overhead());
  const sg::Tensor x2 = sgtest::random_tensor({2, 64}, 1);
  const sg::Tensor x3 = sgtest::random_tensor({3, 64}, 2);
  const fs::path file = dir.path / "mlp.json";
  std::vector<std::vector<float>> expected;
  {
    auto fn = sg::compile(scaled, backend, options);
    expected.push_back((*fn)({x2, std::int64_t{2}})[0].to_floats());
    expected.push_back((*fn)({x3, std::int64_t{2}})[0].to_floats());
    expected.push_back((*fn)({x2, std::int64_t{5}})[0].to_floats());
    ASSERT_EQ(fn->num_graphs(), 3U);
    fn->save(file.string());
  }
  auto fn = sg::compile(scaled, backend, options);
  EXPECT_EQ(fn->load(file.string()), 3U);
  EXPECT_EQ((*fn)({x2, std::int64_t{5}})[0].to_floats(), expected[2]);
  EXPECT_EQ((*fn)({x3, std::int64_t{2}})[0].to_floats(), expected[1]);
  EXPECT_EQ((*fn)({x2, std::int64_t{2}})[0].to_floats(), expected[0]);
  EXPECT_EQ(fn->num_traces(), 0);
  mlp.w1 = sgtest::random_tensor({64, 256}, 42);
  const std::vector<sg::Arg> x{x2};
  EXPECT_EQ((*fn)({x2, std::int64_t{2}})[0].to_floats(),
            sg::ops::mul_scalar(mlp(x)[0], 2.0).to_floats());
  EXPECT_EQ(fn->num_traces(), 1);
}

// A cache file shared by many runs collects guard sets no one run needs (each
// generate --steps sizes its KV cache anew). Saved graphs count against
// recompile_limit only once a call uses one: a file already holding
// recompile_limit graphs must leave room for a new guard set (it once left
// none, and the run went eager), and the rewritten file keeps the guard sets
// of the last run first, still recompile_limit at most.
TEST(saved_graphs, a_full_file_leaves_room_for_a_new_guard_set) {
  const TempDir dir;
  sgtest::Mlp mlp;
  const auto fn_of = [&mlp](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return mlp(a.first(1));
  };
  sg::CompilerConfig config = sgtest::reduce_overhead();
  config.cache_dir = dir.path.string();
  config.recompile_limit = 2;
  const auto backend = sg::get_backend(config);
  sg::TraceOptions options;
  options.graph_name = "mlp";
  options.cache_key = "mlp for saved_graphs_test";
  options.parameters = [&mlp] { return mlp.named_parameters(); };
  const auto x = [](std::int64_t rows) { return sgtest::random_tensor({rows, 64}, rows); };
  const auto expected = [&](std::int64_t rows) {
    const std::vector<sg::Arg> a{x(rows)};
    return mlp(a)[0].to_floats();
  };
  const auto file_rows = [&] {
    std::vector<std::int64_t> rows;
    for (const auto& e : fs::directory_iterator(dir.path)) {
      if (!e.path().string().ends_with(".graphs.json")) continue;
      const json file = read_json(e.path());
      for (const json& g : file.at("graphs")) {
        rows.push_back(g.at("args")[0].at("dims")[0].get<std::int64_t>());
      }
    }
    return rows;
  };

  {  // the first run fills the file
    auto fn = sg::compile(fn_of, backend, options);
    (void)(*fn)({x(2)});
    (void)(*fn)({x(3)});
    ASSERT_EQ(fn->num_traces(), 2);
  }
  ASSERT_EQ(file_rows(), (std::vector<std::int64_t>{2, 3}));
  {  // a run with a new shape traces and captures it: no eager call
    auto fn = sg::compile(fn_of, backend, options);
    EXPECT_EQ((*fn)({x(4)})[0].to_floats(), expected(4));
    EXPECT_EQ(fn->num_traces(), 1);
    EXPECT_EQ(fn->num_graphs(), 1U);
    EXPECT_EQ(fn->counters().captured, 1);
    EXPECT_EQ(fn->explain().find("eager calls"), std::string::npos) << fn->explain();
    EXPECT_NE(fn->explain().find("saved graphs no call has matched yet: 2"), std::string::npos)
        << fn->explain();
  }
  EXPECT_EQ(file_rows(), (std::vector<std::int64_t>{4, 2}));
  {  // the kept guard sets come back without tracing; the dropped one would
     // trace, but two graphs are in use
    auto fn = sg::compile(fn_of, backend, options);
    EXPECT_EQ((*fn)({x(2)})[0].to_floats(), expected(2));
    EXPECT_EQ((*fn)({x(4)})[0].to_floats(), expected(4));
    EXPECT_EQ(fn->num_traces(), 0);
    EXPECT_EQ((*fn)({x(3)})[0].to_floats(), expected(3));
    EXPECT_EQ(fn->num_traces(), 0) << "recompile_limit reached: the third shape runs eagerly";
    EXPECT_NE(fn->explain().find("eager calls past the recompile limit: 1"), std::string::npos);
  }
}

// Calls from several host threads race to take the same saved graphs: each
// guard set is built once, no call traces or runs eagerly, and every result
// is the eager one.
TEST(saved_graphs, threads_taking_saved_graphs_build_each_once) {
  const TempDir dir;
  sgtest::Mlp mlp;
  const auto fn_of = [&mlp](std::span<const sg::Arg> a) -> std::vector<sg::Tensor> {
    return mlp(a.first(1));
  };
  sg::CompilerConfig config = sgtest::reduce_overhead();
  config.clone_output = true;  // outputs read by other threads outlive the next replay
  const auto backend = sg::get_backend(config);
  sg::TraceOptions options;
  options.parameters = [&mlp] { return mlp.named_parameters(); };
  const fs::path file = dir.path / "mlp.json";
  const std::vector<sg::Tensor> xs{sgtest::random_tensor({2, 64}, 2),
                                   sgtest::random_tensor({3, 64}, 3)};
  std::vector<std::vector<float>> expected;
  {
    auto fn = sg::compile(fn_of, backend, options);
    for (const sg::Tensor& x : xs) expected.push_back((*fn)({x})[0].to_floats());
    fn->save(file.string());
  }
  auto fn = sg::compile(fn_of, backend, options);
  ASSERT_EQ(fn->load(file.string()), 2U);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::size_t k = static_cast<std::size_t>((t + i) % 2);
        if ((*fn)({xs[k]})[0].to_floats() != expected[k]) ++wrong;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fn->num_traces(), 0);
  EXPECT_EQ(fn->num_graphs(), 2U);
  EXPECT_EQ(fn->explain().find("eager calls"), std::string::npos) << fn->explain();
}

// Tensor-parallel Llama (Note [Tensor-parallel Llama]) over MPI, run by ctest
// as `mpirun -np N`: every rank holds its shard and every rank must produce
// what one process produces. stories260K is read in place from ../shared
// (the test skips when it is absent).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/compiler.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/generate.h"
#include "sinkgraph/llama.h"

namespace {

namespace fs = std::filesystem;
namespace sg = sinkgraph;
namespace dist = sinkgraph::dist;
namespace models = sinkgraph::models;

const dist::Communicator& world() {
  static const dist::Communicator c = dist::Communicator::world();
  return c;
}

models::TensorParallel my_part(
    models::ClassifierSplit classifier = models::ClassifierSplit::vocab) {
  return {world().group(), world().rank(), world().size(), classifier};
}

constexpr models::ClassifierSplit kSplits[] = {models::ClassifierSplit::vocab,
                                               models::ClassifierSplit::replicated};
const char* split_name(models::ClassifierSplit s) {
  return s == models::ClassifierSplit::vocab ? "classifier split by vocab"
                                             : "classifier replicated";
}

const fs::path kStories = fs::path(SG_SHARED_DIR) / "models" / "stories260K";

std::vector<std::int64_t> reference_ids() {
  std::ifstream in(kStories / "bos_greedy_200.txt");
  std::vector<std::int64_t> ids;
  std::int64_t id = 0;
  while (in >> id) ids.push_back(id);
  return ids;
}

// The 200 reference ids (the first 32 above two ranks, which oversubscribe
// this machine) from each rank's shard, in every mode.
TEST(llama_tp, stories260k_reproduces_the_reference_ids_in_every_mode) {
  if (!fs::exists(kStories / "stories260K.bin")) GTEST_SKIP() << "no " << kStories;
  const models::LlamaModel whole = models::load_model((kStories / "stories260K.bin").string());
  std::vector<std::int64_t> want = reference_ids();
  ASSERT_EQ(want.size(), 200U);
  if (world().size() > 2) want.resize(32);
  for (const models::ClassifierSplit split : kSplits) {
    SCOPED_TRACE(split_name(split));
    const models::LlamaModel shard = models::shard_model(whole, my_part(split));
    // Each rank holds its share of the weights (the replicated embedding and
    // norms are the rest; a shared classifier split by vocabulary is a view
    // of the embedding).
    if (world().size() == 2) {
      EXPECT_LE(static_cast<double>(shard.weight_bytes()),
                0.6 * static_cast<double>(whole.weight_bytes()));
    }
    for (const sg::Mode mode :
         {sg::Mode::eager, sg::Mode::reduce_overhead, sg::Mode::max_autotune}) {
      SCOPED_TRACE(static_cast<int>(mode));
      sg::GenerateOptions o;
      o.steps = static_cast<std::int64_t>(want.size());
      const sg::GenerateResult r = sg::generate(shard, o, {mode});
      EXPECT_EQ(r.ids, want);
      if (mode != sg::Mode::eager) {
        EXPECT_EQ(r.decode_counters.captured, 1);
      }
    }
  }
}

// A random model: the shards' logits (eager and captured) within 1e-4 of the
// whole model's in this process.
TEST(llama_tp, random_model_logits_match_one_process) {
  models::LlamaConfig c;
  c.dim = 64, c.hidden_dim = 192, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 4;
  c.vocab_size = 300, c.max_seq_len = 32;
  for (const bool shared : {true, false}) {
    c.shared_classifier = shared;
    const models::LlamaModel whole = models::random_model(c, 7);
    sg::GenerateOptions o;
    o.prompt = {1, 17, 42, 99};
    o.steps = 8;
    o.keep_logits = true;
    const std::vector<float> want = sg::generate(whole, o, {sg::Mode::eager}).logits;
    for (const models::ClassifierSplit split : kSplits) {
      const models::LlamaModel shard = models::shard_model(whole, my_part(split));
      for (const sg::Mode mode :
           {sg::Mode::eager, sg::Mode::reduce_overhead, sg::Mode::max_autotune}) {
        const std::vector<float> got = sg::generate(shard, o, {mode}).logits;
        ASSERT_EQ(got.size(), want.size());
        float worst = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const float d = std::fabs(got[i] - want[i]);
          worst = std::isnan(d) ? INFINITY : std::max(worst, d);
        }
        EXPECT_LE(worst, 1e-4F) << "mode " << static_cast<int>(mode) << ", " << split_name(split)
                                << (shared ? ", shared" : ", separate");
      }
    }
  }
}

TEST(llama_tp, a_split_that_breaks_heads_is_refused) {
  models::LlamaConfig c;
  c.dim = 48, c.hidden_dim = 96, c.n_layers = 1, c.n_heads = 3, c.n_kv_heads = 3;
  c.vocab_size = 64, c.max_seq_len = 8;
  const models::LlamaModel whole = models::random_model(c, 1);
  try {
    (void)models::shard_model(whole, {world().group(), 0, 2});
    ADD_FAILURE() << "3 heads over 2 ranks must be refused";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole heads"), std::string::npos) << e.what();
  }
}

}  // namespace

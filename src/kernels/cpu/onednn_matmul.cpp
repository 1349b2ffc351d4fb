// Products through oneDNN's matmul: Note [Matrix products through oneDNN] in onednn.h.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "onednn.h"
#include "onednn_internal.h"

namespace sinkgraph::kernels::cpu::onednn {
namespace {

using dnnl::memory;

std::atomic<std::uint64_t> g_matmul_calls{0};

// The rows are cut into blocks of at least kMatmulBlockRows, at most
// kMatmulMaxBlocks of them, as even as whole rows allow: the cut is a
// function of the shape only (Note [Matrix products through oneDNN]). Rows,
// not columns: a block of columns writes a strided part of the output, which
// oneDNN 2.6's brgemm kernels refuse (its fallback, gemm:jit, measured at
// half their rate), while a block of rows is dense.
constexpr std::int64_t kMatmulBlockRows = 32;
constexpr std::int64_t kMatmulMaxBlocks = 8;

// One block's problem: everything its primitive depends on (all fields set).
struct Key {
  std::int64_t m, n, k, ldx, wn, wk, ldo;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

struct Plan {
  dnnl::matmul primitive;
  memory::desc x_desc, w_desc, out_desc, pad_desc;
};

std::shared_ptr<const Plan> make_plan(const Key& key) {
  const memory::desc x_desc({key.m, key.k}, memory::data_type::f32, {key.ldx, 1});
  // W[K, N] with (k, n) at k * wk + n * wn: the caller's weight in place.
  const memory::desc w_desc({key.k, key.n}, memory::data_type::f32, {key.wk, key.wn});
  const memory::desc out_desc({key.m, key.n}, memory::data_type::f32, {key.ldo, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_desc, w_desc, out_desc), attr,
                                        engine());
  auto plan = std::make_shared<Plan>();
  plan->primitive = dnnl::matmul(pd);
  plan->x_desc = x_desc;
  plan->w_desc = w_desc;
  plan->out_desc = out_desc;
  plan->pad_desc = pd.scratchpad_desc();
  return plan;
}

std::shared_ptr<const Plan> plan_for(const Key& key) { return cached_plan(key, make_plan); }

struct Block {
  std::shared_ptr<const Plan> plan;
  const float* x = nullptr;
  float* out = nullptr;
};

struct Job {
  const float* w = nullptr;
  Block block[kMatmulMaxBlocks];
  int blocks = 0;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
};

// One block, single-threaded, on whichever compute thread runs it.
void run_block(Job& job, const Block& blk) {
  try {
    omp_set_num_threads(1);
    thread_local dnnl::stream stream(engine());
    thread_local std::vector<std::byte> pad;
    const Plan& plan = *blk.plan;
    if (pad.size() < plan.pad_desc.get_size()) pad.resize(plan.pad_desc.get_size());
    const dnnl::engine& eng = engine();
    plan.primitive.execute(stream,
                           {{DNNL_ARG_SRC, memory(plan.x_desc, eng, const_cast<float*>(blk.x))},
                            {DNNL_ARG_WEIGHTS, memory(plan.w_desc, eng, const_cast<float*>(job.w))},
                            {DNNL_ARG_DST, memory(plan.out_desc, eng, blk.out)},
                            {DNNL_ARG_SCRATCHPAD, memory(plan.pad_desc, eng, pad.data())}});
    stream.wait();
  } catch (const dnnl::error& e) {
    const std::lock_guard lock(job.error_mutex);
    if (job.error.empty()) job.error = e.what();
    job.failed.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

std::uint64_t matmul_calls() { return g_matmul_calls.load(std::memory_order_relaxed); }

bool matmul(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
            float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
            KernelContext& ctx) {
  if (!enabled() || m <= 0 || n <= 0 || k <= 0) return false;
  // oneDNN sizes a primitive's work split by the caller's OpenMP team: one.
  omp_set_num_threads(1);
  Job job;
  job.w = w;
  const std::int64_t blocks = std::clamp<std::int64_t>(m / kMatmulBlockRows, 1, kMatmulMaxBlocks);
  job.blocks = static_cast<int>(blocks);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t r0 = m * b / blocks, r1 = m * (b + 1) / blocks;
    Block& blk = job.block[b];
    blk.plan = plan_for(Key{r1 - r0, n, k, ldx, wn, wk, ldo});
    if (blk.plan == nullptr) return false;  // oneDNN declines it: our own kernel
    blk.x = x + r0 * ldx;
    blk.out = out + r0 * ldo;
  }
  g_matmul_calls.fetch_add(1, std::memory_order_relaxed);
  ctx.parallel_run(
      job.blocks,
      [](void* arg, int b) {
        auto& j = *static_cast<Job*>(arg);
        run_block(j, j.block[b]);
      },
      &job);
  if (job.failed.load(std::memory_order_relaxed)) ctx.fail("matmul: oneDNN failed: " + job.error);
  return true;
}

}  // namespace sinkgraph::kernels::cpu::onednn

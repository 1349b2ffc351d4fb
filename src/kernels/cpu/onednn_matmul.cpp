// Products through oneDNN's matmul: Note [Matrix products through oneDNN] in onednn.h.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"
#include "onednn.h"
#include "onednn_internal.h"

namespace sinkgraph::kernels::cpu::onednn {
namespace {

using dnnl::memory;

std::atomic<std::uint64_t> g_matmul_calls{0};

// The product is cut into blocks as a function of the shape only (Note
// [Matrix products through oneDNN]): rows into blocks of at least
// kMatmulBlockRows, at most kMatmulMaxBlocks of them, as even as whole rows
// allow. A product of fewer than two such blocks of rows (a vision
// transformer's 197 tokens, an encoder over a few tokens through matmul(x,
// w^T), Note [A linear's rows and a matmul's] in linalg.cpp) is cut into at
// most kMatmulMaxColBlocks blocks of columns instead, each at least
// kMatmulBlockCols wide and kMatmulBlockWork multiply-adds, so that two
// compute threads still share it.
// Every block packs the part of the weight it reads (brgemm copies W into
// its blocked layout on each execution), so a block of rows repacks all of
// W: seven blocks of 28 rows ran a 197-row product at 0.72-0.81x one block
// on one thread, two blocks of columns, which pack W once between them, at
// 0.92-0.98x, and at two threads blocks of 128 rows or of columns ran
// 1.5-1.9x blocks of 32 (docs/performance.md, "Blocks that repack the
// weight").
// Measured on the 2-core machine (bench_linear, BM_MatmulTransposedW
// against BM_Linear at 16 and 32 rows, two threads): one block ran 0.6x
// linear's row kernel split over both threads, two halves 1.1-1.9x it, and
// four or eight smaller blocks no faster than two (docs/performance.md, "A
// torch linear's rows"). oneDNN 2.6's brgemm kernels refuse a strided
// output for some shapes (its fallback, gemm:jit, measured at half their
// rate), so a block of columns is computed into a dense buffer of the
// thread's own and copied into place where that is what gets it brgemm
// (Plan::dense_out). Where brgemm declines the block anyway (a 1x1
// convolution's product, whose W is the activation: a block of its columns
// is a strided W, and every such block of efficientnet_b0's ran gemm:jit
// either way), the block writes its output in place: the copy was 3.6% of
// that model's reduce-overhead samples (docs/performance.md, "Broadcasts
// over rows").
constexpr std::int64_t kMatmulBlockRows = 128;
constexpr std::int64_t kMatmulBlockCols = 128;
constexpr std::int64_t kMatmulBlockWork = std::int64_t{1} << 20;  // multiply-adds
constexpr std::int64_t kMatmulMaxColBlocks = 2;
constexpr std::int64_t kMatmulMaxBlocks = 8;

// One block's problem: everything its primitive depends on (all fields set).
struct Key {
  std::int64_t m, n, k, ldx, wn, wk, ldo;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

struct Plan {
  dnnl::matmul primitive;
  memory::desc x_desc, w_desc, out_desc, pad_desc;
  bool dense_out = false;  // computed into a dense buffer, then copied to ldo
};

bool is_brgemm(const dnnl::matmul::primitive_desc& pd) {
  return std::string_view(pd.impl_info_str()).starts_with("brg");
}

// A block whose output rows are ldo apart (ldo > n: a block of columns) is
// computed in place unless only a dense output gets brgemm (see above).
std::shared_ptr<const Plan> make_plan(const Key& key) {
  const memory::desc x_desc({key.m, key.k}, memory::data_type::f32, {key.ldx, 1});
  // W[K, N] with (k, n) at k * wk + n * wn: the caller's weight in place.
  const memory::desc w_desc({key.k, key.n}, memory::data_type::f32, {key.wk, key.wn});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto describe = [&](std::int64_t ldo) {
    const memory::desc out_desc({key.m, key.n}, memory::data_type::f32, {ldo, 1});
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(x_desc, w_desc, out_desc), attr,
                                        engine());
  };
  dnnl::matmul::primitive_desc pd = describe(key.ldo);
  bool dense_out = false;
  if (key.ldo != key.n && !is_brgemm(pd)) {
    dnnl::matmul::primitive_desc dense = describe(key.n);
    if (is_brgemm(dense)) {
      pd = std::move(dense);
      dense_out = true;
    }
  }
  auto plan = std::make_shared<Plan>();
  plan->primitive = dnnl::matmul(pd);
  plan->x_desc = x_desc;
  plan->w_desc = w_desc;
  plan->out_desc = pd.dst_desc();
  plan->pad_desc = pd.scratchpad_desc();
  plan->dense_out = dense_out;
  return plan;
}

std::shared_ptr<const Plan> plan_for(const Key& key) { return cached_plan(key, make_plan); }

struct Block {
  std::shared_ptr<const Plan> plan;
  const float* x = nullptr;
  const float* w = nullptr;
  float* out = nullptr;
  // rows x cols at out, rows ldo apart (a block of columns: ldo > cols).
  std::int64_t rows = 0, cols = 0, ldo = 0;
};

struct Job {
  Block block[kMatmulMaxBlocks];
  int blocks = 0;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
};

// Note [oneDNN arguments bound once per thread]
// A product of a few rows (an encoder over ten tokens, a decode step's
// attention) takes a few microseconds in oneDNN's kernel, and executing it
// through the C++ API cost about as much again around it: four dnnl::memory
// objects created and destroyed per block (a heap allocation each) and an
// std::unordered_map of the arguments built for execute(), with its buckets
// and nodes (malloc, free and the map's rehash were a quarter of a
// ten-token TransformerEncoderLayer replay's samples). Each compute thread
// now keeps, per plan it ran recently, the four memory objects, and points
// them at this block's buffers (set_data_handle: a pointer store for plain
// layouts) before executing through the C API with a fixed array of
// arguments. An entry holds its plan weakly, so that a thread's exit
// destroys memory objects only, never a primitive; a plan is found by its
// control block (owner comparison), which the weak reference keeps from
// being reused by another plan.
struct BoundPlan {
  std::weak_ptr<const Plan> plan;
  memory x, w, out, pad;
};
constexpr std::size_t kBoundPlans = 16;  // per compute thread, replaced in turn

BoundPlan& bound_plan(const std::shared_ptr<const Plan>& plan) {
  // On the heap: thread_local storage in a dlopened library is a few
  // kilobytes for the whole process.
  thread_local std::vector<BoundPlan> bound(kBoundPlans);
  thread_local std::size_t next = 0;
  for (BoundPlan& b : bound) {
    if (!b.plan.owner_before(plan) && !plan.owner_before(b.plan)) return b;
  }
  BoundPlan& b = bound[next];
  next = (next + 1) % kBoundPlans;
  const dnnl::engine& eng = engine();
  b = BoundPlan{plan, memory(plan->x_desc, eng, nullptr), memory(plan->w_desc, eng, nullptr),
                memory(plan->out_desc, eng, nullptr), memory(plan->pad_desc, eng, nullptr)};
  return b;
}

// One block, single-threaded, on whichever compute thread runs it.
void run_block(Job& job, const Block& blk) {
  try {
    const OneOmpThread one;  // Note [One OpenMP thread, then the caller's again]
    thread_local dnnl::stream stream(engine());
    thread_local std::vector<std::byte> pad;
    thread_local std::vector<float> dense;
    const Plan& plan = *blk.plan;
    if (pad.size() < plan.pad_desc.get_size()) pad.resize(plan.pad_desc.get_size());
    const auto dense_size = static_cast<std::size_t>(blk.rows * blk.cols);
    if (plan.dense_out && dense.size() < dense_size) dense.resize(dense_size);
    float* dst = plan.dense_out ? dense.data() : blk.out;
    BoundPlan& b = bound_plan(blk.plan);
    b.x.set_data_handle(const_cast<float*>(blk.x));
    b.w.set_data_handle(const_cast<float*>(blk.w));
    b.out.set_data_handle(dst);
    b.pad.set_data_handle(pad.data());
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, b.x.get()},
                                    {DNNL_ARG_WEIGHTS, b.w.get()},
                                    {DNNL_ARG_DST, b.out.get()},
                                    {DNNL_ARG_SCRATCHPAD, b.pad.get()}};
    dnnl::error::wrap_c_api(dnnl_primitive_execute(plan.primitive.get(), stream.get(),
                                                   static_cast<int>(std::size(args)), args),
                            "matmul execute");
    stream.wait();
    if (plan.dense_out) {
      for (std::int64_t r = 0; r < blk.rows; ++r)
        std::copy_n(dst + r * blk.cols, blk.cols, blk.out + r * blk.ldo);
    }
  } catch (const dnnl::error& e) {
    const std::lock_guard lock(job.error_mutex);
    if (job.error.empty()) job.error = e.what();
    job.failed.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

std::uint64_t matmul_calls() { return g_matmul_calls.load(std::memory_order_relaxed); }

bool rows_in_any_order() {
  // oneDNN's ISA values are masks, each holding the bits of those it extends.
  static const bool avx512 = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & core) == core;
  }();
  return avx512;
}

bool matmul(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
            float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
            KernelContext& ctx, bool on_this_thread) {
  if (!enabled() || m <= 0 || n <= 0 || k <= 0) return false;
  // oneDNN sizes a primitive's work split by the caller's OpenMP team: one
  // (Note [One OpenMP thread, then the caller's again]).
  const OneOmpThread one;
  Job job;
  const std::int64_t row_blocks =
      std::clamp<std::int64_t>(m / kMatmulBlockRows, 1, kMatmulMaxBlocks);
  const std::int64_t col_blocks =
      row_blocks > 1
          ? 1
          : std::clamp<std::int64_t>(std::min(n / kMatmulBlockCols, m * n * k / kMatmulBlockWork),
                                     1, kMatmulMaxColBlocks);
  job.blocks = static_cast<int>(row_blocks * col_blocks);
  for (std::int64_t b = 0; b < row_blocks * col_blocks; ++b) {
    const std::int64_t rb = b / col_blocks, cb = b % col_blocks;
    const std::int64_t r0 = m * rb / row_blocks, r1 = m * (rb + 1) / row_blocks;
    const std::int64_t c0 = n * cb / col_blocks, c1 = n * (cb + 1) / col_blocks;
    Block& blk = job.block[b];
    blk.rows = r1 - r0;
    blk.cols = c1 - c0;
    blk.ldo = ldo;
    blk.plan = plan_for(Key{blk.rows, blk.cols, k, ldx, wn, wk, ldo});
    if (blk.plan == nullptr) return false;  // oneDNN declines it: our own kernel
    blk.x = x + r0 * ldx;
    blk.w = w + c0 * wn;
    blk.out = out + r0 * ldo + c0;
  }
  g_matmul_calls.fetch_add(1, std::memory_order_relaxed);
  if (on_this_thread) {
    for (int b = 0; b < job.blocks; ++b) run_block(job, job.block[b]);
  } else {
    ctx.parallel_run(
        job.blocks,
        [](void* arg, int b) {
          auto& j = *static_cast<Job*>(arg);
          run_block(j, j.block[b]);
        },
        &job);
  }
  if (job.failed.load(std::memory_order_relaxed)) ctx.fail("matmul: oneDNN failed: " + job.error);
  return true;
}

}  // namespace sinkgraph::kernels::cpu::onednn

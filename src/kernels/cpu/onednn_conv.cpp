// conv2d through oneDNN: Note [Convolutions through oneDNN] in onednn.h.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "onednn.h"
#include "onednn_internal.h"
#include "pointwise_math.h"

namespace sinkgraph::kernels::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

namespace {

using dnnl::memory;
using Dims = memory::dims;

std::atomic<bool> g_enabled{true};
std::atomic<std::uint64_t> g_calls{0};

// Everything a primitive and its reorders depend on. Compared bytewise: the
// struct is zeroed before it is filled, so padding compares equal.
struct Key {
  std::int64_t x_sizes[4], x_strides[4];
  std::int64_t w_sizes[4], w_strides[4];
  std::int64_t out_sizes[4], out_strides[4];
  std::int64_t scalars[7];  // stride, padding, dilation (h, w), groups

  bool operator==(const Key& other) const { return std::memcmp(this, &other, sizeof(Key)) == 0; }
};

// A prepared problem. Every primitive takes its scratchpad from the caller
// (scratchpad_mode::user): in oneDNN's default mode a primitive shares one
// library scratchpad and must run on the thread that created it, and ours
// run on any compute thread, several at once. Primitives are otherwise
// immutable; the memory objects are made per call.
struct Plan {
  dnnl::convolution_forward conv;
  memory::desc src_desc, weights_desc, dst_desc;          // what conv reads and writes
  memory::desc x_desc, w_desc, bias_desc, out_desc;       // the caller's tensors
  std::optional<dnnl::reorder> src_reorder, dst_reorder;  // absent: used in place
  dnnl::reorder weights_reorder;
  // Each primitive's scratchpad (empty when it needs none).
  memory::desc conv_pad, src_pad, dst_pad, weights_pad;
  std::size_t pad_bytes = 0;  // the largest of them
};

Dims dims4(const std::int64_t* v) { return {v[0], v[1], v[2], v[3]}; }

std::shared_ptr<const Plan> make_plan(const Key& k) {
  const std::int64_t groups = k.scalars[6];
  const Dims x_dims = dims4(k.x_sizes);
  const Dims out_dims = dims4(k.out_sizes);
  const memory::desc x_desc(x_dims, memory::data_type::f32, dims4(k.x_strides));
  const memory::desc out_desc(out_dims, memory::data_type::f32, dims4(k.out_strides));
  // The caller's weight [O, C/g, KH, KW]; with groups, oneDNN's [g, O/g, C/g, KH, KW].
  Dims w_dims = dims4(k.w_sizes);
  Dims w_strides = dims4(k.w_strides);
  if (groups > 1) {
    w_dims = {groups, k.w_sizes[0] / groups, k.w_sizes[1], k.w_sizes[2], k.w_sizes[3]};
    w_strides = {k.w_strides[0] * (k.w_sizes[0] / groups), k.w_strides[0], k.w_strides[1],
                 k.w_strides[2], k.w_strides[3]};
  }
  const memory::desc w_desc(w_dims, memory::data_type::f32, w_strides);
  const memory::desc bias_desc({k.out_sizes[1]}, memory::data_type::f32, memory::format_tag::a);

  const memory::desc src_any(x_dims, memory::data_type::f32, memory::format_tag::nhwc);
  const memory::desc dst_any(out_dims, memory::data_type::f32, memory::format_tag::nhwc);
  const memory::desc w_any(w_dims, memory::data_type::f32, memory::format_tag::any);
  const Dims strides = {k.scalars[0], k.scalars[1]};
  const Dims padding = {k.scalars[2], k.scalars[3]};
  const Dims dilation = {k.scalars[4] - 1, k.scalars[5] - 1};  // oneDNN counts the gaps
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any, w_any,
      bias_desc, dst_any, strides, dilation, padding, padding);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());

  auto plan = std::make_shared<Plan>();
  plan->conv = dnnl::convolution_forward(pd);
  plan->conv_pad = pd.scratchpad_desc();
  plan->src_desc = pd.src_desc();
  plan->weights_desc = pd.weights_desc();
  plan->dst_desc = pd.dst_desc();
  plan->x_desc = x_desc;
  plan->w_desc = w_desc;
  plan->bias_desc = bias_desc;
  plan->out_desc = out_desc;
  const auto reorder = [&](const memory::desc& from, const memory::desc& to, memory::desc& pad) {
    const dnnl::reorder::primitive_desc rpd(engine(), from, engine(), to, attr);
    pad = rpd.scratchpad_desc();
    return dnnl::reorder(rpd);
  };
  if (x_desc != plan->src_desc) plan->src_reorder = reorder(x_desc, plan->src_desc, plan->src_pad);
  if (out_desc != plan->dst_desc)
    plan->dst_reorder = reorder(plan->dst_desc, out_desc, plan->dst_pad);
  plan->weights_reorder = reorder(w_desc, plan->weights_desc, plan->weights_pad);
  for (const memory::desc* d :
       {&plan->conv_pad, &plan->src_pad, &plan->dst_pad, &plan->weights_pad})
    plan->pad_bytes = std::max(plan->pad_bytes, d->get_size());
  return plan;
}

std::shared_ptr<const Plan> plan_for(const Key& key) { return cached_plan(key, make_plan); }

// The activation epilogue over a dense buffer (layout does not matter: it is
// elementwise and the bias is already in).
template <int Act>
void activate(float* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = pointwise::unary(Act, p[i]);
}

using ActivateFn = void (*)(float*, std::int64_t);

ActivateFn activation(std::int64_t act) {
  static_assert(fused::kNumUnary == 14, "a new unary function needs its epilogue here");
  static constexpr ActivateFn kTable[] = {
      activate<fused::kNeg>,     activate<fused::kExp>,       activate<fused::kSqrt>,
      activate<fused::kRsqrt>,   activate<fused::kErf>,       activate<fused::kRelu>,
      activate<fused::kSilu>,    activate<fused::kGelu>,      activate<fused::kTanh>,
      activate<fused::kSigmoid>, activate<fused::kHardswish>, activate<fused::kHardsigmoid>,
      activate<fused::kCos>,     activate<fused::kSin>,
  };
  return act < 0 ? nullptr : kTable[act];
}

// Scratch for reordered tensors, per calling thread, grown and kept.
float* scratch(std::vector<float>& v, const memory::desc& d) {
  const std::size_t n = (d.get_size() + sizeof(float) - 1) / sizeof(float);
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Where oneDNN is the faster path, per bench_conv's table (docs/performance.md,
// "Convolutions through oneDNN"), with its per-call weight reorder counted:
// - not below kMinMacs multiply-adds (its fixed cost of 10-15 us loses there);
// - not a 1x1 kernel (our path is then one plain GEMM, no im2col, and needs
//   no reorder: 0.4-0.9x for oneDNN);
// - not fewer than kMinPositions output positions per weight (a 3x3 layer of
//   512 channels at 4x4, resnet18's layer4 at 112x112: reordering 9 MB of
//   weight per call for 16 positions makes it 0.6x on one thread).
// Depthwise layers take the same rules and win 2-10x.
constexpr std::int64_t kMinPositions = 32;

bool wins(const TensorArg& w, const TensorArg& out) {
  const std::int64_t positions = out.sizes[0] * out.sizes[2] * out.sizes[3];
  const double macs =
      static_cast<double>(out.numel()) * static_cast<double>(w.sizes[1] * w.sizes[2] * w.sizes[3]);
  if (macs < kMinMacs) return false;
  if (w.sizes[2] == 1 && w.sizes[3] == 1) return false;
  return positions >= kMinPositions;
}

// Work is cut into blocks of output channels (whole groups for a grouped
// convolution), at least kBlockChannels each and at most kMaxBlocks in all.
// The cut depends on the shape only, never on the thread count, so a result
// is the same on any number of threads (Note [Splitting a kernel's work]).
constexpr std::int64_t kBlockChannels = 32;
constexpr std::int64_t kMaxBlocks = 8;

struct Block {
  TensorArg x{}, w{}, b{}, out{};  // this block's slices
  std::shared_ptr<const Plan> plan;
};

struct Job {
  std::int64_t groups = 1;
  ActivateFn act = nullptr;
  int blocks = 0;
  Block block[kMaxBlocks];
  std::optional<memory> shared_src;  // a dense convolution's input, in NHWC
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
};

Key key_of(const Block& blk, const ArgBlock& args, std::int64_t groups) {
  Key key{};
  std::memset(&key, 0, sizeof(key));
  for (int i = 0; i < 4; ++i) {
    key.x_sizes[i] = blk.x.sizes[i];
    key.x_strides[i] = blk.x.strides[i];
    key.w_sizes[i] = blk.w.sizes[i];
    key.w_strides[i] = blk.w.strides[i];
    key.out_sizes[i] = blk.out.sizes[i];
    key.out_strides[i] = blk.out.strides[i];
  }
  for (int i = 0; i < 6; ++i) key.scalars[i] = args.scalars[i].i;
  key.scalars[6] = groups;
  return key;
}

// Runs a reorder with its scratchpad in `pad` (this thread's buffer).
void run_reorder(const dnnl::reorder& r, dnnl::stream& stream, const memory& from, const memory& to,
                 const memory::desc& pad_desc, void* pad) {
  r.execute(stream, {{DNNL_ARG_FROM, from},
                     {DNNL_ARG_TO, to},
                     {DNNL_ARG_SCRATCHPAD, memory(pad_desc, engine(), pad)}});
}

// This thread's scratchpad for `plan`'s primitives (they run one at a time).
void* pad_for(const Plan& plan) {
  thread_local std::vector<std::byte> pad;
  if (pad.size() < plan.pad_bytes) pad.resize(plan.pad_bytes);
  return pad.data();
}

// One block, single-threaded, on whichever compute thread runs it.
bool run_block(Job& job, const Block& blk) {
  try {
    const OneOmpThread one;  // Note [One OpenMP thread, then the caller's again]
    const Plan& plan = *blk.plan;
    thread_local std::vector<float> src_buf, w_buf, dst_buf, bias_buf;
    thread_local dnnl::stream stream(engine());
    const dnnl::engine& eng = engine();
    // Bias: oneDNN reads a dense vector.
    const float* bias = blk.b.ptr<float>();
    if (blk.b.strides[0] != 1 && blk.b.sizes[0] > 1) {
      bias_buf.resize(static_cast<std::size_t>(blk.b.sizes[0]));
      for (std::int64_t i = 0; i < blk.b.sizes[0]; ++i) bias_buf[i] = bias[i * blk.b.strides[0]];
      bias = bias_buf.data();
    }
    void* pad = pad_for(plan);
    memory src_mem;
    if (job.shared_src) {
      src_mem = *job.shared_src;
    } else {
      memory x_mem(plan.x_desc, eng, blk.x.ptr<float>());
      src_mem = x_mem;
      if (plan.src_reorder) {
        src_mem = memory(plan.src_desc, eng, scratch(src_buf, plan.src_desc));
        run_reorder(*plan.src_reorder, stream, x_mem, src_mem, plan.src_pad, pad);
      }
    }
    memory w_user(plan.w_desc, eng, blk.w.ptr<float>());
    memory w_mem(plan.weights_desc, eng, scratch(w_buf, plan.weights_desc));
    run_reorder(plan.weights_reorder, stream, w_user, w_mem, plan.weights_pad, pad);
    memory bias_mem(plan.bias_desc, eng, const_cast<float*>(bias));
    memory out_mem(plan.out_desc, eng, blk.out.ptr<float>());
    memory dst_mem =
        plan.dst_reorder ? memory(plan.dst_desc, eng, scratch(dst_buf, plan.dst_desc)) : out_mem;
    plan.conv.execute(stream, {{DNNL_ARG_SRC, src_mem},
                               {DNNL_ARG_WEIGHTS, w_mem},
                               {DNNL_ARG_BIAS, bias_mem},
                               {DNNL_ARG_DST, dst_mem},
                               {DNNL_ARG_SCRATCHPAD, memory(plan.conv_pad, eng, pad)}});
    // dst is dense (NHWC scratch, or an output slice that is itself dense NHWC).
    if (job.act != nullptr)
      job.act(static_cast<float*>(dst_mem.get_data_handle()), blk.out.numel());
    if (plan.dst_reorder)
      run_reorder(*plan.dst_reorder, stream, dst_mem, out_mem, plan.dst_pad, pad);
    stream.wait();
    return true;
  } catch (const dnnl::error& e) {
    const std::lock_guard lock(job.error_mutex);
    if (job.error.empty()) job.error = e.what();
    return false;
  }
}

}  // namespace

bool built() { return true; }

void set_enabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
std::uint64_t calls() { return g_calls.load(std::memory_order_relaxed); }

bool conv2d(const ArgBlock& args, KernelContext& ctx) {
  if (!enabled()) return false;
  const TensorArg& xt = args.tensors[0];
  const TensorArg& wt = args.tensors[1];
  const TensorArg& bt = args.tensors[2];
  const TensorArg& out = args.tensors[3];
  if (xt.dtype != DType::f32 || wt.dtype != DType::f32 || bt.dtype != DType::f32 ||
      out.dtype != DType::f32)
    return false;
  if (xt.numel() == 0 || out.numel() == 0 || wt.numel() == 0) return false;
  if (!wins(wt, out)) return false;

  // oneDNN runs single-threaded inside each block; the blocks are ours to
  // spread (Note [Convolutions through oneDNN]). Set before a plan is made:
  // oneDNN sizes a primitive's work split by the caller's OpenMP team
  // (Note [One OpenMP thread, then the caller's again]).
  const OneOmpThread one;
  Job job;
  job.groups = args.scalars[6].i;
  job.act = activation(args.scalars[7].i);
  const std::int64_t og = wt.sizes[0] / job.groups;  // output channels per group
  // Dense: blocks of output channels over the whole input. Grouped: blocks of
  // whole groups, each with its own slice of the input.
  const std::int64_t units = job.groups == 1 ? wt.sizes[0] : job.groups;
  const std::int64_t unit_channels = job.groups == 1 ? 1 : og;
  std::int64_t per_block = std::max<std::int64_t>(
      (kBlockChannels + unit_channels - 1) / unit_channels, (units + kMaxBlocks - 1) / kMaxBlocks);
  job.blocks = static_cast<int>((units + per_block - 1) / per_block);
  for (int b = 0; b < job.blocks; ++b) {
    Block& blk = job.block[b];
    const std::int64_t u0 = b * per_block;
    const std::int64_t u1 = std::min(units, u0 + per_block);
    const std::int64_t o0 = u0 * unit_channels;
    const std::int64_t o1 = u1 * unit_channels;
    blk.x = xt;
    if (job.groups > 1) {
      const std::int64_t cg = wt.sizes[1];
      blk.x.offset += u0 * cg * xt.strides[1];
      blk.x.sizes[1] = (u1 - u0) * cg;
    }
    blk.w = wt;
    blk.w.offset += o0 * wt.strides[0];
    blk.w.sizes[0] = o1 - o0;
    blk.b = bt;
    blk.b.offset += o0 * bt.strides[0];
    blk.b.sizes[0] = o1 - o0;
    blk.out = out;
    blk.out.offset += o0 * out.strides[1];
    blk.out.sizes[1] = o1 - o0;
    blk.plan = plan_for(key_of(blk, args, job.groups == 1 ? 1 : u1 - u0));
    if (blk.plan == nullptr) return false;  // oneDNN declines it: our own path
  }

  g_calls.fetch_add(1, std::memory_order_relaxed);
  // A dense convolution's blocks share one input: brought into NHWC once.
  thread_local std::vector<float> shared_src;
  const Plan& first = *job.block[0].plan;
  try {
    if (job.groups == 1 && first.src_reorder) {
      thread_local dnnl::stream stream(engine());
      memory x_mem(first.x_desc, engine(), xt.ptr<float>());
      job.shared_src = memory(first.src_desc, engine(), scratch(shared_src, first.src_desc));
      run_reorder(*first.src_reorder, stream, x_mem, *job.shared_src, first.src_pad,
                  pad_for(first));
      stream.wait();
    }
  } catch (const dnnl::error& e) {
    ctx.fail(std::string("conv2d: oneDNN failed: ") + e.what());
    return true;
  }
  ctx.parallel_run(
      job.blocks,
      [](void* arg, int b) {
        auto& j = *static_cast<Job*>(arg);
        if (!run_block(j, j.block[b])) j.failed.store(true, std::memory_order_relaxed);
      },
      &job);
  if (job.failed.load(std::memory_order_relaxed)) ctx.fail("conv2d: oneDNN failed: " + job.error);
  return true;
}

}  // namespace sinkgraph::kernels::cpu::onednn

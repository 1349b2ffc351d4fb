#pragma once
// Note [Convolutions through oneDNN]
// conv2d runs through oneDNN (Debian's libdnnl) where it is faster than our
// own paths (conv.cpp), and falls back to them everywhere else. Measured per
// shape on resnet18's and mobilenet's layers (bench/conv.cpp, figures in
// docs/performance.md): oneDNN's direct AVX-512 kernels over a channels-last
// activation and a blocked weight beat im2col + serial OpenBLAS 1.5-2x on one
// thread and 2-4x on two, reorders included, for every dense (groups == 1)
// convolution we measured (im2col's product has since moved to oneDNN's
// matmul, conv.cpp; forcing every layer of resnet18 onto that path measured
// no faster); what is left to our kernels is what it does not
// win or does not take: tiny products (below kMinMacs multiply-adds, where its
// per-call reorders cost more than the arithmetic), zero-size tensors, and
// anything that is not f32.
//
// How a call runs:
// - One primitive per problem (sizes, strides, conv parameters, threads),
//   created on first use (an eager warm-up or the capture) and kept in a
//   process-wide cache, with the reorders that bring the activation into
//   NHWC, the weight into the primitive's blocked layout and the result back
//   into the output's strides. A replay finds it by key; it never creates one.
// - The weight is reordered on every call, not once: a kernel sees an
//   address, not whether the tensor behind it was written since (a parameter
//   updated in place must be seen by the next replay). The reorder costs
//   2-470 us per layer against 200-800 us saved (docs/performance.md).
// - A channels-last input (or output) is used in place; any other strides go
//   through a reorder into scratch.
// - The bias goes in as oneDNN's bias; the activation epilogue is applied by
//   us (pointwise::unary) on the result before it leaves the scratch, so
//   conv2d(act) stays bitwise activation(conv2d) on this path as on the others.
// - Threads are ours. Debian builds oneDNN over OpenMP, whose idle workers
//   spin after each parallel region: measured on resnet18, the OpenMP team
//   of two took a quarter of all samples spinning, against our own compute
//   thread running the next kernel, on two cores. So oneDNN runs with a team
//   of one (no OpenMP worker is ever started), and the convolution is cut
//   into blocks of output channels (whole groups when grouped) that our
//   compute threads run (parallel_run), each block a primitive of its own.
//   The cut depends on the shape only (kBlockChannels, kMaxBlocks in
//   onednn_conv.cpp), so the result does not depend on the thread count.
// SINKGRAPH_ONEDNN=OFF (CMake) builds no_onednn.cpp instead, and conv2d keeps
// its own paths; so does set_use_onednn(false) at run time.
#include <cstdint>

#include "sinkgraph/kernel_abi.h"

namespace sinkgraph::kernels::cpu::onednn {

// Below this many multiply-adds our own path wins (measured, bench/conv.cpp).
inline constexpr double kMinMacs = 2.0e5;

// Runs conv2d (conv.cpp's argument block) through oneDNN and returns true, or
// returns false without touching the output when this build, the run-time
// switch or the problem says our own path runs it.
bool conv2d(const ArgBlock& args, KernelContext& ctx);

// Note [Matrix products through oneDNN]
// A product of more than kMaxKernelRows rows (a prefill, an encoder or a
// vision transformer over its tokens, attention's batched products), and a
// matmul(x, w^T) of more than 8 (Note [A linear's rows and a matmul's] in
// linalg.cpp), runs oneDNN's matmul where this build has it: out[M, N] =
// x[M, K] @ W with W's element (n, k) at w[n * wn + k * wk], which takes a
// linear's row-major w[N, K] (wn = ldw, wk = 1) and a matmul's row-major
// b[K, N] (wn = 1, wk = ldb) in place: no reorder of the weight, and so
// nothing to redo when a parameter is written between calls. Measured
// (bench/torch_models.py and a one-thread microbenchmark, docs/performance.md
// "Matrix products through oneDNN"): its AVX-512 brgemm kernels ran these
// products at 80-110 GFLOP/s against 35-42 for our register-blocked tiles
// (Note [Products of many rows]), from 1.1 us for the smallest upward: no
// shape we measured past kMaxKernelRows was faster on the tiles, so there is
// no size rule. Up to kMaxKernelRows rows (decode, batched decode) linear
// keeps our row kernel and its contract (each row bitwise the row alone,
// Note [Rows of a linear]).
// As for convolutions: one primitive per problem in a process-wide cache,
// user scratchpads, an OpenMP team of one, and the product cut into blocks
// by the shape alone (of rows, or of columns when the rows are few:
// onednn_matmul.cpp) that our compute threads run, so the result does not
// depend on the thread count.
// Where oneDNN runs AVX-512 kernels, they compute each output over K in an
// order fixed by the primitive, the same for every row: a row's result among
// other rows does not depend on their order, though it can differ by
// rounding from the same row in a product of another number of rows. Its
// AVX2 kernels do not keep that: the rows of an M block's tail, and of
// block boundaries, sum in another order (measured on an AVX2 EPYC with
// oneDNN 2.7: of a 33-row linear, rows 0-2 and 30-32 changed by rounding
// when the rows were reversed), so there linear's products, which promise
// it (Note [Products of many rows] in linalg.cpp; ops_threads tests it),
// keep the tiles: rows_in_any_order() says which.
// `on_this_thread`: the blocks run in turn on the calling thread (a kernel
// that already split its work across the compute threads, as sdpa does by
// heads), the same blocks and so the same bits.
bool matmul(const float* w, std::int64_t wn, std::int64_t wk, const float* x, std::int64_t ldx,
            float* out, std::int64_t ldo, std::int64_t m, std::int64_t n, std::int64_t k,
            KernelContext& ctx, bool on_this_thread = false);
// Whether matmul gives a row the same bits wherever it stands among the
// rows (its kernels are AVX-512's; see above). False without oneDNN.
bool rows_in_any_order();
// matmul calls that ran here (ops::onednn_matmul_calls).
std::uint64_t matmul_calls();

// Whether this build has oneDNN at all.
bool built();
// The run-time switch behind ops::set_use_onednn (on by default).
void set_enabled(bool enabled);
bool enabled();
// conv2d calls that ran here (ops::onednn_conv_calls).
std::uint64_t calls();

}  // namespace sinkgraph::kernels::cpu::onednn

#pragma once
// The functional operator API. Every function validates its arguments
// (sinkgraph::Error naming the operator, the argument and the shapes), infers
// the output, allocates it from the device allocator and launches the kernel
// on the current stream, returning at once. Kernels compute in f32; f16 and
// bf16 inputs are converted on load and outputs rounded to nearest even.
#include <cstdint>
#include <vector>

#include "sinkgraph/export.h"
#include "sinkgraph/symint.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::ops {

// Elementwise with numpy broadcasting; both inputs of one dtype.
SG_API Tensor add(const Tensor& a, const Tensor& b);
SG_API Tensor sub(const Tensor& a, const Tensor& b);
SG_API Tensor mul(const Tensor& a, const Tensor& b);
SG_API Tensor div(const Tensor& a, const Tensor& b);
SG_API Tensor add_scalar(const Tensor& x, double value);
SG_API Tensor mul_scalar(const Tensor& x, double value);
SG_API Tensor neg(const Tensor& x);
SG_API Tensor exp(const Tensor& x);
SG_API Tensor sqrt(const Tensor& x);
SG_API Tensor rsqrt(const Tensor& x);
SG_API Tensor erf(const Tensor& x);
SG_API Tensor relu(const Tensor& x);
SG_API Tensor silu(const Tensor& x);
SG_API Tensor gelu(const Tensor& x);  // exact: x * Phi(x), with erf
SG_API Tensor tanh(const Tensor& x);
SG_API Tensor sigmoid(const Tensor& x);
SG_API Tensor hardswish(const Tensor& x);    // x * relu6(x + 3) / 6, as torch
SG_API Tensor hardsigmoid(const Tensor& x);  // relu6(x + 3) / 6, as torch
SG_API Tensor cos(const Tensor& x);
SG_API Tensor sin(const Tensor& x);
// cond ? a : b elementwise, as torch.where: cond bool, a and b of one dtype
// (any), the three broadcast together.
SG_API Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// a <op> b elementwise, as torch.eq, ne, lt, le, gt and ge: a and b of one
// dtype (not u8), broadcast together; a bool tensor. Halves compare as their
// f32 values; a NaN compares unequal to everything, itself included (IEEE).
enum class Comparison : std::int64_t { eq, ne, lt, le, gt, ge };
SG_API Tensor compare(const Tensor& a, const Tensor& b, Comparison op);

// a[..., M, K] @ b[K, N] or batched a[B..., M, K] @ b[B..., K, N].
SG_API Tensor matmul(const Tensor& a, const Tensor& b);
// x[..., K] @ w[N, K]^T : weights stored output-major as in llama2.c.
SG_API Tensor linear(const Tensor& x, const Tensor& w);

// Note [Quantized weights]
// A weight in one of ggml's block formats is a u8 tensor [N, K / 32 * B]:
// row n holds row n of the [N, K] matrix as K / 32 blocks of B bytes, each
// one f16 scale d and 32 values (Q8_0, B = 34: int8 q, value d * q; Q4_0,
// B = 18: 16 bytes of nibbles, the low nibble of byte j value j and the high
// nibble value j + 16, value d * (nibble - 8); src/models/gguf.h). linear_q
// and embedding_q read the blocks where they lie: no f32 copy of the matrix
// is made, so a step reads 34 / 128 (Q8_0) or 18 / 128 (Q4_0) of an f32
// weight's bytes. Each row of x is quantized per block of 32 to 8-bit
// integers with an f32 scale, as llama.cpp does, and a weight block times an
// activation block is an exact integer sum, scaled into f32 sums (Note
// [Activations quantized per block] in src/kernels/cpu/quant.h): linear_q(x,
// w) is x @ dequantize(w)^T within sum over blocks of (max |x| / 127) / 2 *
// sum |w| of it, and NaN where x holds an inf or a NaN. Each row of x has its
// own sums, in the same order whatever the rows around it, the block of rows
// or the thread count: a row's result is bitwise the same in any batch.
enum class QuantFormat : std::int64_t { q8_0 = 0, q4_0 = 1 };
inline constexpr std::int64_t kQuantBlockValues = 32;
// Bytes per block: 34 (q8_0), 18 (q4_0).
SG_API std::int64_t quant_block_bytes(QuantFormat format);
SG_API const char* quant_format_name(QuantFormat format);  // "q8_0", "q4_0"
// x[..., K] (f32) @ dequantize(w)^T for w a u8 [N, K / 32 * B] in `format`: [..., N].
SG_API Tensor linear_q(const Tensor& x, const Tensor& w, QuantFormat format);
// Rows of the quantized table w (u8 [V, D / 32 * B]) picked by ids[...],
// dequantized: f32 [..., D]; an id out of range is a sticky kernel error.
SG_API Tensor embedding_q(const Tensor& w, const Tensor& ids, QuantFormat format);

// Softmax over the last dimension.
SG_API Tensor softmax(const Tensor& x);
// x * rsqrt(mean(x^2) + eps) * weight, over the last dimension.
SG_API Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
SG_API Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

enum class RopeStyle : std::int64_t { interleaved = 0, half = 1 };
// Rotary embedding of x[T, H, D] for positions pos0 .. pos0+T-1 (pos0 updatable).
// interleaved rotates pairs (2i, 2i+1) as llama2.c; half rotates (i, i+D/2).
SG_API Tensor rope(const Tensor& x, const SymInt& pos0, double theta = 10000.0,
                   RopeStyle style = RopeStyle::interleaved);

// Batched decoding (one row per sequence, each at its own position): rope of
// x[B, H, D], row b rotated for position pos[b] (pos an i64 tensor [B], read
// by the kernel, so positions never change a graph key).
SG_API Tensor rope_rows(const Tensor& x, const Tensor& pos, double theta = 10000.0,
                        RopeStyle style = RopeStyle::interleaved);

// Rows of weight[V, D] picked by ids[...] (i32 or i64); an id out of range is
// a sticky kernel error (only the device sees the ids).
SG_API Tensor embedding(const Tensor& weight, const Tensor& ids);

// Views: share storage, launch nothing.
SG_API Tensor slice(const Tensor& x, std::int64_t dim, const SymInt& start, const SymInt& end,
                    std::int64_t step = 1);
SG_API Tensor narrow(const Tensor& x, std::int64_t dim, const SymInt& start, const SymInt& length);
SG_API Tensor view(const Tensor& x, const SymShape& shape);  // one dim may be -1
SG_API Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
SG_API Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
// torch.expand: sizes align with x's trailing dims; -1 keeps a size; size-1
// dims and new leading dims broadcast with stride 0 (read-only: never write
// through the result).
SG_API Tensor expand(const Tensor& x, const SymShape& shape);
// Views that drop a size-1 dimension or insert one, for x of any layout.
SG_API Tensor squeeze(const Tensor& x, std::int64_t dim);
SG_API Tensor unsqueeze(const Tensor& x, std::int64_t dim);
// A view when the layout allows it, else a contiguous copy (PyTorch semantics).
SG_API Tensor reshape(const Tensor& x, const SymShape& shape);
SG_API Tensor contiguous(const Tensor& x);
SG_API Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);

// In place: writes into dst and returns it. copy_ broadcasts src and converts dtype.
SG_API Tensor copy_(const Tensor& dst, const Tensor& src);
// Writes src[n, ...] into dst[index .. index+n-1, ...] along dim 0; index is
// updatable (a KV-cache position); out of range is a sticky kernel error.
SG_API Tensor index_copy_(const Tensor& dst, const SymInt& index, const Tensor& src);
SG_API Tensor fill_(const Tensor& dst, double value);
// Batched decoding: dst[b, index[b], ...] = src[b, ...] for every row b of
// dst[B, S, ...] and src[B, ...] (index an i64 tensor [B]); an index outside
// [0, S) is a sticky kernel error.
SG_API Tensor index_copy_rows_(const Tensor& dst, const Tensor& index, const Tensor& src);

// Collectives over process group `group` (Note [Collectives] in
// sinkgraph/collectives.h; sinkgraph::dist::Communicator names its group and
// installs the backend). x: contiguous f32. all_reduce: the elementwise sum
// of every rank's x. all_gather: every rank's x concatenated along
// dimension 0 in rank order (the output's dimension 0 is `size` times x's);
// `size` must be the group's size.
SG_API Tensor all_reduce(const Tensor& x, std::int64_t group);
SG_API Tensor all_gather(const Tensor& x, std::int64_t group, std::int64_t size);

// Scaled dot-product attention over a KV cache. q[T, Hq, D]; k, v[S, Hkv, D]
// with Hq a multiple of Hkv (grouped-query: query head h reads kv head
// h / (Hq / Hkv)). The first seq_len cached positions are visible (seq_len
// updatable); causal: query t sees positions j <= seq_len - T + t.
// Returns [T, Hq, D]. scale defaults to 1/sqrt(D) when <= 0.
SG_API Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const SymInt& seq_len,
                        double scale = 0.0);

// Batched decoding: attention of q[B, Hq, D], one query row per sequence,
// over its own cache k, v [B, S, Hkv, D], row b seeing positions 0 ..
// pos[b] (pos an i64 tensor [B]; a position outside [0, S) is a sticky
// kernel error). f32. Each row is computed as attention() computes a
// one-row query over that row's cache with seq_len = pos[b] + 1, whatever B
// is. Returns [B, Hq, D]; scale defaults to 1/sqrt(D) when <= 0.
SG_API Tensor attention_rows(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos,
                             double scale = 0.0);

// Multi-head attention without a mask (an encoder's self or cross
// attention): q[B, L, E], k and v [B, S, E], `heads` heads of E / heads
// columns each; every query sees every key. Returns [B, L, E]:
// softmax(q_h k_h^T * scale) v_h per head. Rows may be strided (slices of
// one fused q/k/v projection).
// Heads-first form (torch's layout): q[B, H, L, D], k and v [B, Hkv, S, D]
// with Hkv dividing H = `heads` (grouped-query attention: query head h reads
// kv head h / (H / Hkv)), any strides, so a permuted view or a KV cache is
// read in place. Returns [B, L, H * D], as the embedding form. Every sdpa
// operator below takes both forms.
SG_API Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads,
                   double scale);
// sdpa with an additive mask, as torch's scaled_dot_product_attention takes a
// float attn_mask: mask[B or 1, heads or 1, L or 1, S] of q's dtype is added
// to the scaled scores before the softmax (-inf hides a key). A query row
// whose keys are all -inf gives zeros, as torch's CPU kernel does.
SG_API Tensor sdpa_mask(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        std::int64_t heads, double scale);
// Causal sdpa, as scaled_dot_product_attention(is_causal=True): query i
// sees keys 0..i (torch's tril mask, aligned to the top left when L != S).
SG_API Tensor sdpa_causal(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t heads,
                          double scale);

// Index of the maximum over the last dimension (first on ties), as i64; a
// NaN counts as the maximum (the first NaN's index), as in torch.argmax.
SG_API Tensor argmax(const Tensor& x);
// A draw from softmax(logits / temperature) over the last dimension, as i64.
// The randomness is a pure function of (seed, offset, row) (Note
// [Counter-based sampling]): equal arguments give equal ids, and `offset`
// (updatable: a captured graph patches it per replay) is what a decode loop
// advances, e.g. the position being sampled. temperature must be > 0.
SG_API Tensor sample(const Tensor& logits, double temperature, std::int64_t seed,
                     const SymInt& offset);
// How many values of each row (the last dimension) of floating x are NaN or
// infinite, as i64: a decode loop launches it after each step and reads it
// with the token, so non-finite logits are an error, not a silent id
// (Note [Non-finite logits] in tools/generate.cpp).
SG_API Tensor count_nonfinite(const Tensor& x);

// torch.mean(x, dims, keepdim) over floating x: negative dims count from the
// end, a repeated dim is an error, an empty list reduces every dim.
SG_API Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);

// Vision operators (NCHW), as PyTorch's.
// conv2d: x[N, C, H, W], w[O, C/groups, KH, KW], b[O] -> [N, O, Ho, Wo] with
// Ho = floor((H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h) + 1 (Wo alike); f32.
// `activation` is applied after the bias: -1 for none, else a unary function
// index (src/kernels/fused_program.h, fused::UnaryFn: neg 0, exp 1, sqrt 2,
// rsqrt 3, erf 4, relu 5, silu 6, gelu 7, tanh 8, sigmoid 9, hardswish 10,
// hardsigmoid 11, cos 12, sin 13), bitwise that operator applied to the plain
// conv2d. Set by max-autotune's fuse_conv_activation pass.
SG_API Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::int64_t stride_h = 1,
                     std::int64_t stride_w = 1, std::int64_t pad_h = 0, std::int64_t pad_w = 0,
                     std::int64_t dil_h = 1, std::int64_t dil_w = 1, std::int64_t groups = 1,
                     std::int64_t activation = -1);
// Whether conv2d and products past 32 rows may run through oneDNN where it is
// faster than sinkgraph's own kernels (Note [Convolutions through oneDNN] and
// Note [Matrix products through oneDNN], src/kernels/cpu/onednn.h).
// On by default in a build with oneDNN (CMake SINKGRAPH_ONEDNN, on unless
// turned off); false keeps every convolution and product on sinkgraph's own
// kernels, for comparison. Takes effect from the next kernel that runs,
// captured ones too.
// onednn_built() says whether this build has it.
SG_API void set_use_onednn(bool use);
SG_API bool use_onednn();
SG_API bool onednn_built();
// Whether linear's products past 32 rows take oneDNN: only where its kernels
// keep each row's bits wherever the row stands among the others (AVX-512;
// linear's promise, Note [Matrix products through oneDNN]).
SG_API bool onednn_linear_products();
// conv2d calls, and matrix products (linear and matmul past 32 rows, Note
// [Matrix products through oneDNN]), that ran through oneDNN in this process
// (for tests and benchmarks: which path a shape takes).
SG_API std::uint64_t onednn_conv_calls();
SG_API std::uint64_t onednn_matmul_calls();
// Inference batch norm over dim 1 of x[N, C, ...]: x * alpha + beta with
// alpha = weight / sqrt(var + eps), beta = bias - mean * alpha (PyTorch's form).
SG_API Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var,
                         const Tensor& weight, const Tensor& bias, double eps);
// x[N, C, H, W] or [C, H, W]; padding never wins (-inf); PyTorch's output
// size, ceil_mode included; padding at most half the kernel.
SG_API Tensor max_pool2d(const Tensor& x, std::int64_t kh, std::int64_t kw, std::int64_t sh,
                         std::int64_t sw, std::int64_t ph = 0, std::int64_t pw = 0,
                         std::int64_t dh = 1, std::int64_t dw = 1, bool ceil_mode = false);

SG_API Tensor full(const SymShape& shape, double value, DType dtype = DType::f32);
SG_API Tensor zeros(const SymShape& shape, DType dtype = DType::f32);
SG_API Tensor arange(const SymInt& n, DType dtype = DType::i64);

// Fused operators (made by max-autotune's fusion passes; docs/architecture.md).
// mul(silu(a), b) in one kernel, with broadcasting.
SG_API Tensor silu_mul(const Tensor& a, const Tensor& b);
// Residual add and rms_norm in one kernel: x and r of one floating dtype and
// the same shape [..., N] (no broadcasting), weight [N]. Returns [2, ...]:
// [0] = x + r (rounded to the dtype), [1] = rms_norm([0], weight, eps) computed
// from the stored sum, so both equal add() then rms_norm() bitwise.
SG_API Tensor add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& weight, double eps);
// A tree of elementwise operators over 1 to 5 same-dtype floating inputs
// (broadcast), as a postfix program of at most 18 instructions (opcode*8+arg each) and up to 5
// constants (Note [Fused elementwise programs] in src/kernels/fused_program.h).
SG_API Tensor fused_elementwise(const std::vector<Tensor>& inputs,
                                const std::vector<std::int64_t>& code,
                                const std::vector<double>& consts = {});

}  // namespace sinkgraph::ops

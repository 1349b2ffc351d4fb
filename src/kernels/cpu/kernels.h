#pragma once
// CPU kernels. Each is a KernelFn over the POD ArgBlock (Note [Kernel ABI]).
// Argument layout: tensors are the inputs in schema order followed by the
// output (in-place kernels: the mutated tensor first, no separate output);
// scalars are the non-tensor arguments in schema order.
#include "sinkgraph/kernel_abi.h"

namespace sinkgraph::kernels::cpu {

// Elementwise: tensors (a, b, out) or (x, out); scalars as noted.
void add(const ArgBlock& args, KernelContext& ctx);
void sub(const ArgBlock& args, KernelContext& ctx);
void mul(const ArgBlock& args, KernelContext& ctx);
void div(const ArgBlock& args, KernelContext& ctx);
void add_scalar(const ArgBlock& args, KernelContext& ctx);  // scalars (value: f)
void mul_scalar(const ArgBlock& args, KernelContext& ctx);  // scalars (value: f)
void neg(const ArgBlock& args, KernelContext& ctx);
void exp(const ArgBlock& args, KernelContext& ctx);
void sqrt(const ArgBlock& args, KernelContext& ctx);
void rsqrt(const ArgBlock& args, KernelContext& ctx);
void erf(const ArgBlock& args, KernelContext& ctx);
void relu(const ArgBlock& args, KernelContext& ctx);
void silu(const ArgBlock& args, KernelContext& ctx);
void gelu(const ArgBlock& args, KernelContext& ctx);
void tanh(const ArgBlock& args, KernelContext& ctx);
void sigmoid(const ArgBlock& args, KernelContext& ctx);
void hardswish(const ArgBlock& args, KernelContext& ctx);
void hardsigmoid(const ArgBlock& args, KernelContext& ctx);
void cos(const ArgBlock& args, KernelContext& ctx);
void sin(const ArgBlock& args, KernelContext& ctx);
void where(const ArgBlock& args, KernelContext& ctx);
void compare(const ArgBlock& args, KernelContext& ctx);

// Copies and fills: copy (dst, src) broadcasts src and converts dtype.
void copy(const ArgBlock& args, KernelContext& ctx);
void contiguous(const ArgBlock& args, KernelContext& ctx);  // tensors (x, out)
void fill(const ArgBlock& args, KernelContext& ctx);        // tensors (dst); scalars (value: f)
void arange(const ArgBlock& args, KernelContext& ctx);      // tensors (out); scalars (n: i)
void index_copy(const ArgBlock& args,
                KernelContext& ctx);  // tensors (dst, src); scalars (index: i)
void index_copy_rows(const ArgBlock& args, KernelContext& ctx);  // (dst, index, src, out)

// Linear algebra through OpenBLAS: tensors (a, b, out); linear is (x, w, out).
void matmul(const ArgBlock& args, KernelContext& ctx);
void linear(const ArgBlock& args, KernelContext& ctx);
// Quantized weights (quant.cpp): tensors (x, w, out) and (w, ids, out);
// scalars (format: i).
void linear_q(const ArgBlock& args, KernelContext& ctx);
void embedding_q(const ArgBlock& args, KernelContext& ctx);

// Row operations over the last dimension.
void softmax(const ArgBlock& args, KernelContext& ctx);     // (x, out)
void rms_norm(const ArgBlock& args, KernelContext& ctx);    // (x, w, out); (eps: f)
void layer_norm(const ArgBlock& args, KernelContext& ctx);  // (x, w, b, out); (eps: f)
void argmax(const ArgBlock& args, KernelContext& ctx);      // (x, out)
void sample(const ArgBlock& args, KernelContext& ctx);      // (x, out; temperature, seed, offset)
void count_nonfinite(const ArgBlock& args, KernelContext& ctx);  // (x, out)

// Collectives (collective.cpp; Note [Collectives] in sinkgraph/collectives.h).
void all_reduce(const ArgBlock& args, KernelContext& ctx);  // (x, out); (group: i)
void all_gather(const ArgBlock& args, KernelContext& ctx);  // (x, out); (group: i, size: i)

// Transformer pieces.
void rope(const ArgBlock& args, KernelContext& ctx);  // (x, out); (pos0: i, theta: f, style: i)
void rope_rows(const ArgBlock& args, KernelContext& ctx);  // (x, pos, out); (theta: f, style: i)
void embedding(const ArgBlock& args, KernelContext& ctx);  // (weight, ids, out)
void attention(const ArgBlock& args, KernelContext& ctx);  // (q, k, v, out); (seq_len: i, scale: f)
void attention_rows(const ArgBlock& args, KernelContext& ctx);  // (q, k, v, pos, out); (scale: f)
void sdpa(const ArgBlock& args, KernelContext& ctx);  // (q, k, v, out); (heads: i, scale: f)
// (q, k, v, mask, out); (heads: i, scale: f)
void sdpa_mask(const ArgBlock& args, KernelContext& ctx);
void sdpa_causal(const ArgBlock& args, KernelContext& ctx);  // as sdpa

// Vision (NCHW): conv2d (x, w, b, out); (stride_h, stride_w, pad_h, pad_w,
// dil_h, dil_w, groups, activation: i). batch_norm (x, mean, var, weight,
// bias, out); (eps: f). max_pool2d (x, out); (kh, kw, sh, sw, ph, pw, dh, dw:
// i) (Note [Kernel scalars]: its ceil_mode never reaches the kernel).
void conv2d(const ArgBlock& args, KernelContext& ctx);
void batch_norm(const ArgBlock& args, KernelContext& ctx);
void max_pool2d(const ArgBlock& args, KernelContext& ctx);

// Reductions: mean (x, out); (mask of reduced dims: i, keepdim: i) (Note [Kernel scalars]).
void mean(const ArgBlock& args, KernelContext& ctx);

// Fused (max-autotune): silu_mul (a, b, out); fused_elementwise (inputs..., out)
// with its program in the scalar slots (Note [Fused elementwise programs]);
// add_rms_norm (x, r, w, out[2, ...]); (eps: f).
void silu_mul(const ArgBlock& args, KernelContext& ctx);
void add_rms_norm(const ArgBlock& args, KernelContext& ctx);
void fused_elementwise(const ArgBlock& args, KernelContext& ctx);

}  // namespace sinkgraph::kernels::cpu

// The C++ backend's emitters (Note [Operator emitters] in op_registry.h): one
// loop nest per operator, specialised to the concrete shapes and strides of
// one graph key. Each mirrors its CPU kernel's algorithm (the same order of
// the reductions where the kernel's is sequential), so generated regions agree
// with the kernels within float rounding (Note [Generated code and float
// rounding] in region.cpp).
#include "emitters.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "../kernels/cpu/common.h"
#include "../kernels/cpu/quant.h"
#include "../kernels/fused_program.h"
#include "sinkgraph/op_registry.h"

namespace sinkgraph::codegen {
namespace {

namespace fp = kernels::fused;
namespace quant = kernels::cpu::quant;

std::string i64(std::int64_t v) { return std::to_string(v) + "LL"; }

// "t[i0*s0 + i1*s1 ...]" for loop variables named `<var><d>`, dropping
// dimensions of size 1 and stride 0.
std::string at(const EmitTensor& t, const std::string& var, int first_dim = 0) {
  std::string idx;
  for (int d = first_dim; d < t.shape.size(); ++d) {
    if (t.shape[d] == 1 || t.strides[d] == 0) continue;
    if (!idx.empty()) idx += " + ";
    idx += var + std::to_string(d) + (t.strides[d] == 1 ? "" : " * " + i64(t.strides[d]));
  }
  return t.ptr + "[" + (idx.empty() ? "0" : idx) + "]";
}

// Broadcasts `in` to `out`'s rank: dims aligned on the right, size-1 or
// missing dims get stride 0.
EmitTensor broadcast_to(const EmitTensor& in, const EmitTensor& out) {
  EmitTensor b = in;
  const int lead = out.shape.size() - in.shape.size();
  b.shape = out.shape;
  b.strides = Strides();
  for (int d = 0; d < out.shape.size(); ++d) {
    const int src = d - lead;
    const bool real = src >= 0 && in.shape[src] == out.shape[d] && in.shape[src] != 1;
    b.strides.push_back(real ? in.strides[src] : 0);
  }
  return b;
}

// Opens one for loop per dimension of `shape` from `first` to `last` - 1.
std::string open_loops(const Shape& shape, const std::string& var, int first, int last) {
  std::string s;
  for (int d = first; d < last; ++d) {
    s += fmt::format("for (long long {0}{1} = 0; {0}{1} < {2}; ++{0}{1}) {{\n", var, d,
                     i64(shape[d]));
  }
  return s;
}
std::string close_loops(int n) { return std::string(static_cast<std::size_t>(n), '}') + "\n"; }

// Note [Parallel loops in generated code]
// Generated loops split across the compute threads as the kernels do (Note
// [Splitting a kernel's work]): a loop nest's first dimension larger than one
// becomes the range of the prelude's sg_parallel_for, parts of whole grains
// from common.h's grain_for() of the elements each index touches. Whether a
// nest can split at all is a fact of its shapes, decided here: one too small
// for two grains is emitted as plain loops and pays nothing. How many parts
// it gets is read at run time from the pool, so one generated function (and
// one cache entry) serves any thread count, and each index runs the same code
// whichever part holds it: results do not depend on the thread count. A body
// that can fail (SG_FAIL returns from sg_region) is never put in a part.
struct LoopNest {
  std::string open, close;
};

// Loops over dims [first, last) of `shape` named `<var><d>`, each innermost
// iteration touching `inner_work` elements; the first dim larger than one is
// split when it holds at least two grains.
LoopNest parallel_loops(const Shape& shape, const std::string& var, int first, int last,
                        std::int64_t inner_work) {
  int p = first;
  while (p < last && shape[p] == 1) ++p;
  if (p < last) {
    std::int64_t work = inner_work;
    for (int d = p + 1; d < last; ++d) work *= shape[d];
    const std::int64_t grain = kernels::grain_for(work);
    if (shape[p] / grain >= 2) {
      const std::string v = var + std::to_string(p);
      return {open_loops(shape, var, first, p) +
                  fmt::format("sg_parallel_for(pool, {0}, {1}, [&](long long {2}_lo, long long "
                              "{2}_hi) {{\nfor (long long {2} = {2}_lo; {2} < {2}_hi; ++{2}) {{\n",
                              i64(shape[p]), i64(grain), v) +
                  open_loops(shape, var, p + 1, last),
              close_loops(last - p - 1) + "}\n});\n" + close_loops(p - first)};
    }
  }
  return {open_loops(shape, var, first, last), close_loops(last - first)};
}

// Rows over the last dimension of a rank-`rank` tensor: the offset of the row
// at the leading loop variables r0 .. r{rank-2} ("r0 * s0 + ... + "), and
// element i of that row.
std::string row_offset(const EmitTensor& t, int rank) {
  std::string idx;
  for (int d = 0; d < rank - 1; ++d) {
    if (t.shape[d] == 1 || t.strides[d] == 0) continue;
    idx += "r" + std::to_string(d) + " * " + i64(t.strides[d]) + " + ";
  }
  return idx;
}
std::string row_elem(const EmitTensor& t, int rank, const std::string& i) {
  return t.ptr + "[" + row_offset(t, rank) + i + " * " + i64(t.strides[rank - 1]) + "]";
}

bool all_f32(const EmitArgs& a) {
  for (const EmitTensor& t : a.inputs) {
    if (t.dtype != DType::f32) return false;
  }
  return a.out->dtype == DType::f32;
}

std::string unary_expr(int fn, const std::string& x) {
  switch (fn) {
    case fp::kNeg:
      return "(-" + x + ")";
    case fp::kExp:
      return "sg_exp(" + x + ")";
    case fp::kSqrt:
      return "std::sqrt(" + x + ")";
    case fp::kRsqrt:
      return "(1.0f / std::sqrt(" + x + "))";
    case fp::kErf:
      return "sg_erf(" + x + ")";
    case fp::kRelu:
      return "sg_relu(" + x + ")";
    case fp::kSilu:
      return "sg_silu(" + x + ")";
    case fp::kGelu:
      return "sg_gelu(" + x + ")";
    case fp::kTanh:
      return "std::tanh(" + x + ")";
    case fp::kSigmoid:
      return "sg_sigmoid(" + x + ")";
    case fp::kHardswish:
      return "sg_hardswish(" + x + ")";
    case fp::kHardsigmoid:
      return "sg_hardsigmoid(" + x + ")";
    case fp::kCos:
      return "std::cos(" + x + ")";
    case fp::kSin:
      return "std::sin(" + x + ")";
    default:
      return "";
  }
}

std::string binary_expr(int fn, const std::string& a, const std::string& b) {
  static constexpr const char* kOps[] = {" + ", " - ", " * ", " / "};
  if (fn < 0 || fn >= fp::kNumBinary) return "";
  return "(" + a + kOps[fn] + b + ")";
}

// Every pointwise operator, from its trait (Note [Operator traits]): the
// output's loop nest, each input read at its broadcast index.
bool emit_pointwise(const OpDef& def, const EmitArgs& a, std::string& out) {
  if (!all_f32(a)) return false;
  const EmitTensor& o = *a.out;
  std::vector<std::string> in;
  for (const EmitTensor& t : a.inputs) in.push_back(at(broadcast_to(t, o), "i"));
  std::string value;
  switch (def.traits.pointwise) {
    case Pointwise::unary:
      value = unary_expr(def.traits.pointwise_fn, in.at(0));
      break;
    case Pointwise::binary:
      value = binary_expr(def.traits.pointwise_fn, in.at(0), in.at(1));
      break;
    case Pointwise::add_scalar:
      value = "(" + in.at(0) + " + static_cast<float>(" + a.scalars[0].expr + "))";
      break;
    case Pointwise::mul_scalar:
      value = "(" + in.at(0) + " * static_cast<float>(" + a.scalars[0].expr + "))";
      break;
    case Pointwise::none:
      return false;
  }
  if (value.empty()) return false;
  const int nd = o.shape.size();
  const LoopNest loops = parallel_loops(o.shape, "i", 0, nd, 1);
  out += "{\n" + loops.open + at(o, "i") + " = " + value + ";\n" + loops.close + "}\n";
  return true;
}

// The emitter each pointwise operator registers: looks its definition up by name.
bool emit_pointwise_by_name(const EmitArgs& a, std::string& out) {
  return emit_pointwise(OpRegistry::instance().get(a.op), a, out);
}

// fused_elementwise (Note [Fused elementwise programs]): the program, a
// postfix code in the node's attributes, becomes one expression per element.
bool emit_fused_elementwise(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.scalars.size() != fp::kCodeSlots + fp::kMaxConsts) return false;
  std::int64_t slots[fp::kCodeSlots];
  for (int i = 0; i < fp::kCodeSlots; ++i) {
    if (a.scalars[static_cast<std::size_t>(i)].runtime) return false;
    slots[i] = std::stoll(a.scalars[static_cast<std::size_t>(i)].expr);
  }
  std::uint8_t code[fp::kMaxCode];
  const int n = fp::unpack_program(slots, code);
  const EmitTensor& o = *a.out;
  std::vector<std::string> stack;
  for (int i = 0; i < n; ++i) {
    const int arg = fp::arg_of(code[i]);
    switch (fp::opcode_of(code[i])) {
      case fp::kLoad:
        if (arg >= static_cast<int>(a.inputs.size())) return false;
        stack.push_back(at(broadcast_to(a.inputs[static_cast<std::size_t>(arg)], o), "i"));
        break;
      case fp::kUnary:
      case fp::kUnaryHi:
        if (stack.empty()) return false;
        stack.back() = unary_expr(fp::unary_fn(code[i]), stack.back());
        break;
      case fp::kBinary: {
        if (stack.size() < 2) return false;
        const std::string b = stack.back();
        stack.pop_back();
        stack.back() = binary_expr(arg, stack.back(), b);
        break;
      }
      case fp::kAddConst:
      case fp::kMulConst:
        if (stack.empty()) return false;
        stack.back() =
            "(" + stack.back() + (fp::opcode_of(code[i]) == fp::kAddConst ? " + " : " * ") +
            "static_cast<float>(" +
            a.scalars[static_cast<std::size_t>(fp::kCodeSlots) + static_cast<std::size_t>(arg)]
                .expr +
            "))";
        break;
      default:
        return false;
    }
    if (!stack.empty() && stack.back().empty()) return false;
  }
  if (stack.size() != 1) return false;
  const int nd = o.shape.size();
  const LoopNest loops = parallel_loops(o.shape, "i", 0, nd, 1);
  out += "{\n" + loops.open + at(o, "i") + " = " + stack[0] + ";\n" + loops.close + "}\n";
  return true;
}

// silu_mul(a, b) = silu(a) * b, broadcast.
bool emit_silu_mul(const EmitArgs& a, std::string& out) {
  if (!all_f32(a)) return false;
  const EmitTensor& o = *a.out;
  const std::string x = at(broadcast_to(a.inputs[0], o), "i");
  const std::string y = at(broadcast_to(a.inputs[1], o), "i");
  const int nd = o.shape.size();
  const LoopNest loops = parallel_loops(o.shape, "i", 0, nd, 1);
  out += "{\n" + loops.open + at(o, "i") + " = sg_silu(" + x + ") * " + y + ";\n" + loops.close +
         "}\n";
  return true;
}

// Rows over the last dimension: loops over the leading dims of `t`.
std::string row_loops(const EmitTensor& t) {
  return open_loops(t.shape, "r", 0, t.shape.size() - 1);
}
// The same rows split across the compute threads, each touching `per_row`
// elements.
LoopNest parallel_rows(const EmitTensor& t, std::int64_t per_row) {
  return parallel_loops(t.shape, "r", 0, t.shape.size() - 1, per_row);
}

// rms_norm(x, w, eps): o = w * (x * 1/sqrt(mean(x^2) + eps)), per row, the
// sum of squares in order.
void rms_norm_body(const EmitTensor& x, const EmitTensor& w, const EmitTensor& o,
                   const std::string& eps, std::string& out) {
  const int nd = x.shape.size();
  const std::int64_t n = x.shape[nd - 1];
  auto elem = [&](const EmitTensor& t, const std::string& i) { return row_elem(t, nd, i); };
  const std::string wi = w.ptr + "[i * " + i64(w.strides[0]) + "]";
  const LoopNest rows = parallel_rows(x, n);
  out += "{\n" + rows.open;
  out += "float ss = 0.0f;\n";
  out += fmt::format("for (long long i = 0; i < {}; ++i) {{ const float v = {}; ss += v * v; }}\n",
                     i64(n), elem(x, "i"));
  out += fmt::format("const float scale = 1.0f / std::sqrt(ss / {}.0f + static_cast<float>({}));\n",
                     n, eps);
  out += fmt::format("for (long long i = 0; i < {}; ++i) {} = {} * (scale * {});\n", i64(n),
                     elem(o, "i"), wi, elem(x, "i"));
  out += rows.close + "}\n";
}

bool emit_rms_norm(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.inputs[0].shape.empty() || a.inputs[1].shape.size() != 1) return false;
  rms_norm_body(a.inputs[0], a.inputs[1], *a.out, a.scalars[0].expr, out);
  return true;
}

// out[0] = x + r; out[1] = rms_norm(out[0]) (stacked on a new dim 0).
bool emit_add_rms_norm(const EmitArgs& a, std::string& out) {
  if (!all_f32(a)) return false;
  const EmitTensor& x = a.inputs[0];
  const EmitTensor& r = a.inputs[1];
  const EmitTensor& o = *a.out;
  EmitTensor sum = o, norm = o;  // the two halves: drop dim 0
  sum.shape = Shape(), sum.strides = Strides();
  for (int d = 1; d < o.shape.size(); ++d) {
    sum.shape.push_back(o.shape[d]);
    sum.strides.push_back(o.strides[d]);
  }
  norm.shape = sum.shape;
  norm.strides = sum.strides;
  norm.ptr = "(" + o.ptr + " + " + i64(o.strides[0]) + ")";
  const int nd = x.shape.size();
  const LoopNest loops = parallel_loops(x.shape, "i", 0, nd, 1);
  out += "{\n" + loops.open + at(sum, "i") + " = " + at(x, "i") + " + " + at(r, "i") + ";\n" +
         loops.close + "}\n";
  rms_norm_body(sum, a.inputs[2], norm, a.scalars[0].expr, out);
  return true;
}

// linear(x[..., K], w[N, K]) = x @ w^T, for a few rows of x (decode): per
// row, N dot products over K. With unit strides, four output rows at a
// time, eight lanes each (the prelude's sg_v8), then a scalar tail for K not
// a multiple of 8: x is loaded once for four rows of w, and four sums run
// side by side. More rows than kMaxLinearRows is a matrix product:
// declined, so the linear kernel runs it (Note [Rows of a linear]; a loop
// nest here would re-read the weights once per row).
constexpr std::int64_t kMaxLinearRows = 4;
// A weight larger than kStreamedWeightBytes (Note [Streamed weights])
// streams from memory rather than the caches, and there the kernel's
// one-row-at-a-time walk reads it faster than these loops (on the random
// dim-512 model, max-autotune's decode ran at a median 115 tokens/s
// generating every linear, 191 declining weights past 256 KiB, 157 past 1
// MiB, against reduce-overhead's 143; docs/performance.md). So such a
// linear is declined: it runs its kernel between two regions. Weights that
// fit (all of stories260K's) stay in the generated code, fused with their
// neighbours.

bool emit_linear(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.inputs[1].shape.size() != 2) return false;
  const EmitTensor& x = a.inputs[0];
  const EmitTensor& w = a.inputs[1];
  const EmitTensor& o = *a.out;
  const int nd = x.shape.size();
  const std::int64_t n = w.shape[0], k = w.shape[1];
  std::int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= x.shape[d];
  if (rows > kMaxLinearRows) return false;
  if (n * k * static_cast<std::int64_t>(sizeof(float)) > kernels::kStreamedWeightBytes)
    return false;
  auto lead = [&](const EmitTensor& t) { return row_offset(t, nd); };
  out += "{\n" + row_loops(x);
  out += fmt::format("const float* xr = {} + {}0;\nfloat* orow = {} + {}0;\n", x.ptr, lead(x),
                     o.ptr, lead(o));
  const bool blocked = x.strides[nd - 1] == 1 && w.strides[1] == 1 && k >= 8;
  const std::int64_t k8 = k - k % 8;  // the lanes' part; the rest is a scalar tail
  std::int64_t done = 0;
  if (blocked && n >= 4) {
    done = n - n % 4;
    // Blocks of four output rows split across the compute threads.
    const LoopNest loop = parallel_loops(Shape{done / 4}, "b", 0, 1, 4 * k);
    out += loop.open + "const long long n = b0 * 4;\n";
    out += fmt::format("const float* w0 = {} + n * {};\n", w.ptr, i64(w.strides[0]));
    out += fmt::format(
        "const float* w1 = w0 + {0};\nconst float* w2 = w1 + {0};\n"
        "const float* w3 = w2 + {0};\n",
        i64(w.strides[0]));
    out += "sg_v8 a0 = {}, a1 = {}, a2 = {}, a3 = {};\n";
    out += fmt::format("for (long long c = 0; c < {}; c += 8) {{\n", i64(k8));
    out +=
        "const sg_v8 xv = sg_load8(xr + c);\n"
        "a0 += xv * sg_load8(w0 + c);\na1 += xv * sg_load8(w1 + c);\n"
        "a2 += xv * sg_load8(w2 + c);\na3 += xv * sg_load8(w3 + c);\n}\n";
    out += "float s0 = sg_hsum8(a0), s1 = sg_hsum8(a1), s2 = sg_hsum8(a2), s3 = sg_hsum8(a3);\n";
    if (k8 < k) {
      out += fmt::format(
          "for (long long c = {}; c < {}; ++c) {{ s0 += xr[c] * w0[c]; "
          "s1 += xr[c] * w1[c]; s2 += xr[c] * w2[c]; s3 += xr[c] * w3[c]; }}\n",
          i64(k8), i64(k));
    }
    out += fmt::format(
        "orow[n * {0}] = s0;\norow[(n + 1) * {0}] = s1;\n"
        "orow[(n + 2) * {0}] = s2;\norow[(n + 3) * {0}] = s3;\n",
        i64(o.strides[nd - 1]));
    out += loop.close;
  }
  if (done < n) {
    out += fmt::format("for (long long n = {}; n < {}; ++n) {{\n", i64(done), i64(n));
    out += fmt::format("const float* wr = {} + n * {};\nfloat acc = 0.0f;\n", w.ptr,
                       i64(w.strides[0]));
    out += fmt::format("for (long long c = 0; c < {}; ++c) acc += xr[c * {}] * wr[c * {}];\n",
                       i64(k), i64(x.strides[nd - 1]), i64(w.strides[1]));
    out += fmt::format("orow[n * {}] = acc;\n}}\n", i64(o.strides[nd - 1]));
  }
  out += close_loops(nd - 1) + "}\n";
  return true;
}

// linear_q(x[..., K], w[N, K/32 blocks], format) (Note [Quantized weights]
// in ops.h): per row of x, its blocks quantized to 8 bits (the prelude's
// sg_quantize32) onto the stack, then N dot products, each the prelude's
// sg_dot_q: the kernel's quantizer and integer sums (Note [Activations
// quantized per block] in quant.h; for Q4_0 the offsets of Note [Q4_0's
// nibbles as they are], sg_q4_offsets), so the same bits. The same bounds as an
// f32 linear: a few rows of x, and a weight that does not stream (past
// kStreamedWeightBytes the kernel, which prefetches a row of blocks ahead,
// reads it faster), so stories260K's quantized decode step stays one region.
// A row of more than kMaxQuantizedRow values stays with the kernel rather
// than on a worker's stack.
constexpr std::int64_t kMaxQuantizedRow = 65536;
bool emit_linear_q(const EmitArgs& a, std::string& out) {
  const EmitTensor& x = a.inputs[0];
  const EmitTensor& w = a.inputs[1];
  const EmitTensor& o = *a.out;
  if (x.dtype != DType::f32 || w.dtype != DType::u8 || o.dtype != DType::f32 ||
      w.shape.size() != 2 || w.strides[1] != 1 || a.scalars[0].runtime)
    return false;
  const int nd = x.shape.size();
  if (x.strides[nd - 1] != 1) return false;
  const auto format = static_cast<quant::Format>(std::stoll(a.scalars[0].expr));
  if (format != quant::Format::q8_0 && format != quant::Format::q4_0) return false;
  const std::int64_t bb = quant::block_bytes(format);
  const std::int64_t n = w.shape[0], blocks = w.shape[1] / bb, k = blocks * quant::kBlock;
  std::int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= x.shape[d];
  if (rows > kMaxLinearRows || n * w.shape[1] > kernels::kStreamedWeightBytes ||
      k > kMaxQuantizedRow)
    return false;
  auto lead = [&](const EmitTensor& t) { return row_offset(t, nd); };
  out += "{\n" + row_loops(x);
  out += fmt::format("const float* xr = {} + {}0;\nfloat* orow = {} + {}0;\n", x.ptr, lead(x),
                     o.ptr, lead(o));
  const bool q4 = format == quant::Format::q4_0;
  out += fmt::format(
      "signed char xq[{0}];\nfloat xd[{1}];\nint xo[{2}];\n"
      "for (long long b = 0; b < {1}; ++b) {{\n"
      "sg_quantize32(xr + b * 32, xq + b * 32, xd + b);\n{3}}}\n",
      i64(k), i64(blocks), q4 ? i64(8 * blocks) : std::string("1LL"),
      q4 ? "sg_q4_offsets(xq + b * 32, xo + b * 8);\n" : "");
  const LoopNest loop = parallel_loops(Shape{n}, "n", 0, 1, k);  // output rows, split
  out += loop.open;
  out += fmt::format("orow[n0 * {}] = sg_dot_q<{}>({} + n0 * {}, {}, xq, xd, xo);\n",
                     i64(o.strides[nd - 1]), format == quant::Format::q8_0 ? 0 : 1, w.ptr,
                     i64(w.strides[0]), i64(blocks));
  out += loop.close;
  out += close_loops(nd - 1) + "}\n";
  return true;
}

// rope(x[T, H, D], pos0, theta, style): pairs (2i, 2i+1) (interleaved) or
// (i, i + D/2) (half), rotated by (pos0 + t) / theta^(2i/D), as llama2.c.
bool emit_rope(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.inputs[0].shape.size() != 3) return false;
  const EmitTensor& x = a.inputs[0];
  const EmitTensor& o = *a.out;
  const std::int64_t t_len = x.shape[0], heads = x.shape[1], d = x.shape[2];
  const bool half = a.scalars[2].expr == "1" || a.scalars[2].expr == "1LL";
  const std::int64_t pairs = d / 2;
  out += "{\n";
  out += fmt::format("const long long pos0 = {};\nconst float theta = static_cast<float>({});\n",
                     a.scalars[0].expr, a.scalars[1].expr);
  out += fmt::format("for (long long t = 0; t < {}; ++t) {{\n", i64(t_len));
  out += "const float pos = static_cast<float>(pos0 + t);\n";
  out += fmt::format("for (long long i = 0; i < {}; ++i) {{\n", i64(pairs));
  out += fmt::format(
      "const float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / {}.0f);\n", d);
  out +=
      "const float angle = pos * freq;\nconst float c = std::cos(angle);\n"
      "const float s = std::sin(angle);\n";
  out += half ? fmt::format("const long long i0 = i, i1 = i + {};\n", i64(pairs))
              : "const long long i0 = 2 * i, i1 = 2 * i + 1;\n";
  out += fmt::format("for (long long h = 0; h < {}; ++h) {{\n", i64(heads));
  out += fmt::format("const float* xr = {} + t * {} + h * {};\n", x.ptr, i64(x.strides[0]),
                     i64(x.strides[1]));
  out += fmt::format("float* orow = {} + t * {} + h * {};\n", o.ptr, i64(o.strides[0]),
                     i64(o.strides[1]));
  out += fmt::format("const float va = xr[i0 * {0}], vb = xr[i1 * {0}];\n", i64(x.strides[2]));
  out += fmt::format("orow[i0 * {0}] = va * c - vb * s;\norow[i1 * {0}] = va * s + vb * c;\n",
                     i64(o.strides[2]));
  out += "}\n}\n}\n}\n";
  return true;
}

// The offset of output row i0.. of an embedding ("i0 * s0 + ... + ").
std::string embedding_row_base(const EmitTensor& o, int id_dims) {
  std::string base;
  for (int d = 0; d < id_dims; ++d) {
    if (o.shape[d] == 1 || o.strides[d] == 0) continue;
    base += "i" + std::to_string(d) + " * " + i64(o.strides[d]) + " + ";
  }
  return base;
}

// `id`, read from ids at the loop variables i0.., and checked: an id out of
// range fails the region with the kernels' message.
std::string embedding_id_check(const EmitTensor& ids, std::int64_t vocab) {
  return "const long long id = " + at(ids, "i") + ";\n" +
         fmt::format(
             "if (id < 0 || id >= {0}) {{ SG_FAIL(\"token id %lld is out of range for an "
             "embedding table of {1} rows (expected 0 <= id < {1})\", id); }}\n",
             i64(vocab), vocab);
}

// embedding(weight[V, D], ids[...]): ids are checked; an id out of range
// fails the region with the kernel's message.
bool emit_embedding(const EmitArgs& a, std::string& out) {
  const EmitTensor& w = a.inputs[0];
  const EmitTensor& ids = a.inputs[1];
  const EmitTensor& o = *a.out;
  if (w.dtype != DType::f32 || o.dtype != DType::f32 ||
      (ids.dtype != DType::i64 && ids.dtype != DType::i32))
    return false;
  const int nd = ids.shape.size();
  const std::int64_t vocab = w.shape[0], dim = w.shape[1];
  out += "{\n" + open_loops(ids.shape, "i", 0, nd);
  out += embedding_id_check(ids, vocab);
  const std::string base = embedding_row_base(o, nd);  // o[i..., c]
  out += fmt::format("for (long long c = 0; c < {}; ++c) {}[{}c * {}] = {}[id * {} + c * {}];\n",
                     i64(dim), o.ptr, base, i64(o.strides[nd]), w.ptr, i64(w.strides[0]),
                     i64(w.strides[1]));
  out += close_loops(nd) + "}\n";
  return true;
}

// embedding_q(weight[V, blocks], ids[...], format): the rows of the ids,
// decoded block by block as the kernel (d * q, one product per value, so
// the same values bitwise); ids are checked as for embedding.
bool emit_embedding_q(const EmitArgs& a, std::string& out) {
  const EmitTensor& w = a.inputs[0];
  const EmitTensor& ids = a.inputs[1];
  const EmitTensor& o = *a.out;
  if (w.dtype != DType::u8 || o.dtype != DType::f32 || w.shape.size() != 2 || w.strides[1] != 1 ||
      (ids.dtype != DType::i64 && ids.dtype != DType::i32) || a.scalars[0].runtime)
    return false;
  const auto format = static_cast<quant::Format>(std::stoll(a.scalars[0].expr));
  if (format != quant::Format::q8_0 && format != quant::Format::q4_0) return false;
  const std::int64_t bb = quant::block_bytes(format);
  const int nd = ids.shape.size();
  const std::int64_t vocab = w.shape[0], blocks = w.shape[1] / bb;
  out += "{\n" + open_loops(ids.shape, "i", 0, nd);
  out += embedding_id_check(ids, vocab);
  const std::string base = embedding_row_base(o, nd);  // o[i..., c]
  const std::string col =
      fmt::format("{}[{}(b * 32 + {{}}) * {}]", o.ptr, base, i64(o.strides[nd]));
  out += fmt::format("for (long long b = 0; b < {}; ++b) {{\n", i64(blocks));
  out += fmt::format(
      "const unsigned char* blk = {} + id * {} + b * {};\nconst float d = sg_f16(blk);\n", w.ptr,
      i64(w.strides[0]), i64(bb));
  if (format == quant::Format::q8_0) {
    out += "for (int j = 0; j < 32; ++j) " + fmt::format(fmt::runtime(col), "j") +
           " = d * static_cast<float>(static_cast<signed char>(blk[2 + j]));\n";
  } else {
    out += "for (int j = 0; j < 16; ++j) {\n" + fmt::format(fmt::runtime(col), "j") +
           " = d * static_cast<float>((blk[2 + j] & 15) - 8);\n" +
           fmt::format(fmt::runtime(col), "j + 16") +
           " = d * static_cast<float>((blk[2 + j] >> 4) - 8);\n}\n";
  }
  out += "}\n" + close_loops(nd) + "}\n";
  return true;
}

// index_copy_(dst, index, src): dst[index : index + rows] = src.
bool emit_index_copy(const EmitArgs& a, std::string& out) {
  if (!all_f32(a)) return false;
  const EmitTensor& dst = a.inputs[0];
  const EmitTensor& src = a.inputs[1];
  const std::int64_t rows = src.shape[0], cap = dst.shape[0];
  out += "{\n";
  out += "const long long index = " + a.scalars[0].expr + ";\n";
  out += fmt::format(
      "if (index < 0 || index + {0} > {1}) {{ SG_FAIL(\"destination rows [%lld, %lld) are out of "
      "range for a destination of {2} rows\", index, index + {0}); }}\n",
      i64(rows), i64(cap), cap);
  EmitTensor window = dst;
  window.ptr = "(" + dst.ptr + " + index * " + i64(dst.strides[0]) + ")";
  window.shape[0] = rows;
  const int nd = src.shape.size();
  const LoopNest loops = parallel_loops(src.shape, "i", 0, nd, 1);
  out += loops.open + at(window, "i") + " = " + at(src, "i") + ";\n" + loops.close + "}\n";
  return true;
}

constexpr std::int64_t kStackScores = 16384;  // floats: 64 KiB of a worker's stack
// Columns of one head summed together over the v rows: four 8-lane registers.
constexpr std::int64_t kValueBlock = 32;

// attention(q[T, Hq, D], k[C, Hkv, D], v[C, Hkv, D], seq_len, scale): causal
// over the cache's first seq_len positions, as the kernel: scores, max,
// exponentials and their sum in order, then the weighted sum of v rows.
bool emit_attention(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.inputs[0].shape.size() != 3) return false;
  const EmitTensor& q = a.inputs[0];
  const EmitTensor& k = a.inputs[1];
  const EmitTensor& v = a.inputs[2];
  const EmitTensor& o = *a.out;
  const std::int64_t t_len = q.shape[0], hq = q.shape[1], d = q.shape[2];
  const std::int64_t cache = k.shape[0], hkv = k.shape[1];
  if (hkv == 0 || hq % hkv != 0) return false;
  const std::int64_t group = hq / hkv;
  out += "{\n";
  out += "const long long seq_len = " + a.scalars[0].expr + ";\n";
  out += fmt::format("const float scale = static_cast<float>({});\n", a.scalars[1].expr);
  out += fmt::format(
      "if (seq_len < {0} || seq_len > {1}) {{ SG_FAIL(\"seq_len %lld is out of range: expected "
      "{0} <= seq_len <= {1} (the query rows and the cache length)\", seq_len); }}\n",
      i64(t_len), i64(cache));
  // The `group` query heads of one kv head are done together, so each k and
  // v row is read once for all of them; per head, the sums run in the
  // kernel's order. The (row, kv head) pairs split across the compute
  // threads, each touching about 2 * group * seq_len * D elements (the
  // kernel's grain), decided at run time since seq_len is updatable. Scores
  // on the stack of whichever thread runs the pair, or on the heap for long
  // caches: no thread_local in generated code (LeakSanitizer's scan of a
  // dlopen'ed object's dynamic TLS crashed at exit).
  const std::int64_t pairs = t_len * hkv;
  if (pairs >= 2) {
    out += fmt::format(
        "sg_parallel_for(pool, {}, sg_grain(2 * {} * seq_len * {}), [&](long long p_lo, long long "
        "p_hi) {{\n",
        i64(pairs), i64(group), i64(d));
  } else {
    out += fmt::format("{{\nconst long long p_lo = 0, p_hi = {};\n", i64(pairs));
  }
  const std::int64_t slots = group * cache;
  out += slots <= kStackScores
             ? fmt::format("float scores[{}];\n", slots)
             : fmt::format(
                   "std::vector<float> scores_heap({});\nfloat* scores = scores_heap.data();\n",
                   i64(slots));
  out += fmt::format("float mx[{}], sum[{}];\n", group, group);
  out += "for (long long pair = p_lo; pair < p_hi; ++pair) {\n";
  out += fmt::format("const long long t = pair / {0}, kvh = pair % {0};\n", i64(hkv));
  out += fmt::format("const long long visible = seq_len - {} + t + 1;\n", i64(t_len));
  out += fmt::format("const float* qbase = {} + t * {} + kvh * {};\n", q.ptr, i64(q.strides[0]),
                     i64(group * q.strides[1]));
  out += fmt::format("for (int g = 0; g < {}; ++g) mx[g] = -__builtin_inff();\n", group);
  out += "for (long long j = 0; j < visible; ++j) {\n";
  out += fmt::format("const float* krow = {} + j * {} + kvh * {};\n", k.ptr, i64(k.strides[0]),
                     i64(k.strides[1]));
  out += fmt::format("for (int g = 0; g < {}; ++g) {{\n", group);
  out += fmt::format("const float* qrow = qbase + g * {};\nfloat dot = 0.0f;\n", i64(q.strides[1]));
  out += fmt::format("for (long long c = 0; c < {}; ++c) dot += qrow[c * {}] * krow[c * {}];\n",
                     i64(d), i64(q.strides[2]), i64(k.strides[2]));
  out += fmt::format(
      "dot *= scale;\nscores[g * {} + j] = dot;\nmx[g] = dot > mx[g] ? dot : mx[g];\n}}\n}}\n",
      i64(cache));
  out += fmt::format("for (int g = 0; g < {}; ++g) {{\n", group);
  out += fmt::format("float* sg = scores + g * {};\nfloat total = 0.0f;\n", i64(cache));
  out +=
      "for (long long j = 0; j < visible; ++j) { const float e = sg_exp(sg[j] - mx[g]); "
      "sg[j] = e; total += e; }\n";
  out += "sum[g] = total;\n}\n";
  // The weighted sum of v rows, per head and per block of at most
  // kValueBlock columns, each block's sums in locals the compiler keeps in
  // registers across the walk over positions. (One array for every
  // head and column, indexed by head inside that walk, stayed in memory:
  // each position's multiply-add waited on the last one's store, and this
  // loop was half of stories260K's region.) Per column the sum still runs
  // over positions in order.
  out += fmt::format("for (int g = 0; g < {}; ++g) {{\n", group);
  out += fmt::format("const float* sg = scores + g * {};\nconst float inv = 1.0f / sum[g];\n",
                     i64(cache));
  out += fmt::format("float* orow = {} + t * {} + (kvh * {} + g) * {};\n", o.ptr, i64(o.strides[0]),
                     i64(group), i64(o.strides[1]));
  const bool lanes = v.strides[2] == 1;
  for (std::int64_t c0 = 0; c0 < d; c0 += kValueBlock) {
    const std::int64_t width = std::min(kValueBlock, d - c0);
    // Eight columns to a vector (sg_v8) where the block allows: written as a
    // plain loop, GCC vectorized the walk over positions instead (a
    // reduction, with -fassociative-math), transposing the v rows in
    // registers. Otherwise a local array, summed column by column.
    const std::int64_t vecs = lanes && width % 8 == 0 ? width / 8 : 0;
    out += "{\n";
    if (vecs > 0) {
      for (std::int64_t i = 0; i < vecs; ++i) out += fmt::format("sg_v8 acc{} = {{}};\n", i);
    } else {
      out += fmt::format("float acc[{}] = {{}};\n", width);
    }
    out += "for (long long j = 0; j < visible; ++j) {\n";
    out +=
        fmt::format("const float* vrow = {} + j * {} + kvh * {} + {};\nconst float wj = sg[j];\n",
                    v.ptr, i64(v.strides[0]), i64(v.strides[1]), i64(c0 * v.strides[2]));
    if (vecs > 0) {
      for (std::int64_t i = 0; i < vecs; ++i)
        out += fmt::format("acc{0} += wj * sg_load8(vrow + {1});\n", i, i64(8 * i));
      out += "}\n";
      for (std::int64_t i = 0; i < vecs; ++i) {
        out += fmt::format("for (int c = 0; c < 8; ++c) orow[({} + c) * {}] = acc{}[c] * inv;\n",
                           i64(c0 + 8 * i), i64(o.strides[2]), i);
      }
    } else {
      out += fmt::format("for (long long c = 0; c < {}; ++c) acc[c] += wj * vrow[c * {}];\n}}\n",
                         i64(width), i64(v.strides[2]));
      out += fmt::format("for (long long c = 0; c < {}; ++c) orow[(c + {}) * {}] = acc[c] * inv;\n",
                         i64(width), i64(c0), i64(o.strides[2]));
    }
    out += "}\n";
  }
  out += "}\n";
  out += pairs >= 2 ? "}\n});\n}\n" : "}\n}\n}\n";
  return true;
}

// softmax over the last dimension, max-subtracted, as the kernel.
bool emit_softmax(const EmitArgs& a, std::string& out) {
  if (!all_f32(a) || a.inputs[0].shape.empty()) return false;
  const EmitTensor& x = a.inputs[0];
  const EmitTensor& o = *a.out;
  const int nd = x.shape.size();
  const std::int64_t n = x.shape[nd - 1];
  auto elem = [&](const EmitTensor& t, const std::string& i) { return row_elem(t, nd, i); };
  const LoopNest rows = parallel_rows(x, n);
  out += "{\n" + rows.open;
  out += fmt::format(
      "float mx = -__builtin_inff();\nfor (long long i = 0; i < {}; ++i) mx = {} > mx ? {} : "
      "mx;\n",
      i64(n), elem(x, "i"), elem(x, "i"));
  out += fmt::format(
      "float sum = 0.0f;\nfor (long long i = 0; i < {}; ++i) {{ const float e = sg_exp({} - "
      "mx); {} = e; sum += e; }}\n",
      i64(n), elem(x, "i"), elem(o, "i"));
  out +=
      fmt::format("const float inv = 1.0f / sum;\nfor (long long i = 0; i < {}; ++i) {} *= inv;\n",
                  i64(n), elem(o, "i"));
  out += rows.close + "}\n";
  return true;
}

}  // namespace

void register_emitters() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::instance();
    for (const std::string& name : r.names()) {
      const OpDef& def = r.get(name);
      if (def.traits.pointwise != Pointwise::none && def.emit == nullptr)
        r.set_emitter(name, emit_pointwise_by_name);
    }
    r.set_emitter("silu_mul", emit_silu_mul);
    r.set_emitter("fused_elementwise", emit_fused_elementwise);
    r.set_emitter("rms_norm", emit_rms_norm);
    r.set_emitter("add_rms_norm", emit_add_rms_norm);
    r.set_emitter("linear", emit_linear);
    r.set_emitter("linear_q", emit_linear_q);
    r.set_emitter("embedding_q", emit_embedding_q);
    r.set_emitter("rope", emit_rope);
    r.set_emitter("embedding", emit_embedding);
    r.set_emitter("index_copy_", emit_index_copy);
    r.set_emitter("attention", emit_attention);
    r.set_emitter("softmax", emit_softmax);
  });
}

}  // namespace sinkgraph::codegen

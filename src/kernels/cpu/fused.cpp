// Fused kernels made by the max-autotune fusion passes: silu_mul, add_rms_norm
// and the fused_elementwise interpreter (Note [Fused elementwise programs]).
//
// Each computes exactly what the chain of separate kernels it replaces
// computes: the same f32 formulas as elementwise.cpp and rows.cpp (kept in
// step by the bitwise tests in tests/passes/fusion_test.cpp and
// tests/ops/fused_ops_test.cpp), and for f16/bf16 a rounding to the storage
// type after every step, where the separate kernels stored an intermediate.
#include <cmath>

#include "../fused_program.h"
#include "common.h"
#include "kernels.h"
#include "pointwise_math.h"
#include "rows.h"
#include "vec.h"

namespace sinkgraph::kernels::cpu {

namespace {

namespace fp = fused;

// The value a separate kernel would have stored and reloaded.
template <typename T>
inline float round_to(float v) {
  if constexpr (is_half_v<T>) {
    T tmp{};
    store(&tmp, v);
    return load(&tmp);
  } else {
    return v;
  }
}

// Calls fn(offsets, count, inner_strides) for every innermost row of the
// output t[N-1], with the inputs t[0..N-2] broadcast against it.
template <int N, typename Fn>
void broadcast_rows(const TensorArg (&t)[N], KernelContext& ctx, Fn&& fn) {
  const TensorArg& o = t[N - 1];
  const std::int64_t n = o.numel();
  bool flat = o.is_contiguous();
  for (int k = 0; k < N - 1; ++k) flat = flat && t[k].is_contiguous() && t[k].numel() == n;
  if (flat) {
    // One row of n elements: split it over the intra-op threads.
    parallel_for(ctx, n, kMinParallelWork, [&](std::int64_t begin, std::int64_t end) {
      std::int64_t off[N];
      std::int64_t st[N];
      for (int k = 0; k < N; ++k) {
        off[k] = t[k].offset + begin;
        st[k] = 1;
      }
      fn(static_cast<const std::int64_t*>(off), end - begin, static_cast<const std::int64_t*>(st));
    });
    return;
  }
  std::int64_t strides[N][kMaxDims] = {};
  std::int64_t base[N];
  for (int k = 0; k < N - 1; ++k) {
    broadcast_strides(t[k], o.ndim, o.sizes, strides[k]);
    base[k] = t[k].offset;
  }
  for (int i = 0; i < o.ndim; ++i) strides[N - 1][i] = o.strides[i];
  base[N - 1] = o.offset;
  for_each_row<N>(o.ndim, o.sizes, strides, base, fn);
}

// Elements per chunk of the interpreter: each instruction runs over a whole
// chunk, so decoding costs once per chunk, not once per element.
constexpr std::int64_t kChunk = 64;

struct Program {
  int length = 0;
  int num_inputs = 0;
  std::uint8_t code[fp::kMaxCode] = {};
  float consts[fp::kMaxConsts] = {};
};

// The program from its scalar slots (validated by the shape function).
Program decode(const ArgBlock& args) {
  Program p;
  p.num_inputs = args.num_tensors - 1;
  std::int64_t slots[fp::kCodeSlots];
  for (int s = 0; s < fp::kCodeSlots; ++s) slots[s] = args.scalars[s].i;
  p.length = fp::unpack_program(slots, p.code);
  // As the separate kernels do: the double constant is used as a float.
  for (int k = 0; k < fp::kMaxConsts; ++k) {
    p.consts[k] = static_cast<float>(args.scalars[fp::kCodeSlots + k].f);
  }
  return p;
}

// Runs the program over `count` elements: input k's element i is at
// in[k] + off[k] + i * st[k]; results go to out + off[N-1] + i * st[N-1].
template <typename T, int N>
void run_chunked(const Program& p, const T* const* in, T* out, const std::int64_t* off,
                 std::int64_t count, const std::int64_t* st) {
  float stack[fp::kMaxStack][kChunk];
  for (std::int64_t c0 = 0; c0 < count; c0 += kChunk) {
    const std::int64_t m = std::min(kChunk, count - c0);
    int sp = 0;
    for (int pc = 0; pc < p.length; ++pc) {
      const int arg = fp::arg_of(p.code[pc]);
      switch (fp::opcode_of(p.code[pc])) {
        case fp::kLoad: {
          const T* src = in[arg] + off[arg] + c0 * st[arg];
          const std::int64_t s = st[arg];
          float* dst = stack[sp++];
          for (std::int64_t i = 0; i < m; ++i) dst[i] = load(src + i * s);
          break;
        }
        case fp::kUnary:
        case fp::kUnaryHi: {
          const int fn = fp::unary_fn(p.code[pc]);
          float* x = stack[sp - 1];
          for (std::int64_t i = 0; i < m; ++i) x[i] = round_to<T>(pointwise::unary(fn, x[i]));
          break;
        }
        case fp::kBinary: {
          float* a = stack[sp - 2];
          const float* b = stack[sp - 1];
          for (std::int64_t i = 0; i < m; ++i)
            a[i] = round_to<T>(pointwise::binary(arg, a[i], b[i]));
          --sp;
          break;
        }
        case fp::kAddConst: {
          float* x = stack[sp - 1];
          const float c = p.consts[arg];
          for (std::int64_t i = 0; i < m; ++i) x[i] = round_to<T>(x[i] + c);
          break;
        }
        default: {  // kMulConst
          float* x = stack[sp - 1];
          const float c = p.consts[arg];
          for (std::int64_t i = 0; i < m; ++i) x[i] = round_to<T>(x[i] * c);
          break;
        }
      }
    }
    T* dst = out + off[N - 1] + c0 * st[N - 1];
    const std::int64_t s = st[N - 1];
    for (std::int64_t i = 0; i < m; ++i) store(dst + i * s, stack[0][i]);
  }
}

}  // namespace

void silu_mul(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg t[3] = {args.tensors[0], args.tensors[1], args.tensors[2]};
  dispatch_float(t[2].dtype, [&]<typename T>() {
    const T* pa = static_cast<const T*>(t[0].data);
    const T* pb = static_cast<const T*>(t[1].data);
    T* po = static_cast<T*>(t[2].data);
    broadcast_rows<3>(
        t, ctx, [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
          for (std::int64_t i = 0; i < count; ++i) {
            const float s = round_to<T>(pointwise::silu(load(pa + off[0] + i * st[0])));
            store(po + off[2] + i * st[2], s * load(pb + off[1] + i * st[1]));
          }
        });
  });
}

// out[0] = x + r as the add kernel computes and stores it; out[1] = rms_norm
// of the STORED row out[0], by rms_norm's own row function (rows.h), so both
// halves are bitwise what add then rms_norm store. Element i of x and r is
// read only to write element i of out[0].
void add_rms_norm(const ArgBlock& args, KernelContext&) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& r = args.tensors[1];
  const TensorArg& w = args.tensors[2];
  const TensorArg& o = args.tensors[3];  // [2, *x.sizes]
  const auto eps = static_cast<float>(args.scalars[0].f);
  const int nd = x.ndim;  // >= 1 (shape function)
  const std::int64_t n = x.sizes[nd - 1];
  const std::int64_t xs = x.strides[nd - 1];
  const std::int64_t rs = r.strides[nd - 1];
  const std::int64_t ws = w.strides[0];
  const std::int64_t os = o.strides[nd];  // the last stride of both halves
  // One visit per row: the outer dims of x, r and of each half of out.
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[4][kMaxDims] = {};
  for (int i = 0; i < nd - 1; ++i) {
    sizes[i] = x.sizes[i];
    strides[0][i] = x.strides[i];
    strides[1][i] = r.strides[i];
    strides[2][i] = o.strides[i + 1];
    strides[3][i] = o.strides[i + 1];
  }
  sizes[nd - 1] = 1;
  const std::int64_t base[4] = {x.offset, r.offset, o.offset, o.offset + o.strides[0]};
  dispatch_float(x.dtype, [&]<typename T>() {
    const T* px = static_cast<const T*>(x.data);
    const T* pr = static_cast<const T*>(r.data);
    const T* pw = static_cast<const T*>(w.data) + w.offset;
    T* po = static_cast<T*>(o.data);
    for_each_row<4>(
        nd, sizes, strides, base, [&](const std::int64_t* off, std::int64_t, const std::int64_t*) {
          T* sum = po + off[2];
          for (std::int64_t i = 0; i < n; ++i) {
            store(sum + i * os, load(px + off[0] + i * xs) + load(pr + off[1] + i * rs));
          }
          rms_norm_row(static_cast<const T*>(sum), os, pw, ws, po + off[3], os, n, eps);
        });
  });
}

void fused_elementwise(const ArgBlock& args, KernelContext& ctx) {
  const Program p = decode(args);
  // Six tensor slots: the inputs, padding (copies of input 0, never loaded),
  // then the output last.
  constexpr int kSlots = kMaxTensorArgs;
  TensorArg t[kSlots];
  for (int k = 0; k < kSlots - 1; ++k) t[k] = args.tensors[k < p.num_inputs ? k : 0];
  t[kSlots - 1] = args.tensors[p.num_inputs];
  dispatch_float(t[kSlots - 1].dtype, [&]<typename T>() {
    const T* in[kSlots - 1];
    for (int k = 0; k < kSlots - 1; ++k) in[k] = static_cast<const T*>(t[k].data);
    T* out = static_cast<T*>(t[kSlots - 1].data);
    broadcast_rows<kSlots>(
        t, ctx, [&](const std::int64_t* off, std::int64_t count, const std::int64_t* st) {
          run_chunked<T, kSlots>(p, in, out, off, count, st);
        });
  });
}

}  // namespace sinkgraph::kernels::cpu

// silu_mul, add_rms_norm and fused_elementwise against naive references:
// plain loops in double over the values the tensors hold, sharing no code
// with the kernels; add_rms_norm also bitwise against add then rms_norm.
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"

namespace {

using sinkgraph::DType;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
namespace ref = sgtest::ref;
using sgtest::all_close;
using sgtest::Dims;
using sgtest::make;

// f32: a few f32 roundings (exp, divide, multiply) against double.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;
// f16/bf16: the kernels round each step to the storage type, the reference
// does not: a few roundings of 2^-11 (f16) or 2^-8 (bf16).
double half_rtol(DType d) { return d == DType::f16 ? 4e-3 : 3e-2; }

// Element `flat` of `out` read from an operand of `shape` under broadcasting.
double at(const std::vector<float>& v, const Dims& shape, const Dims& out, std::int64_t flat) {
  return v[static_cast<std::size_t>(ref::broadcast_index(ref::unravel(flat, out), shape))];
}

struct BroadcastCase {
  Dims a, b;
};
const BroadcastCase kCases[] = {{{4, 7}, {4, 7}}, {{1}, {1}},       {{3, 1}, {1, 5}},
                                {{2, 3, 4}, {4}}, {{1, 6}, {5, 1}}, {{9}, {1}}};

TEST(ops_fused, silu_mul_matches_reference_with_broadcasting_and_dtypes) {
  std::mt19937 rng(11);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& c : kCases) {
      SCOPED_TRACE(sgtest::str(c.a) + " x " + sgtest::str(c.b));
      std::vector<float> va, vb;
      const Tensor a = make(sgtest::random_floats(rng, ref::numel(c.a), -4, 4), c.a, dtype, &va);
      const Tensor b = make(sgtest::random_floats(rng, ref::numel(c.b), -4, 4), c.b, dtype, &vb);
      const Tensor out = ops::silu_mul(a, b);
      const Dims os = ref::broadcast(c.a, c.b);
      ASSERT_EQ(sgtest::dims_of(out), os);
      std::vector<float> want(static_cast<std::size_t>(ref::numel(os)));
      for (std::size_t i = 0; i < want.size(); ++i) {
        const auto f = static_cast<std::int64_t>(i);
        want[i] = static_cast<float>(ref::silu(at(va, c.a, os, f)) * at(vb, c.b, os, f));
      }
      const double rtol = dtype == DType::f32 ? kRtol : half_rtol(dtype);
      EXPECT_TRUE(all_close(out.to_floats(), want, rtol, dtype == DType::f32 ? kAtol : 1e-3));
    }
  }
}

TEST(ops_fused, silu_mul_reads_strided_inputs) {
  std::mt19937 rng(12);
  std::vector<float> base_a = sgtest::random_floats(rng, 20, -3, 3);
  std::vector<float> base_b = sgtest::random_floats(rng, 40, -3, 3);
  const Tensor a = ops::transpose(make(base_a, {5, 4}), 0, 1);    // [4,5], strides (1,4)
  const Tensor b = ops::slice(make(base_b, {8, 5}), 0, 0, 8, 2);  // [4,5], every other row
  const Tensor out = ops::silu_mul(a, b);
  std::vector<float> want(20);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) {
      const double x = base_a[static_cast<std::size_t>(c * 4 + r)];
      const double y = base_b[static_cast<std::size_t>(2 * r * 5 + c)];
      want[static_cast<std::size_t>(r * 5 + c)] = static_cast<float>(ref::silu(x) * y);
    }
  }
  EXPECT_TRUE(all_close(out.to_floats(), want, kRtol, kAtol));
}

TEST(ops_fused, silu_mul_errors_name_the_operator_and_shapes) {
  const Tensor a = ops::full({2, 3}, 1.0);
  const std::string dt = sgtest::error_of([&] {
    (void)ops::silu_mul(a, ops::full({2, 3}, 1.0, DType::f16));
  });
  EXPECT_TRUE(sgtest::contains_all(dt, {"silu_mul", "'a'", "'b'", "f16", "same dtype"}));
  const std::string sh = sgtest::error_of([&] { (void)ops::silu_mul(a, ops::full({4}, 1.0)); });
  EXPECT_TRUE(sgtest::contains_all(sh, {"silu_mul", "[2,3]", "[4]"}));
  const std::string in = sgtest::error_of([&] {
    (void)ops::silu_mul(ops::full({2}, 1.0, DType::i64), ops::full({2}, 1.0, DType::i64));
  });
  EXPECT_TRUE(sgtest::contains_all(in, {"silu_mul", "i64", "expected f32, f16 or bf16"}));
}

// Every bit of `got` equals `want` (f16/bf16 values convert to f32 exactly).
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || !(got.shape() == want.shape())) {
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  }
  const auto g = got.to_floats();
  const auto w = want.to_floats();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(g[i]) != std::bit_cast<std::uint32_t>(w[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Half `i` of add_rms_norm's [2, ...] result, in the operands' shape.
Tensor half(const Tensor& out, std::int64_t i) {
  return ops::view(ops::slice(out, 0, i, i + 1),
                   sgtest::to_sym(sgtest::Dims(out.shape().begin() + 1, out.shape().end())));
}

// Last dims below, at and past the 8-lane blocks of the vectorized row code
// (7, 8, 33, 288), one row or many, and a prompt-like [5, 64].
const sgtest::Dims kNormShapes[] = {{7}, {3, 8}, {4, 33}, {2, 3, 288}, {1, 288}, {5, 64}};

TEST(ops_fused, add_rms_norm_matches_the_reference_and_add_then_rms_norm_bitwise) {
  std::mt19937 rng(31);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& shape : kNormShapes) {
      SCOPED_TRACE(std::string(sinkgraph::dtype_name(dtype)) + sgtest::str(shape));
      const auto n = ref::numel(shape);
      const Dims wshape = {shape.back()};
      std::vector<float> vx, vr, vw;
      const Tensor x = make(sgtest::random_floats(rng, n, -3, 3), shape, dtype, &vx);
      const Tensor r = make(sgtest::random_floats(rng, n, -3, 3), shape, dtype, &vr);
      const Tensor w =
          make(sgtest::random_floats(rng, shape.back(), 0.5F, 1.5F), wshape, dtype, &vw);
      const Tensor out = ops::add_rms_norm(x, r, w, 1e-5);
      Dims want_shape = {2};
      want_shape.insert(want_shape.end(), shape.begin(), shape.end());
      ASSERT_EQ(sgtest::dims_of(out), want_shape);
      ASSERT_EQ(out.dtype(), dtype);
      // Bitwise what the two operators store.
      const Tensor sum = ops::add(x, r);
      EXPECT_TRUE(same_bits(half(out, 0), sum));
      EXPECT_TRUE(same_bits(half(out, 1), ops::rms_norm(sum, w, 1e-5)));
      // And close to the reference in double.
      std::vector<float> want_sum(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < want_sum.size(); ++i) {
        want_sum[i] = static_cast<float>(double(vx[i]) + double(vr[i]));
      }
      const double rtol = dtype == DType::f32 ? kRtol : half_rtol(dtype);
      const double atol = dtype == DType::f32 ? kAtol : 1e-2;
      EXPECT_TRUE(all_close(half(out, 0).to_floats(), want_sum, rtol, atol));
      EXPECT_TRUE(
          all_close(half(out, 1).to_floats(), ref::rms_norm(want_sum, vw, 1e-5), rtol, atol));
    }
  }
}

TEST(ops_fused, add_rms_norm_reads_strided_operands_and_weight) {
  std::mt19937 rng(32);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = ops::transpose(make(sgtest::random_floats(rng, 33 * 4), {33, 4}, dtype), 0, 1);
    const Tensor r =
        ops::slice(make(sgtest::random_floats(rng, 8 * 33), {8, 33}, dtype), 0, 0, 8, 2);
    // Every other element: rms_norm's vectorized path needs a unit-stride weight.
    const Tensor w =
        ops::slice(make(sgtest::random_floats(rng, 66, 0.5F, 1.5F), {66}, dtype), 0, 0, 66, 2);
    const Tensor out = ops::add_rms_norm(x, r, w, 1e-6);
    const Tensor sum = ops::add(x, r);
    EXPECT_TRUE(same_bits(half(out, 0), sum));
    EXPECT_TRUE(same_bits(half(out, 1), ops::rms_norm(sum, w, 1e-6)));
    const Tensor wc = ops::contiguous(w);
    EXPECT_TRUE(
        same_bits(half(ops::add_rms_norm(x, r, wc, 1e-6), 1), ops::rms_norm(sum, wc, 1e-6)));
  }
}

TEST(ops_fused, add_rms_norm_errors_name_the_operator_and_shapes) {
  const Tensor x = ops::full({2, 3}, 1.0);
  const Tensor w = ops::full({3}, 1.0);
  const Tensor r43 = ops::full({4, 3}, 1.0);
  const Tensor h = ops::full({2, 3}, 1.0, DType::f16);
  const Tensor i = ops::full({2, 3}, 1.0, DType::i64);
  const Tensor wi = ops::full({3}, 1.0, DType::i64);
  const Tensor w4 = ops::full({4}, 1.0);
  const Tensor deep = ops::full({1, 1, 1, 1, 1, 3}, 1.0);
  // Host-side validation: no kernel runs.
  sinkgraph::current_stream().synchronize();
  const auto launches = sinkgraph::dispatch_counters().launches;
  const auto err = [](auto fn) { return sgtest::error_of(fn); };
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(x, r43, w, 1e-5); }),
                                   {"add_rms_norm", "'x'", "'r'", "[2,3]", "[4,3]", "same shape"}));
  // No broadcasting: r of [3] is refused too.
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(x, w, w, 1e-5); }),
                                   {"add_rms_norm", "[2,3]", "[3]", "no broadcasting"}));
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(x, h, w, 1e-5); }),
                                   {"add_rms_norm", "'x'", "'r'", "f16", "same dtype"}));
  EXPECT_TRUE(
      sgtest::contains_all(err([&] { (void)ops::add_rms_norm(i, i, wi, 1e-5); }),
                           {"add_rms_norm", "'x'", "i64", "[2,3]", "expected f32, f16 or bf16"}));
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(x, x, w4, 1e-5); }),
                                   {"add_rms_norm", "weight", "[4]", "[2,3]", "last dimension"}));
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(x, x, w, -1.0); }),
                                   {"add_rms_norm", "eps"}));
  EXPECT_TRUE(sgtest::contains_all(err([&] { (void)ops::add_rms_norm(deep, deep, w, 1e-5); }),
                                   {"add_rms_norm", "[1,1,1,1,1,3]", "1 to 5 dimensions"}));
  EXPECT_EQ(sinkgraph::dispatch_counters().launches, launches) << "a kernel was launched";
}

// The reference interpreter of Note [Fused elementwise programs], in double.
double run_program(const std::vector<std::int64_t>& code, const std::vector<double>& consts,
                   const std::vector<double>& in) {
  std::vector<double> st;
  for (const std::int64_t c : code) {
    const int op = static_cast<int>(c / 8), arg = static_cast<int>(c % 8);
    if (op == 1) {
      st.push_back(in[static_cast<std::size_t>(arg)]);
      continue;
    }
    if (op == 3) {
      const double b = st.back();
      st.pop_back();
      double& a = st.back();
      a = arg == 0 ? a + b : arg == 1 ? a - b : arg == 2 ? a * b : a / b;
      continue;
    }
    double& x = st.back();
    if (op == 4) x += consts[static_cast<std::size_t>(arg)];
    if (op == 5) x *= consts[static_cast<std::size_t>(arg)];
    if (op == 2 || op == 6) {
      const double relu6 = std::min(std::max(x + 3.0, 0.0), 6.0);
      const double fns[] = {-x,
                            std::exp(x),
                            std::sqrt(x),
                            1.0 / std::sqrt(x),
                            std::erf(x),
                            x > 0 ? x : 0,
                            ref::silu(x),
                            ref::gelu(x),
                            std::tanh(x),
                            1.0 / (1.0 + std::exp(-x)),
                            x * relu6 / 6.0,
                            relu6 / 6.0};
      x = fns[op == 6 ? 8 + arg : arg];
    }
  }
  return st.back();
}

TEST(ops_fused, fused_elementwise_matches_the_reference_interpreter) {
  // -((silu(x0 * x1 + 0.5) - x2) * 0.25 / rsqrt(relu(x1) + 0.5)), operands broadcast.
  const std::vector<std::int64_t> code = {8, 9, 26, 32, 22, 10, 25, 41, 9, 21, 32, 19, 27, 16};
  const std::vector<double> consts = {0.5, 0.25};
  const Dims shapes[][3] = {{{3, 4}, {4}, {3, 1}}, {{1}, {1}, {1}}, {{2, 1, 5}, {5}, {2, 3, 1}}};
  std::mt19937 rng(21);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& s : shapes) {
      std::vector<float> v[3];
      std::vector<Tensor> ts;
      for (int k = 0; k < 3; ++k) {
        const auto n = ref::numel(s[k]);
        ts.push_back(make(sgtest::random_floats(rng, n, -2, 2), s[k], dtype, &v[k]));
      }
      const Tensor out = ops::fused_elementwise(ts, code, consts);
      const Dims os = ref::broadcast(ref::broadcast(s[0], s[1]), s[2]);
      ASSERT_EQ(sgtest::dims_of(out), os);
      std::vector<float> want(static_cast<std::size_t>(ref::numel(os)));
      for (std::size_t i = 0; i < want.size(); ++i) {
        const auto f = static_cast<std::int64_t>(i);
        want[i] = static_cast<float>(run_program(
            code, consts, {at(v[0], s[0], os, f), at(v[1], s[1], os, f), at(v[2], s[2], os, f)}));
      }
      const double rtol = dtype == DType::f32 ? kRtol : half_rtol(dtype);
      EXPECT_TRUE(all_close(out.to_floats(), want, rtol, dtype == DType::f32 ? kAtol : 1e-2))
          << sinkgraph::dtype_name(dtype) << " " << sgtest::str(os);
    }
  }
}

TEST(ops_fused, fused_elementwise_runs_the_second_unary_opcode) {
  // tanh(x0) * hardsigmoid(x1) + hardswish(sigmoid(x0)): opcode 6 is unary 8..11.
  const std::vector<std::int64_t> code = {8, 48, 9, 51, 26, 8, 49, 50, 24};
  std::mt19937 rng(23);
  std::vector<float> v[2];
  const Tensor a = make(sgtest::random_floats(rng, 40, -5, 5), {8, 5}, DType::f32, &v[0]);
  const Tensor b = make(sgtest::random_floats(rng, 5, -5, 5), {5}, DType::f32, &v[1]);
  const Tensor out = ops::fused_elementwise({a, b}, code);
  std::vector<float> want(40);
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<float>(run_program(code, {}, {v[0][i], v[1][i % 5]}));
  }
  EXPECT_TRUE(all_close(out.to_floats(), want, kRtol, kAtol));
}

TEST(ops_fused, fused_elementwise_reads_strided_inputs_and_long_rows) {
  std::mt19937 rng(22);
  const std::vector<float> base = sgtest::random_floats(rng, 300 * 2, -2, 2);
  const Tensor x = ops::slice(make(base, {300, 2}), 1, 1, 2, 1);  // [300,1], stride 2
  const Tensor xt = ops::transpose(x, 0, 1);                      // [1,300]
  const std::vector<std::int64_t> code = {8, 17, 8, 26};          // exp(x) * x
  const Tensor out = ops::fused_elementwise({xt}, code);
  std::vector<float> want(300);
  for (std::size_t i = 0; i < 300; ++i) {
    const double v = base[2 * i + 1];
    want[i] = static_cast<float>(std::exp(v) * v);
  }
  EXPECT_TRUE(all_close(out.to_floats(), want, kRtol, kAtol));
}

TEST(ops_fused, fused_elementwise_rejects_bad_programs_clearly) {
  const Tensor a = ops::full({2, 3}, 1.0);
  const auto err = [&](std::vector<Tensor> in, std::vector<std::int64_t> code) {
    return sgtest::error_of([&] { (void)ops::fused_elementwise(in, code); });
  };
  EXPECT_TRUE(sgtest::contains_all(err({a}, {8, 24}),
                                   {"fused_elementwise", "instruction 1", "two operands"}));
  EXPECT_TRUE(sgtest::contains_all(err({a}, {8, 9}), {"instruction 1", "loads input 1 of 1"}));
  EXPECT_TRUE(sgtest::contains_all(err({a, a}, {8}), {"does not load every input"}));
  EXPECT_TRUE(sgtest::contains_all(err({a}, {8, 8}), {"leaves 2 values; expected 1"}));
  EXPECT_TRUE(sgtest::contains_all(err({a}, {8, 99}), {"fused_elementwise", "instruction 1 (99)"}));
  EXPECT_TRUE(sgtest::contains_all(err({a}, {8, 56}), {"instruction 1 (56)", "unknown opcode"}));
  EXPECT_TRUE(sgtest::contains_all(err({a}, {}), {"0 instructions; expected 1 to 18"}));
  EXPECT_TRUE(
      sgtest::contains_all(err({a, a, a, a, a, a}, {8}), {"6 input tensors; expected 1 to 5"}));
  EXPECT_TRUE(sgtest::contains_all(err({a, ops::full({4}, 1.0)}, {8, 9, 24}),
                                   {"fused_elementwise", "[2,3]", "[4]"}));
  EXPECT_TRUE(sgtest::contains_all(err({a, ops::full({2, 3}, 1.0, DType::f16)}, {8, 9, 24}),
                                   {"fused_elementwise", "inputs[1]", "same dtype"}));
}

}  // namespace

// silu_mul and fused_elementwise against naive references: plain loops in
// double over the values the tensors hold, sharing no code with the kernels.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/ops.h"
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
    if (op == 2) {
      const double fns[] = {-x,          std::exp(x),   std::sqrt(x), 1.0 / std::sqrt(x),
                            std::erf(x), x > 0 ? x : 0, ref::silu(x), ref::gelu(x)};
      x = fns[arg];
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

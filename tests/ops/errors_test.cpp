// Bad input raises sinkgraph::Error naming the operator and the shapes, and
// leaves the device usable: host-side validation before any launch, and
// sticky kernel errors raised at the next synchronize or host read.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ops/reference.h"
#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"

namespace {

using sinkgraph::DType;
using sinkgraph::Tensor;
namespace ops = sinkgraph::ops;
using sgtest::contains_all;
using sgtest::error_of;
using sgtest::make;

// A correct operator still computes the right thing and nothing is pending.
void expect_device_usable() {
  const Tensor a = make({1, 2, 3, 4}, {2, 2});
  const Tensor b = make({10, 20}, {2});
  EXPECT_EQ(ops::add(a, b).to_floats(), (std::vector<float>{11, 22, 13, 24}));
  EXPECT_NO_THROW(sinkgraph::current_stream().synchronize());
}

// `fn` must throw sinkgraph::Error mentioning every part, before launching
// any kernel (host-side validation); the device then still works.
template <typename Fn>
void expect_host_error(Fn&& fn, const std::vector<std::string>& parts) {
  sinkgraph::current_stream().synchronize();
  const auto launches = sinkgraph::dispatch_counters().launches;
  const std::string message = error_of(fn);
  EXPECT_TRUE(contains_all(message, parts));
  EXPECT_EQ(sinkgraph::dispatch_counters().launches, launches)
      << "a kernel was launched: " << message;
  expect_device_usable();
}

TEST(ops_errors, mismatched_shapes) {
  const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::empty({4, 3}, DType::f32);
  expect_host_error([&] { (void)ops::add(a, b); }, {"add", "[2,3]", "[4,3]"});
  expect_host_error([&] { (void)ops::mul(b, a); }, {"mul", "[4,3]", "[2,3]"});
  // matmul inner dimensions: a[2,3] @ b[4,3].
  expect_host_error([&] { (void)ops::matmul(a, b); }, {"matmul", "[2,3]", "[4,3]"});
  // matmul batch dims that neither match nor are 1.
  expect_host_error(
      [&] {
        (void)ops::matmul(Tensor::empty({3, 2, 4}, DType::f32),
                          Tensor::empty({2, 4, 5}, DType::f32));
      },
      {"matmul", "[3,2,4]", "[2,4,5]"});
  expect_host_error(
      [&] {
        (void)ops::linear(a, Tensor::empty({5, 4}, DType::f32));
      },
      {"linear", "[2,3]", "[5,4]"});
  expect_host_error([&] { (void)ops::rms_norm(a, Tensor::empty({4}, DType::f32), 1e-5); },
                    {"rms_norm", "[4]", "[2,3]"});
  expect_host_error(
      [&] {
        (void)ops::layer_norm(a, make({1, 1, 1}, {3}), make({0, 0}, {2}), 1e-5);
      },
      {"layer_norm", "bias", "[2]", "[2,3]"});
  expect_host_error(
      [&] {
        (void)ops::cat({a, Tensor::empty({2, 4}, DType::f32)}, 0);
      },
      {"cat", "[2,4]", "[2,3]"});
  expect_host_error([&] { (void)ops::copy_(a, Tensor::empty({4}, DType::f32)); },
                    {"copy_", "[4]", "[2,3]"});
  expect_host_error(
      [&] {
        (void)ops::rope(Tensor::empty({2, 2, 5}, DType::f32), 0);
      },
      {"rope", "[2,2,5]"});
  expect_host_error(
      [&] {
        (void)ops::attention(Tensor::empty({1, 3, 4}, DType::f32),
                             Tensor::empty({8, 2, 4}, DType::f32),
                             Tensor::empty({8, 2, 4}, DType::f32), 1);
      },
      {"attention", "3", "2"});
  expect_host_error(
      [&] {
        (void)ops::attention(Tensor::empty({1, 2, 4}, DType::f32),
                             Tensor::empty({8, 2, 4}, DType::f32),
                             Tensor::empty({8, 2, 3}, DType::f32), 1);
      },
      {"attention", "[8,2,4]", "[8,2,3]"});
  expect_host_error(
      [&] {
        (void)ops::index_copy_(Tensor::empty({8, 4}, DType::f32), 0,
                               Tensor::empty({1, 3}, DType::f32));
      },
      {"index_copy_", "[8,4]", "[1,3]"});
  // view of a non-contiguous tensor (reshape would copy).
  expect_host_error([&] { (void)ops::view(ops::transpose(a, 0, 1), {6}); },
                    {"view", "[3,2]", "reshape"});
  expect_host_error([&] { (void)ops::view(a, {4, 2}); }, {"view", "[4,2]", "[2,3]"});
  expect_host_error(
      [&] {
        (void)ops::argmax(Tensor::empty({3, 0}, DType::f32));
      },
      {"argmax", "[3,0]"});
  expect_host_error([&] { (void)ops::sample(a, 0.0, 1, 0); }, {"sample", "temperature", "argmax"});
  expect_host_error(
      [&] {
        (void)ops::sample(Tensor::empty({3, 0}, DType::f32), 1.0, 1, 0);
      },
      {"sample", "[3,0]"});
  expect_host_error(
      [&] {
        (void)ops::sample(Tensor::from_ints({1, 2}, {2}), 1.0, 1, 0);
      },
      {"sample", "logits", "i64"});
  expect_host_error(
      [&] {
        (void)ops::count_nonfinite(Tensor::from_ints({1, 2}, {2}));
      },
      {"count_nonfinite", "x", "i64"});
  const Tensor scalar = ops::full({}, 1.0);
  expect_host_error([&] { (void)ops::count_nonfinite(scalar); },
                    {"count_nonfinite", "at least 1 dimension"});
}

TEST(ops_errors, wrong_dtype) {
  const Tensor f = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor i = Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_host_error([&] { (void)ops::add(f, i); }, {"add", "f32", "i64", "[2,3]"});
  expect_host_error(
      [&] {
        (void)ops::silu(Tensor::from_ints({1, 2, 3}, {3}));
      },
      {"silu", "i64", "[3]"});
  expect_host_error([&] { (void)ops::div(i, i); }, {"div", "i64"});
  expect_host_error(
      [&] {
        (void)ops::matmul(i, Tensor::from_ints({1, 2, 3}, {3, 1}));
      },
      {"matmul", "i64"});
  expect_host_error(
      [&] {
        (void)ops::matmul(f, make({1, 2, 3}, {3, 1}, DType::f16));
      },
      {"matmul", "f32", "f16"});
  expect_host_error(
      [&] {
        (void)ops::embedding(f, make({0, 1}, {2}));
      },
      {"embedding", "ids", "f32"});
  expect_host_error([&] { (void)ops::softmax(i); }, {"softmax", "i64"});
  expect_host_error(
      [&] {
        (void)ops::index_copy_(f, 0, make({1, 2, 3}, {1, 3}, DType::bf16));
      },
      {"index_copy_", "f32", "bf16"});
  expect_host_error([&] { (void)ops::arange(3, DType::boolean); }, {"arange", "bool"});
}

TEST(ops_errors, unavailable_device) {
  if (sinkgraph::device_available(sinkgraph::DeviceType::cuda)) {
    GTEST_SKIP() << "a CUDA device is available";
  }
  const std::string message =
      error_of([] { (void)sinkgraph::get_device(sinkgraph::DeviceType::cuda); });
  EXPECT_TRUE(contains_all(message, {"cuda", "not available"}));
  EXPECT_THROW((void)sinkgraph::get_device(sinkgraph::DeviceType::cpu, 1), sinkgraph::Error);
  expect_device_usable();
}

TEST(ops_errors, negative_sizes) {
  expect_host_error([] { (void)Tensor::empty({-1, 2}, DType::f32); }, {"empty", "-1", "[-1,2]"});
  expect_host_error([] { (void)ops::full({3, -4}, 1.0); }, {"full", "-4"});
  expect_host_error([] { (void)ops::arange(-2); }, {"arange", "-2"});
  const Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_host_error([&] { (void)ops::view(x, {-2, -3}); }, {"view", "-2"});
  expect_host_error([&] { (void)ops::view(x, {-1, -1}); }, {"view", "-1"});
  expect_host_error([&] { (void)ops::reshape(x, {3, -5}); }, {"view", "-5"});
  expect_host_error([&] { (void)ops::narrow(x, 1, 1, -1); }, {"slice", "[2,3]"});
}

TEST(ops_errors, index_out_of_range_on_the_host) {
  const Tensor x = make({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  expect_host_error([&] { (void)ops::slice(x, 1, 2, 9); }, {"slice", "9", "[3,4]"});
  expect_host_error([&] { (void)ops::slice(x, 0, 3, 2); }, {"slice", "[3,4]"});
  expect_host_error([&] { (void)ops::slice(x, 2, 0, 1); }, {"slice", "2"});
  expect_host_error([&] { (void)ops::slice(x, 0, 0, 1, 0); }, {"slice", "step"});
  expect_host_error([&] { (void)ops::narrow(x, 0, 2, 2); }, {"slice", "[3,4]"});
  expect_host_error([&] { (void)ops::transpose(x, 0, 5); }, {"transpose", "5", "rank 2"});
  expect_host_error([&] { (void)ops::transpose(x, -3, 0); }, {"transpose", "-3"});
  expect_host_error([&] { (void)ops::permute(x, {0, 0}); }, {"permute", "twice"});
  expect_host_error([&] { (void)ops::permute(x, {1, 0, 2}); }, {"permute", "[3,4]"});
  expect_host_error([&] { (void)ops::cat({x, x}, 2); }, {"cat", "2"});
  expect_host_error(
      [&] {
        (void)ops::index_copy_(x, -1, make({0, 0, 0, 0}, {1, 4}));
      },
      {"index_copy_", "-1"});
  // More source rows than the destination has: known on the host.
  expect_host_error(
      [&] {
        (void)ops::index_copy_(make({0, 0}, {2, 1}), 0, make({1, 2, 3}, {3, 1}));
      },
      {"index_copy_", "3", "2"});
}

// `fn` launches a kernel that fails on the device: the call returns, the
// error is raised by `raise` (a host read or synchronize), names the
// operator, is raised once, and the stream works afterwards.
template <typename Fn, typename Raise>
void expect_sticky_error(Fn&& fn, Raise&& raise, const std::vector<std::string>& parts) {
  sinkgraph::current_stream().synchronize();
  Tensor out;
  ASSERT_NO_THROW(out = fn());
  const std::string message = error_of([&] { raise(out); });
  EXPECT_TRUE(contains_all(message, parts));
  EXPECT_NO_THROW(sinkgraph::current_stream().synchronize())
      << "the error must be raised only once";
  expect_device_usable();
}

TEST(ops_errors, embedding_id_out_of_range_is_sticky) {
  const Tensor w = make({0, 1, 2, 3, 4, 5}, {3, 2});
  for (const DType idt : {DType::i64, DType::i32}) {
    const Tensor bad = Tensor::from_ints({0, 3, 1}, {3}, idt);
    expect_sticky_error([&] { return ops::embedding(w, bad); },
                        [](const Tensor& t) { (void)t.to_floats(); },
                        {"embedding", "out of range", "3"});
    const Tensor negative = Tensor::from_ints({-1}, {1}, idt);
    expect_sticky_error([&] { return ops::embedding(w, negative); },
                        [](const Tensor&) { sinkgraph::current_stream().synchronize(); },
                        {"embedding", "out of range", "-1"});
  }
  // The same table and valid ids still work.
  EXPECT_EQ(ops::embedding(w, Tensor::from_ints({2, 0}, {2})).to_floats(),
            (std::vector<float>{4, 5, 0, 1}));
}

TEST(ops_errors, index_copy_past_the_end_is_sticky) {
  const Tensor dst = ops::zeros({4, 2});
  const Tensor src = make({1, 2, 3, 4}, {2, 2});
  expect_sticky_error([&] { return ops::index_copy_(dst, 3, src); },
                      [](const Tensor&) { sinkgraph::current_stream().synchronize(); },
                      {"index_copy_", "out of range"});
  // Nothing was written, and a valid write lands.
  EXPECT_EQ(dst.to_floats(), std::vector<float>(8, 0.0F));
  ops::index_copy_(dst, 2, src);
  EXPECT_EQ(dst.to_floats(), (std::vector<float>{0, 0, 0, 0, 1, 2, 3, 4}));
}

TEST(ops_errors, attention_seq_len_beyond_cache_is_sticky) {
  const Tensor q = ops::full({1, 2, 4}, 0.5);
  const Tensor k = ops::full({6, 1, 4}, 1.0);
  const Tensor v = ops::full({6, 1, 4}, 2.0);
  expect_sticky_error([&] { return ops::attention(q, k, v, 7); },
                      [](const Tensor& t) { (void)t.to_floats(); },
                      {"attention", "seq_len", "7", "6"});
  EXPECT_EQ(ops::attention(q, k, v, 6).to_floats(), std::vector<float>(8, 2.0F));
}

TEST(ops_errors, sticky_error_reported_by_a_later_read) {
  // The failing kernel's own output is never read: any later host read on the
  // stream raises the error, and the value read after that is correct.
  const Tensor w = make({0, 1, 2, 3}, {2, 2});
  (void)ops::embedding(w, Tensor::from_ints({5}, {1}));
  const Tensor fine = ops::add_scalar(make({1, 2}, {2}), 1.0);
  const std::string message = error_of([&] { (void)fine.to_floats(); });
  EXPECT_TRUE(contains_all(message, {"embedding", "out of range"}));
  EXPECT_EQ(fine.to_floats(), (std::vector<float>{2, 3}));
  expect_device_usable();
}

}  // namespace

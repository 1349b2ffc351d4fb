// The operator registry: one definition per operator, kernels registered per
// backend, traits read by the passes (Note [Operator traits]).
#include <gtest/gtest.h>

#include "sinkgraph/error.h"
#include "sinkgraph/op_registry.h"

namespace {

using sinkgraph::DeviceType;
using sinkgraph::OpRegistry;
using sinkgraph::Pointwise;

TEST(ops_registry, every_operator_that_runs_a_kernel_has_a_cpu_kernel) {
  auto& r = OpRegistry::instance();
  for (const auto& name : r.names()) {
    const auto& op = r.get(name);
    if (op.schema.is_view || op.composite != nullptr) continue;
    EXPECT_NE(op.kernels[static_cast<std::size_t>(DeviceType::cpu)], nullptr) << name;
  }
}

TEST(ops_registry, set_kernel_refuses_unknown_views_and_second_kernels) {
  auto& r = OpRegistry::instance();
  const auto& add = r.get("add");
  const auto kernel = add.kernels[static_cast<std::size_t>(DeviceType::cpu)];
  EXPECT_THROW(r.set_kernel("no_such_op", DeviceType::cpu, kernel), sinkgraph::Error);
  EXPECT_THROW(r.set_kernel("view", DeviceType::cpu, kernel), sinkgraph::Error);
  EXPECT_THROW(r.set_kernel("cat", DeviceType::cpu, kernel), sinkgraph::Error);
  try {
    r.set_kernel("add", DeviceType::cpu, kernel);
    ADD_FAILURE() << "a second CPU kernel for add was accepted";
  } catch (const sinkgraph::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already has a cpu kernel"), std::string::npos)
        << e.what();
  }
}

TEST(ops_registry, pointwise_traits_name_a_fused_function_and_take_no_views) {
  auto& r = OpRegistry::instance();
  int pointwise = 0;
  for (const auto& name : r.names()) {
    const auto& op = r.get(name);
    if (op.traits.pointwise == Pointwise::none) continue;
    ++pointwise;
    EXPECT_FALSE(op.schema.is_view) << name;
    EXPECT_LT(op.schema.alias_of, 0) << name;
    const bool scalar_form = op.traits.pointwise == Pointwise::add_scalar ||
                             op.traits.pointwise == Pointwise::mul_scalar;
    EXPECT_EQ(scalar_form, op.traits.pointwise_fn < 0) << name;
  }
  // add sub mul div, the two scalar forms, and 14 unary functions.
  EXPECT_EQ(pointwise, 20);
}

}  // namespace

// Shapes, strides, broadcasting and dimension wrapping.
#include "sinkgraph/shape.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"

namespace {

using sinkgraph::Shape;
using sinkgraph::Strides;
using sinkgraph::SymInt;
using sinkgraph::SymShape;

// Runs `fn`, expects a sinkgraph::Error and returns its message.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const sinkgraph::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a sinkgraph::Error";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(core_shape, Numel) {
  EXPECT_EQ(sinkgraph::numel(Shape{2, 3, 4}), 24);
  EXPECT_EQ(sinkgraph::numel(Shape{}), 1);  // a scalar has one element
  EXPECT_EQ(sinkgraph::numel(Shape{2, 0, 3}), 0);
  EXPECT_EQ(sinkgraph::numel(Shape{7}), 7);

  const SymInt s0 = SymInt::symbol("s0");
  const SymInt n = sinkgraph::sym_numel(SymShape{s0, 4, 2});
  EXPECT_TRUE(n == 8 * s0);
  EXPECT_EQ(n.eval({{"s0", 3}}), 24);
  EXPECT_EQ(sinkgraph::sym_numel(SymShape{2, 5}).value(), 10);
}

TEST(core_shape, ContiguousStrides) {
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{}), Strides{});
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{5}), Strides{1});
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{5, 1, 2}), (Strides{2, 2, 1}));
  // Size-0 dimensions count as 1 so that strides stay meaningful.
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{2, 0, 3}), (Strides{3, 3, 1}));
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{0}), Strides{1});
  EXPECT_EQ(sinkgraph::contiguous_strides(Shape{0, 4}), (Strides{4, 1}));
}

TEST(core_shape, ShapeStrAndConversions) {
  EXPECT_EQ(sinkgraph::shape_str(Shape{2, 3}), "[2,3]");
  EXPECT_EQ(sinkgraph::shape_str(Shape{}), "[]");
  const SymInt s0 = SymInt::symbol("s0");
  EXPECT_EQ(sinkgraph::shape_str(SymShape{s0, 64}), "[s0,64]");
  EXPECT_EQ(sinkgraph::shape_str(SymShape{2 * s0 + 1}), "[2*s0+1]");

  const SymShape sym = sinkgraph::to_sym(Shape{4, 5});
  ASSERT_EQ(sym.size(), 2);
  EXPECT_FALSE(sym[0].is_symbolic());
  EXPECT_EQ(sinkgraph::to_concrete(sym), (Shape{4, 5}));
  EXPECT_THROW((void)sinkgraph::to_concrete(SymShape{3, s0}), sinkgraph::Error);
}

TEST(core_shape, BroadcastShapes) {
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{2, 1, 4}, SymShape{3, 1}, "add"),
            (SymShape{2, 3, 4}));
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{}, SymShape{3}, "add"), SymShape{3});
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{5}, SymShape{}, "add"), SymShape{5});
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{0, 1}, SymShape{1, 3}, "add"), (SymShape{0, 3}));

  // Symbolic dimensions: equal symbols match, 1 broadcasts against a symbol.
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{s0, 1, 4}, SymShape{3, 1}, "mul"),
            (SymShape{s0, 3, 4}));
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{s0, 8}, SymShape{s0, 8}, "mul"),
            (SymShape{s0, 8}));
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{1}, SymShape{s0}, "mul"), SymShape{s0});
  EXPECT_EQ(sinkgraph::broadcast_shapes(SymShape{2 * s0, 1}, SymShape{s0 + s0, s1}, "mul"),
            (SymShape{2 * s0, s1}));
}

TEST(core_shape, BroadcastErrorsNameTheOperatorAndShapes) {
  const std::string concrete = error_of([] {
    (void)sinkgraph::broadcast_shapes(SymShape{2, 3}, SymShape{4, 3}, "my_add");
  });
  EXPECT_TRUE(contains(concrete, "my_add")) << concrete;
  EXPECT_TRUE(contains(concrete, "[2,3]")) << concrete;
  EXPECT_TRUE(contains(concrete, "[4,3]")) << concrete;

  // Two different symbols cannot be proven equal: an error, never a guess.
  const SymInt s0 = SymInt::symbol("s0");
  const SymInt s1 = SymInt::symbol("s1");
  const std::string symbolic = error_of([&] {
    (void)sinkgraph::broadcast_shapes(SymShape{s0, 4}, SymShape{s1, 4}, "my_mul");
  });
  EXPECT_TRUE(contains(symbolic, "my_mul")) << symbolic;
  EXPECT_TRUE(contains(symbolic, "s0")) << symbolic;
  EXPECT_TRUE(contains(symbolic, "s1")) << symbolic;
  EXPECT_THROW((void)sinkgraph::broadcast_shapes(SymShape{s0}, SymShape{3}, "my_mul"),
               sinkgraph::Error);
}

TEST(core_shape, WrapDim) {
  EXPECT_EQ(sinkgraph::wrap_dim(0, 3, "softmax"), 0);
  EXPECT_EQ(sinkgraph::wrap_dim(2, 3, "softmax"), 2);
  EXPECT_EQ(sinkgraph::wrap_dim(-1, 3, "softmax"), 2);
  EXPECT_EQ(sinkgraph::wrap_dim(-3, 3, "softmax"), 0);
  // A scalar accepts 0 and -1 (as in PyTorch).
  EXPECT_EQ(sinkgraph::wrap_dim(0, 0, "sum"), 0);
  EXPECT_EQ(sinkgraph::wrap_dim(-1, 0, "sum"), 0);

  const std::string high = error_of([] { (void)sinkgraph::wrap_dim(3, 3, "softmax"); });
  EXPECT_TRUE(contains(high, "softmax")) << high;
  EXPECT_TRUE(contains(high, "3")) << high;
  const std::string low = error_of([] { (void)sinkgraph::wrap_dim(-4, 3, "transpose"); });
  EXPECT_TRUE(contains(low, "transpose")) << low;
  EXPECT_TRUE(contains(low, "-4")) << low;
  EXPECT_THROW((void)sinkgraph::wrap_dim(1, 0, "sum"), sinkgraph::Error);
  EXPECT_THROW((void)sinkgraph::wrap_dim(-2, 0, "sum"), sinkgraph::Error);
}

TEST(core_shape, DimsHoldAtMostKMaxDims) {
  Shape shape;
  for (int i = 0; i < sinkgraph::kMaxDims; ++i) shape.push_back(i + 1);
  EXPECT_EQ(shape.size(), sinkgraph::kMaxDims);
  const std::string message = error_of([&] { shape.push_back(7); });
  EXPECT_TRUE(contains(message, std::to_string(sinkgraph::kMaxDims))) << message;
  EXPECT_EQ(shape.size(), sinkgraph::kMaxDims) << "a failed push_back changed the shape";
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7}), sinkgraph::Error);
  EXPECT_THROW((void)Shape::filled(sinkgraph::kMaxDims + 1, 1), sinkgraph::Error);
  EXPECT_THROW(shape.insert(0, 9), sinkgraph::Error);
}

TEST(core_shape, DimsEditing) {
  Shape shape{2, 3};
  shape.insert(0, 1);
  EXPECT_EQ(shape, (Shape{1, 2, 3}));
  shape.insert(3, 4);
  EXPECT_EQ(shape, (Shape{1, 2, 3, 4}));
  shape.insert(2, 9);
  EXPECT_EQ(shape, (Shape{1, 2, 9, 3, 4}));
  shape.erase(2);
  EXPECT_EQ(shape, (Shape{1, 2, 3, 4}));
  shape.erase(0);
  EXPECT_EQ(shape, (Shape{2, 3, 4}));
  EXPECT_EQ(shape.back(), 4);
  EXPECT_FALSE(shape.empty());
  EXPECT_TRUE(Shape{}.empty());
  EXPECT_EQ(Shape::filled(3, 7), (Shape{7, 7, 7}));
  EXPECT_FALSE(shape == (Shape{2, 3}));
}

}  // namespace

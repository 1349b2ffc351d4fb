// In-place writes (copy_, index_copy_, fill_) and tensor factories.
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kCopy[] = "copy_";
inline constexpr char kIndexCopy[] = "index_copy_";
inline constexpr char kIndexCopyRows[] = "index_copy_rows_";
inline constexpr char kFill[] = "fill_";
inline constexpr char kFull[] = "full";
inline constexpr char kArange[] = "arange";

namespace {

TensorMeta copy_shape(const ShapeArgs& args) {
  const TensorMeta& dst = args.tensors[0];
  const TensorMeta& src = args.tensors[1];
  const SymShape b = broadcast_shapes(dst.shape, src.shape, kCopy);
  SG_CHECK(b == dst.shape, "copy_: src", shape_str(src.shape), " does not broadcast to dst",
           shape_str(dst.shape));
  return dst;
}

TensorMeta index_copy_shape(const ShapeArgs& args) {
  const TensorMeta& dst = args.tensors[0];
  const TensorMeta& src = args.tensors[1];
  check_same_dtype(dst, src, kIndexCopy, "dst", "src");
  SG_CHECK(!dst.shape.empty() && dst.shape.size() == src.shape.size(), "index_copy_: dst",
           shape_str(dst.shape), " and src", shape_str(src.shape), " must have the same rank >= 1");
  for (int d = 1; d < dst.shape.size(); ++d) {
    SG_CHECK(dst.shape[d] == src.shape[d], "index_copy_: dst", shape_str(dst.shape), " and src",
             shape_str(src.shape), " differ in dimension ", d, " (only dimension 0 may differ)");
  }
  const auto rows = src.shape[0].maybe_value();
  const auto cap = dst.shape[0].maybe_value();
  SG_CHECK(!rows || !cap || *rows <= *cap, "index_copy_: src has ", *rows, " rows but dst only ",
           *cap);
  const auto index = args.sym(0).maybe_value();
  SG_CHECK(!index || *index >= 0, "index_copy_: index ", *index, " is negative");
  return dst;
}

TensorMeta index_copy_rows_shape(const ShapeArgs& args) {
  const TensorMeta& dst = args.tensors[0];
  const TensorMeta& index = args.tensors[1];
  const TensorMeta& src = args.tensors[2];
  check_same_dtype(dst, src, kIndexCopyRows, "dst", "src");
  SG_CHECK(dst.shape.size() >= 2 && src.shape.size() + 1 == dst.shape.size(),
           "index_copy_rows_: dst", shape_str(dst.shape), " must be [B, S, ...] and src",
           shape_str(src.shape), " [B, ...], one dimension fewer");
  SG_CHECK(dst.shape[0] == src.shape[0], "index_copy_rows_: dst", shape_str(dst.shape), " and src",
           shape_str(src.shape), " must have the same rows B");
  for (int d = 1; d < src.shape.size(); ++d) {
    SG_CHECK(dst.shape[d + 1] == src.shape[d], "index_copy_rows_: a row of src",
             shape_str(src.shape), " does not fit a position of dst", shape_str(dst.shape));
  }
  SG_CHECK(index.dtype == DType::i64 && index.shape.size() == 1 && index.shape[0] == dst.shape[0],
           "index_copy_rows_: index", shape_str(index.shape), " has dtype ",
           dtype_name(index.dtype), "; expected i64 [B], one position per row of dst",
           shape_str(dst.shape));
  return dst;
}

TensorMeta fill_shape(const ShapeArgs& args) { return args.tensors[0]; }

TensorMeta full_shape(const ShapeArgs& args) {
  const auto& dims = std::get<std::vector<SymInt>>(args.scalars[0]);
  SymShape shape;
  for (const auto& d : dims) {
    SG_CHECK(!d.maybe_value() || *d.maybe_value() >= 0, "full: size ", d.str(), " is negative");
    shape.push_back(d);
  }
  return {std::get<DType>(args.scalars[2]), shape, DeviceType::cpu};
}

TensorMeta arange_shape(const ShapeArgs& args) {
  const SymInt& n = args.sym(0);
  SG_CHECK(!n.maybe_value() || *n.maybe_value() >= 0, "arange: n must be >= 0, got ", n.str());
  const DType dtype = std::get<DType>(args.scalars[1]);
  SG_CHECK(dtype != DType::boolean, "arange: dtype bool is not supported");
  return {dtype, SymShape{n}, DeviceType::cpu};
}

}  // namespace

void register_memory_ops(OpRegistry& r) {
  OpDef copy = make_op(kCopy, {{"dst", ArgKind::tensor, false, true}, {"src"}}, copy_shape);
  copy.schema.alias_of = 0;
  r.add(std::move(copy));
  OpDef index_copy = make_op(kIndexCopy,
                             {{"dst", ArgKind::tensor, false, true},
                              {"index", ArgKind::integer, /*updatable=*/true},
                              {"src"}},
                             index_copy_shape);
  index_copy.schema.alias_of = 0;
  r.add(std::move(index_copy));
  OpDef index_copy_rows =
      make_op(kIndexCopyRows, {{"dst", ArgKind::tensor, false, true}, {"index"}, {"src"}},
              index_copy_rows_shape);
  index_copy_rows.schema.alias_of = 0;
  r.add(std::move(index_copy_rows));
  OpDef fill =
      make_op(kFill, {{"dst", ArgKind::tensor, false, true}, {"value", ArgKind::real}}, fill_shape);
  fill.schema.alias_of = 0;
  r.add(std::move(fill));
  r.add(make_op(kFull,
                {{"shape", ArgKind::int_list}, {"value", ArgKind::real}, {"dtype", ArgKind::dtype}},
                full_shape));
  r.add(make_op(kArange, {{"n", ArgKind::integer}, {"dtype", ArgKind::dtype}}, arange_shape));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor copy_(const Tensor& dst, const Tensor& src) {
  return call(op_def<detail::kCopy>(), {&dst, &src});
}

Tensor index_copy_(const Tensor& dst, const SymInt& index, const Tensor& src) {
  return call(op_def<detail::kIndexCopy>(), {&dst, &src}, {index});
}

Tensor index_copy_rows_(const Tensor& dst, const Tensor& index, const Tensor& src) {
  return call(op_def<detail::kIndexCopyRows>(), {&dst, &index, &src});
}

Tensor fill_(const Tensor& dst, double value) {
  return call(op_def<detail::kFill>(), {&dst}, {value});
}

Tensor full(const SymShape& shape, double value, DType dtype) {
  return call(op_def<detail::kFull>(), {},
              {std::vector<SymInt>(shape.begin(), shape.end()), value, dtype});
}

Tensor zeros(const SymShape& shape, DType dtype) { return full(shape, 0.0, dtype); }

Tensor arange(const SymInt& n, DType dtype) {
  return call(op_def<detail::kArange>(), {}, {n, dtype});
}

}  // namespace ops
}  // namespace sinkgraph

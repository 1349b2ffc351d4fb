// Collectives: all_reduce (sum) and all_gather (Note [Collectives] in
// sinkgraph/collectives.h). The group is a fixed integer argument (part of a
// graph's key); the data move in the process's collective backend.
#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kAllReduce[] = "all_reduce";
inline constexpr char kAllGather[] = "all_gather";

namespace {

void check_collective_input(const ShapeArgs& args, const char* op) {
  const TensorMeta& x = args.tensors[0];
  SG_CHECK(x.dtype == DType::f32, op, ": x has dtype ", dtype_name(x.dtype),
           "; collectives take f32");
  SG_CHECK(args.integer(0) >= 0, op, ": group ", args.integer(0), " is negative");
}

TensorMeta all_reduce_shape(const ShapeArgs& args) {
  check_collective_input(args, kAllReduce);
  return args.tensors[0];
}

// Rank r's x becomes rows [r * n, (r + 1) * n) of dimension 0, as
// torch.distributed.all_gather_into_tensor.
TensorMeta all_gather_shape(const ShapeArgs& args) {
  check_collective_input(args, kAllGather);
  const TensorMeta& x = args.tensors[0];
  const std::int64_t size = args.integer(1);
  SG_CHECK(size >= 1, "all_gather: group size must be >= 1, got ", size);
  SG_CHECK(!x.shape.empty(), "all_gather: x must have at least 1 dimension");
  TensorMeta out = x;
  out.shape[0] = x.shape[0] * SymInt(size);
  return out;
}

}  // namespace

void register_collective_ops(OpRegistry& r) {
  const OpTraits collective{.collective = true};
  r.add(make_op(kAllReduce, {{"x"}, {"group", ArgKind::integer}}, all_reduce_shape, collective));
  r.add(make_op(kAllGather, {{"x"}, {"group", ArgKind::integer}, {"size", ArgKind::integer}},
                all_gather_shape, collective));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor all_reduce(const Tensor& x, std::int64_t group) {
  return call(op_def<detail::kAllReduce>(), {&x}, {SymInt(group)});
}

Tensor all_gather(const Tensor& x, std::int64_t group, std::int64_t size) {
  return call(op_def<detail::kAllGather>(), {&x}, {SymInt(group), SymInt(size)});
}

}  // namespace ops
}  // namespace sinkgraph

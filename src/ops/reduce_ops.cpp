// Reductions: mean over a list of dimensions (torch.mean(x, dims, keepdim)).
#include <cstdint>

#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kMean[] = "mean";

namespace {

// Bit d set when x's dimension d is reduced. An empty list reduces every
// dimension, as in PyTorch; a 0-dimensional x accepts dims 0 and -1.
std::uint64_t reduced_mask(const TensorMeta& x, const std::vector<SymInt>& dims) {
  const int rank = x.shape.size();
  if (dims.empty()) return rank == 0 ? 0 : (std::uint64_t{1} << rank) - 1;
  std::uint64_t mask = 0;
  for (const SymInt& d : dims) {
    const auto v = d.maybe_value();
    SG_CHECK(v.has_value(), "mean: dims must be concrete integers, got ", d.str());
    const int dim = wrap_dim(*v, rank == 0 ? 1 : rank, kMean);
    SG_CHECK(!((mask >> dim) & 1U), "mean: dim ", dim, " appears multiple times in dims (x",
             shape_str(x.shape), ")");
    mask |= std::uint64_t{1} << dim;
  }
  return rank == 0 ? 0 : mask;
}

TensorMeta mean_shape(const ShapeArgs& args) {
  const TensorMeta& x = args.tensors[0];
  SG_CHECK(is_floating(x.dtype), "mean: x has dtype ", dtype_name(x.dtype), " (shape ",
           shape_str(x.shape), "); mean needs a floating dtype (f32, f16 or bf16)");
  const std::uint64_t mask = reduced_mask(x, std::get<std::vector<SymInt>>(args.scalars[0]));
  const bool keepdim = std::get<bool>(args.scalars[1]);
  TensorMeta out = x;
  out.shape = SymShape{};
  for (int d = 0; d < x.shape.size(); ++d) {
    if (!((mask >> d) & 1U)) {
      out.shape.push_back(x.shape[d]);
    } else if (keepdim) {
      out.shape.push_back(SymInt(1));
    }
  }
  return out;
}

// Note [Kernel scalars]: the kernel needs the dims, which the schema holds as a list.
int mean_scalars(const ShapeArgs& args, ScalarArg* slots) {
  slots[0].i = static_cast<std::int64_t>(
      reduced_mask(args.tensors[0], std::get<std::vector<SymInt>>(args.scalars[0])));
  slots[1].i = std::get<bool>(args.scalars[1]) ? 1 : 0;
  return 2;
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  OpDef mean = make_op(kMean, {{"x"}, {"dims", ArgKind::int_list}, {"keepdim", ArgKind::boolean}},
                       mean_shape);
  mean.kernel_scalars = mean_scalars;
  r.add(std::move(mean));
}

}  // namespace detail

namespace ops {

Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  return detail::call(detail::op_def<detail::kMean>(), {&x},
                      {std::vector<SymInt>(dims.begin(), dims.end()), keepdim});
}

}  // namespace ops
}  // namespace sinkgraph

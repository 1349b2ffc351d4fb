// Views (slice, view, transpose, permute, expand), reshape, contiguous and cat.
#include <numeric>

#include "dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph {
namespace detail {

inline constexpr char kSlice[] = "slice";
inline constexpr char kView[] = "view";
inline constexpr char kTranspose[] = "transpose";
inline constexpr char kPermute[] = "permute";
inline constexpr char kExpand[] = "expand";
inline constexpr char kSqueeze[] = "squeeze";
inline constexpr char kUnsqueeze[] = "unsqueeze";
inline constexpr char kContiguous[] = "contiguous";
inline constexpr char kCat[] = "cat";

namespace {

const std::vector<SymInt>& int_list(const ShapeArgs& args, int i) {
  return std::get<std::vector<SymInt>>(args.scalars[i]);
}

// slice(x, dim, start, end, step): negative start/end count from the end.
struct SliceBounds {
  int dim = 0;
  SymInt start, length;
  std::int64_t step = 1;
};
SliceBounds slice_bounds(const TensorMeta& x, const ShapeArgs& args) {
  const int dim = wrap_dim(args.integer(0), x.shape.size(), kSlice);
  SG_CHECK(!x.shape.empty(), "slice: cannot slice a 0-dimensional tensor");
  const SymInt& size = x.shape[dim];
  SymInt start = args.sym(1);
  SymInt end = args.sym(2);
  const std::int64_t step = args.integer(3);
  SG_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
  if (auto s = start.maybe_value(); s && *s < 0 && size.maybe_value())
    start = *s + *size.maybe_value();
  if (auto e = end.maybe_value(); e && *e < 0 && size.maybe_value()) end = *e + *size.maybe_value();
  if (start.maybe_value() && end.maybe_value() && size.maybe_value()) {
    const std::int64_t s = *start.maybe_value(), e = *end.maybe_value(), n = *size.maybe_value();
    SG_CHECK(s >= 0 && s <= e && e <= n, "slice: range [", args.sym(1).str(), ", ",
             args.sym(2).str(), ") is out of bounds for dimension ", dim, " of size ", n, " (x",
             shape_str(x.shape), "); expected 0 <= start <= end <= ", n);
  }
  SymInt length = end - start;
  if (step > 1) length = floordiv(length + SymInt(step - 1), SymInt(step));
  return {dim, start, length, step};
}

TensorMeta slice_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  const SliceBounds b = slice_bounds(out, args);
  out.shape[b.dim] = b.length;
  return out;
}

ViewResult slice_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                      const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  const SliceBounds b = slice_bounds(meta, args);
  ViewResult v{shape, strides, offset};
  v.shape[b.dim] = b.length.value();
  v.strides[b.dim] = strides[b.dim] * b.step;
  v.offset = offset + b.start.value() * strides[b.dim];
  return v;
}

SymShape resolve_view_shape(const TensorMeta& x, const std::vector<SymInt>& requested) {
  SymShape out;
  int infer = -1;
  SymInt known = 1;
  for (std::size_t i = 0; i < requested.size(); ++i) {
    const SymInt& d = requested[i];
    if (d == SymInt(-1)) {
      SG_CHECK(infer < 0, "view: only one dimension may be -1 in ",
               shape_str(SymShape(std::span(requested))));
      infer = static_cast<int>(i);
      out.push_back(SymInt(1));
      continue;
    }
    SG_CHECK(!d.maybe_value() || *d.maybe_value() >= 0, "view: size ", d.str(),
             " is negative; expected sizes >= 0 or a single -1");
    known = known * d;
    out.push_back(d);
  }
  const SymInt total = sym_numel(x.shape);
  if (infer >= 0) {
    SG_CHECK(!(known == SymInt(0)), "view: cannot infer -1 with a zero-sized dimension in ",
             shape_str(out));
    out[infer] = floordiv(total, known);
  }
  SG_CHECK(sym_numel(out) == total, "view: shape ", shape_str(SymShape(std::span(requested))),
           " is invalid for x", shape_str(x.shape), " of ", total.str(), " elements");
  return out;
}

TensorMeta view_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  out.shape = resolve_view_shape(args.tensors[0], int_list(args, 0));
  return out;
}

ViewResult view_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                     const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  std::int64_t expected = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    SG_CHECK(shape[i] == 1 || strides[i] == expected, "view: x", shape_str(shape),
             " is not contiguous (strides ", shape_str(strides), "); use reshape, which copies");
    expected *= shape[i];
  }
  const Shape out = to_concrete(resolve_view_shape(meta, int_list(args, 0)));
  return {out, contiguous_strides(out), offset};
}

std::vector<int> permutation(const TensorMeta& x, const ShapeArgs& args) {
  const auto& dims = int_list(args, 0);
  const int n = x.shape.size();
  SG_CHECK(static_cast<int>(dims.size()) == n, "permute: got ", dims.size(), " dims for x",
           shape_str(x.shape), " of rank ", n);
  std::vector<int> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const int d = wrap_dim(dims[i].value(), n, kPermute);
    SG_CHECK(!seen[static_cast<std::size_t>(d)], "permute: dimension ", d, " appears twice");
    seen[static_cast<std::size_t>(d)] = true;
    perm[i] = d;
  }
  return perm;
}

TensorMeta permute_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  const auto perm = permutation(args.tensors[0], args);
  for (std::size_t i = 0; i < perm.size(); ++i)
    out.shape[static_cast<int>(i)] = args.tensors[0].shape[perm[i]];
  return out;
}

ViewResult permute_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                        const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  const auto perm = permutation(meta, args);
  ViewResult v{shape, strides, offset};
  for (std::size_t i = 0; i < perm.size(); ++i) {
    v.shape[static_cast<int>(i)] = shape[perm[i]];
    v.strides[static_cast<int>(i)] = strides[perm[i]];
  }
  return v;
}

std::pair<int, int> transpose_dims(const TensorMeta& x, const ShapeArgs& args) {
  return {wrap_dim(args.integer(0), x.shape.size(), kTranspose),
          wrap_dim(args.integer(1), x.shape.size(), kTranspose)};
}

TensorMeta transpose_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  if (out.shape.empty()) return out;
  const auto [a, b] = transpose_dims(out, args);
  std::swap(out.shape[a], out.shape[b]);
  return out;
}

ViewResult transpose_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                          const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  ViewResult v{shape, strides, offset};
  if (shape.empty()) return v;
  const auto [a, b] = transpose_dims(meta, args);
  std::swap(v.shape[a], v.shape[b]);
  std::swap(v.strides[a], v.strides[b]);
  return v;
}

// expand(x, shape), as torch.expand: the sizes align with x's trailing
// dimensions; -1 keeps x's size; a size-1 dimension of x broadcasts to any
// size (stride 0), as does every new leading dimension (which may not be -1);
// any other size must equal x's. `broadcast[i]` says output dim i gets stride 0.
SymShape expand_sizes(const TensorMeta& x, const std::vector<SymInt>& sizes,
                      std::vector<bool>* broadcast = nullptr) {
  const int rank = x.shape.size();
  const int n = static_cast<int>(sizes.size());
  const SymShape wanted{std::span(sizes)};
  SG_CHECK(n >= rank, "expand: the number of sizes (", n, ", ", shape_str(wanted),
           ") must be at least x's number of dimensions (", rank, ", x", shape_str(x.shape), ")");
  SymShape out;
  for (int i = 0; i < n; ++i) {
    const SymInt& want = sizes[static_cast<std::size_t>(i)];
    const auto w = want.maybe_value();
    const int j = i - (n - rank);
    bool zero_stride = false;
    if (j < 0) {
      SG_CHECK(!w || *w >= 0, "expand: size ", want.str(), " for the new leading dimension ", i,
               " is not allowed (sizes ", shape_str(wanted), ", x", shape_str(x.shape),
               "); -1 keeps an existing size only");
      out.push_back(want);
      zero_stride = true;
    } else if (w && *w == -1) {
      out.push_back(x.shape[j]);
    } else {
      SG_CHECK(!w || *w >= 0, "expand: size ", *w, " at dimension ", i, " is negative (sizes ",
               shape_str(wanted), "); only -1 keeps a size");
      const auto have = x.shape[j].maybe_value();
      if (have && *have == 1 && !(w && *w == 1)) {
        zero_stride = true;
      } else {
        SG_CHECK(want == x.shape[j], "expand: the expanded size ", want.str(),
                 " must match the existing size ", x.shape[j].str(), " at non-singleton dimension ",
                 i, " (sizes ", shape_str(wanted), ", x", shape_str(x.shape), ")");
      }
      out.push_back(want);
    }
    if (broadcast != nullptr) broadcast->push_back(zero_stride);
  }
  return out;
}

TensorMeta expand_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  out.shape = expand_sizes(args.tensors[0], int_list(args, 0));
  return out;
}

ViewResult expand_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                       const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  std::vector<bool> broadcast;
  const Shape out = to_concrete(expand_sizes(meta, int_list(args, 0), &broadcast));
  ViewResult v{out, Strides::filled(out.size(), 0), offset};
  const int lead = out.size() - shape.size();
  for (int i = 0; i < out.size(); ++i) {
    if (!broadcast[static_cast<std::size_t>(i)]) v.strides[i] = strides[i - lead];
  }
  return v;
}

// squeeze drops a size-1 dimension and unsqueeze inserts one, keeping every
// other dimension's stride: views of any layout (view() needs contiguous x).
int squeeze_dim(const TensorMeta& x, const ShapeArgs& args) {
  const int d = wrap_dim(args.integer(0), x.shape.size(), kSqueeze);
  SG_CHECK(x.shape[d] == SymInt(1), "squeeze: dimension ", d, " of x", shape_str(x.shape),
           " has size ", x.shape[d].str(), "; expected 1");
  return d;
}

TensorMeta squeeze_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  out.shape.erase(squeeze_dim(args.tensors[0], args));
  return out;
}

ViewResult squeeze_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                        const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  const int d = squeeze_dim(meta, args);
  ViewResult v{shape, strides, offset};
  v.shape.erase(d);
  v.strides.erase(d);
  return v;
}

int unsqueeze_dim(const TensorMeta& x, const ShapeArgs& args) {
  return wrap_dim(args.integer(0), x.shape.size() + 1, kUnsqueeze);
}

TensorMeta unsqueeze_shape(const ShapeArgs& args) {
  TensorMeta out = args.tensors[0];
  out.shape.insert(unsqueeze_dim(args.tensors[0], args), SymInt(1));
  return out;
}

ViewResult unsqueeze_view(const Shape& shape, const Strides& strides, std::int64_t offset,
                          const ShapeArgs& args) {
  TensorMeta meta;
  meta.shape = to_sym(shape);
  const int d = unsqueeze_dim(meta, args);
  ViewResult v{shape, strides, offset};
  // The new dimension's stride: what a contiguous layout would give it.
  const std::int64_t stride = d < shape.size() ? strides[d] * shape[d] : 1;
  v.shape.insert(d, 1);
  v.strides.insert(d, stride);
  return v;
}

TensorMeta identity_shape(const ShapeArgs& args) { return args.tensors[0]; }

TensorMeta cat_shape(const ShapeArgs& args) {
  SG_CHECK(!args.tensors.empty(), "cat: expected at least one tensor");
  const TensorMeta& first = args.tensors[0];
  SG_CHECK(!first.shape.empty(), "cat: tensors[0] is 0-dimensional");
  const int dim = wrap_dim(args.integer(0), first.shape.size(), kCat);
  TensorMeta out = first;
  for (std::size_t i = 1; i < args.tensors.size(); ++i) {
    const TensorMeta& t = args.tensors[i];
    SG_CHECK(t.dtype == first.dtype, "cat: tensors[", i, "] has dtype ", dtype_name(t.dtype),
             " but tensors[0] has ", dtype_name(first.dtype));
    SG_CHECK(t.shape.size() == first.shape.size(), "cat: tensors[", i, "]", shape_str(t.shape),
             " has rank ", t.shape.size(), " but tensors[0]", shape_str(first.shape), " has rank ",
             first.shape.size());
    for (int d = 0; d < first.shape.size(); ++d) {
      if (d == dim) continue;
      SG_CHECK(t.shape[d] == first.shape[d], "cat: tensors[", i, "]", shape_str(t.shape),
               " differs from tensors[0]", shape_str(first.shape), " in dimension ", d,
               " (only dimension ", dim, " may differ)");
    }
    out.shape[dim] = out.shape[dim] + t.shape[dim];
  }
  return out;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// cat's composite: one copy per input into slices of `out`. An input that
// already is its slice of the output (cat removal: Note [Cat removal] in
// src/passes/remove_cat.cpp) is not copied.
Tensor cat_into(std::span<const Tensor* const> tensors, std::span<const ScalarValue> scalars,
                const Tensor& out) {
  const int d = wrap_dim(std::get<SymInt>(scalars[0]).value(), out.ndim(), kCat);
  std::int64_t offset = 0;
  for (const Tensor* t : tensors) {
    const Tensor slot = ops::narrow(out, d, offset, t->size(d));
    if (!same_view(slot, *t)) ops::copy_(slot, *t);
    offset += t->size(d);
  }
  return out;
}

// ... into a fresh output.
Tensor cat_composite(std::span<const Tensor* const> tensors, std::span<const ScalarValue> scalars) {
  Inferred inferred;
  infer(op_def<kCat>(), tensors, scalars, inferred);
  return cat_into(
      tensors, scalars,
      Tensor::empty(to_concrete(inferred.out.shape), inferred.out.dtype, *inferred.device));
}

OpDef make_view(const char* name, std::vector<ArgSpec> args, ShapeFn shape, ViewFn view) {
  OpDef def = make_op(name, std::move(args), shape);
  def.schema.is_view = true;
  def.schema.alias_of = 0;
  def.view_fn = view;
  return def;
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  const ArgSpec x{"x"};
  r.add(make_view(kSlice,
                  {x,
                   {"dim", ArgKind::integer},
                   {"start", ArgKind::integer},
                   {"end", ArgKind::integer},
                   {"step", ArgKind::integer}},
                  slice_shape, slice_view));
  r.add(make_view(kView, {x, {"shape", ArgKind::int_list}}, view_shape, view_view));
  r.add(make_view(kTranspose, {x, {"dim0", ArgKind::integer}, {"dim1", ArgKind::integer}},
                  transpose_shape, transpose_view));
  r.add(make_view(kPermute, {x, {"dims", ArgKind::int_list}}, permute_shape, permute_view));
  r.add(make_view(kExpand, {x, {"shape", ArgKind::int_list}}, expand_shape, expand_view));
  r.add(make_view(kSqueeze, {x, {"dim", ArgKind::integer}}, squeeze_shape, squeeze_view));
  r.add(make_view(kUnsqueeze, {x, {"dim", ArgKind::integer}}, unsqueeze_shape, unsqueeze_view));
  r.add(make_op(kContiguous, {x}, identity_shape));
  // cat runs as one copy per input into slices of its output.
  OpDef cat =
      make_op(kCat, {{"tensors", ArgKind::tensor_list}, {"dim", ArgKind::integer}}, cat_shape);
  cat.composite = cat_composite;
  cat.composite_into = cat_into;
  r.add(std::move(cat));
}

}  // namespace detail

namespace ops {

using detail::call;
using detail::op_def;

Tensor slice(const Tensor& x, std::int64_t dim, const SymInt& start, const SymInt& end,
             std::int64_t step) {
  return call(op_def<detail::kSlice>(), {&x}, {SymInt(dim), start, end, SymInt(step)});
}

Tensor narrow(const Tensor& x, std::int64_t dim, const SymInt& start, const SymInt& length) {
  // A negative start counts from the end (as in PyTorch); slice's end of 0
  // would otherwise mean the beginning.
  SymInt begin = start;
  if (const auto s = start.maybe_value(); s && *s < 0 && x.defined()) {
    begin = x.sym_size(wrap_dim(dim, x.ndim(), "narrow")) + *s;
  }
  return slice(x, dim, begin, begin + length, 1);
}

Tensor view(const Tensor& x, const SymShape& shape) {
  return call(op_def<detail::kView>(), {&x}, {std::vector<SymInt>(shape.begin(), shape.end())});
}

Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1) {
  return call(op_def<detail::kTranspose>(), {&x}, {SymInt(dim0), SymInt(dim1)});
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  return call(op_def<detail::kPermute>(), {&x}, {std::vector<SymInt>(dims.begin(), dims.end())});
}

Tensor expand(const Tensor& x, const SymShape& shape) {
  return call(op_def<detail::kExpand>(), {&x}, {std::vector<SymInt>(shape.begin(), shape.end())});
}

Tensor squeeze(const Tensor& x, std::int64_t dim) {
  return call(op_def<detail::kSqueeze>(), {&x}, {SymInt(dim)});
}

Tensor unsqueeze(const Tensor& x, std::int64_t dim) {
  return call(op_def<detail::kUnsqueeze>(), {&x}, {SymInt(dim)});
}

Tensor contiguous(const Tensor& x) {
  if (x.defined() && x.is_contiguous()) return x;
  return call(op_def<detail::kContiguous>(), {&x});
}

Tensor reshape(const Tensor& x, const SymShape& shape) {
  return view(x.defined() && !x.is_contiguous() ? contiguous(x) : x, shape);
}

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(tensors.size());
  for (const auto& t : tensors) ptrs.push_back(&t);
  const ScalarValue scalars[] = {SymInt(dim)};
  return detail::dispatch(op_def<detail::kCat>(), ptrs, scalars);
}

}  // namespace ops
}  // namespace sinkgraph

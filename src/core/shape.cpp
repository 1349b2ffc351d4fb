#include "sinkgraph/shape.h"

namespace sinkgraph {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

SymInt sym_numel(const SymShape& shape) {
  SymInt n = 1;
  for (const auto& d : shape) n = n * d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides = Strides::filled(shape.size(), 1);
  std::int64_t running = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = running;
    running *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

SymShape to_sym(const Shape& shape) {
  SymShape out;
  for (const auto d : shape) out.push_back(SymInt(d));
  return out;
}

Shape to_concrete(const SymShape& shape) {
  Shape out;
  for (const auto& d : shape) out.push_back(d.value());
  return out;
}

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string shape_str(const SymShape& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ',';
    out += shape[i].str();
  }
  return out + "]";
}

int wrap_dim(std::int64_t dim, int ndim, const char* what) {
  const std::int64_t lo = -std::max(ndim, 1);
  const std::int64_t hi = std::max(ndim, 1) - 1;
  SG_CHECK(dim >= lo && dim <= hi, what, ": dimension ", dim,
           " is out of range for a tensor of rank ", ndim, " (expected a value in [", lo, ", ", hi,
           "])");
  return static_cast<int>(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

SymShape broadcast_shapes(const SymShape& a, const SymShape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  SymShape out = SymShape::filled(n, SymInt(1));
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i;
    const int ib = b.size() - n + i;
    const SymInt da = ia >= 0 ? a[ia] : SymInt(1);
    const SymInt db = ib >= 0 ? b[ib] : SymInt(1);
    if (da == db || db == SymInt(1)) {
      out[i] = da;
    } else if (da == SymInt(1)) {
      out[i] = db;
    } else {
      SG_CHECK(false, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (dimension ", i, ": ", da.str(), " vs ", db.str(),
               "; expected equal sizes or one of them 1)");
    }
  }
  return out;
}

}  // namespace sinkgraph

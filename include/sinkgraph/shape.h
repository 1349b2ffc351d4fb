#pragma once
// Shapes and strides. Tensors have at most kMaxDims dimensions so that shapes
// live inline (no heap traffic on the eager path) and fit the POD kernel ABI.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "sinkgraph/error.h"
#include "sinkgraph/export.h"
#include "sinkgraph/symint.h"

namespace sinkgraph {

inline constexpr int kMaxDims = 6;

// clang-tidy sees `__i0`, clang's loop index in the implicit copy of the
// array member, as a reserved name of ours.
template <typename T>
// NOLINTNEXTLINE(bugprone-reserved-identifier,readability-identifier-naming)
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<T> values) {
    for (const T& v : values) push_back(v);
  }
  explicit Dims(std::span<const T> values) {
    for (const T& v : values) push_back(v);
  }
  static Dims filled(int n, const T& value) {
    Dims d;
    for (int i = 0; i < n; ++i) d.push_back(value);
    return d;
  }

  void push_back(const T& v) {
    SG_CHECK(n_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
    data_[n_++] = v;
  }
  void insert(int pos, const T& v) {
    push_back(v);
    std::rotate(data_ + pos, data_ + n_ - 1, data_ + n_);
  }
  void erase(int pos) {
    std::rotate(data_ + pos, data_ + pos + 1, data_ + n_);
    --n_;
  }
  [[nodiscard]] int size() const { return n_; }
  [[nodiscard]] bool empty() const { return n_ == 0; }
  T& operator[](int i) { return data_[i]; }
  const T& operator[](int i) const { return data_[i]; }
  T& back() { return data_[n_ - 1]; }
  const T& back() const { return data_[n_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + n_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + n_; }
  [[nodiscard]] std::span<const T> span() const { return {data_, static_cast<std::size_t>(n_)}; }
  friend bool operator==(const Dims& a, const Dims& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  T data_[kMaxDims]{};
  int n_ = 0;
};

using Shape = Dims<std::int64_t>;
using Strides = Dims<std::int64_t>;
using SymShape = Dims<SymInt>;

SG_API std::int64_t numel(const Shape& shape);
SG_API SymInt sym_numel(const SymShape& shape);
SG_API Strides contiguous_strides(const Shape& shape);
SG_API SymShape to_sym(const Shape& shape);
// Throws when any dimension is symbolic.
SG_API Shape to_concrete(const SymShape& shape);
SG_API std::string shape_str(const Shape& shape);     // "[2,3]"
SG_API std::string shape_str(const SymShape& shape);  // "[s0,64]"
// Wraps a possibly negative dimension index; `what` names the operator.
SG_API int wrap_dim(std::int64_t dim, int ndim, const char* what);
// Numpy broadcasting over symbolic shapes; `op` names the operator in errors.
SG_API SymShape broadcast_shapes(const SymShape& a, const SymShape& b, const char* op);

}  // namespace sinkgraph

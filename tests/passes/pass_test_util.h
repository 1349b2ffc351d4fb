#pragma once
// Helpers of the pass tests: building graphs in code, random inputs, and
// comparing what the interpreter computes before and after a pass.
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/ir.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/passes.h"

namespace sgtest {

using sinkgraph::DType;
using sinkgraph::SymInt;
using sinkgraph::SymShape;
using sinkgraph::Tensor;
using sinkgraph::TensorMeta;
namespace ir = sinkgraph::ir;
namespace passes = sinkgraph::passes;

inline const sinkgraph::OpDef& op(const std::string& name) {
  return sinkgraph::OpRegistry::instance().get(name);
}

inline TensorMeta meta(SymShape shape, DType dtype = DType::f32) {
  return TensorMeta{dtype, shape, sinkgraph::DeviceType::cpu};
}

// Appends a node and returns its result.
inline ir::Value* add(ir::Graph& g, const std::string& name, std::vector<ir::Value*> operands,
                      std::vector<ir::NamedAttr> attrs = {}, const std::string& result = "") {
  return g.add_node(op(name), std::move(operands), std::move(attrs), result)->result();
}

inline std::vector<SymInt> dims(std::initializer_list<SymInt> d) { return d; }

inline ir::Value* full(ir::Graph& g, std::vector<SymInt> shape, double value,
                       DType dtype = DType::f32, const std::string& result = "") {
  return add(g, "full", {}, {{"shape", std::move(shape)}, {"value", value}, {"dtype", dtype}},
             result);
}

inline std::vector<std::string> op_names(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes()) out.push_back(n->op_name());
  return out;
}

inline std::size_t count_op(const ir::Graph& g, const std::string& name) {
  std::size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op_name() == name ? 1 : 0;
  return n;
}

// Every symbol evaluates to this in the random inputs.
inline constexpr std::int64_t kSymValue = 3;

inline Tensor random_tensor(const TensorMeta& m, std::mt19937& rng) {
  sinkgraph::SymBindings bind;
  for (const auto& d : m.shape) {
    for (const auto& s : d.free_symbols()) bind[s] = kSymValue;
  }
  sinkgraph::Shape shape;
  for (const auto& d : m.shape) shape.push_back(d.eval(bind));
  const auto n = static_cast<std::size_t>(sinkgraph::numel(shape));
  if (sinkgraph::is_integral(m.dtype)) {
    std::uniform_int_distribution<std::int64_t> dist(0, 3);
    std::vector<std::int64_t> v(n);
    for (auto& x : v) x = dist(rng);
    return Tensor::from_ints(v, shape, m.dtype);
  }
  std::uniform_real_distribution<float> dist(-2.0F, 2.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return Tensor::from_floats(v, shape, m.dtype);
}

inline Tensor clone(const Tensor& t) {
  if (sinkgraph::is_integral(t.dtype()) || t.dtype() == DType::boolean) {
    return Tensor::from_ints(t.to_ints(), t.shape(), t.dtype());
  }
  return Tensor::from_floats(t.to_floats(), t.shape(), t.dtype());
}

using NamedInputs = std::map<std::string, ir::RtValue>;

inline NamedInputs random_inputs(const ir::Graph& g, std::uint32_t seed = 1) {
  std::mt19937 rng(seed);
  NamedInputs out;
  for (const ir::Value* in : g.inputs()) {
    if (in->is_sym) {
      out[in->name] = kSymValue;
    } else {
      out[in->name] = random_tensor(in->meta, rng);
    }
  }
  return out;
}

// Inputs of `g` by name (from `named`, else from `extra` params), cloned.
inline std::vector<ir::RtValue> inputs_for(const ir::Graph& g, const NamedInputs& named,
                                           const passes::PassContext* extra = nullptr) {
  std::vector<ir::RtValue> out;
  for (const ir::Value* in : g.inputs()) {
    const auto it = named.find(in->name);
    if (it != named.end()) {
      if (const auto* t = std::get_if<Tensor>(&it->second)) {
        out.emplace_back(clone(*t));
      } else {
        out.push_back(it->second);
      }
      continue;
    }
    EXPECT_TRUE(extra != nullptr && extra->param_data.contains(in->name))
        << "no data for input %" << in->name;
    out.emplace_back(extra->param_data.at(in->name));
  }
  return out;
}

// Every bit equal (any NaN equals any NaN): the passes keep IEEE semantics
// exactly, so -0.0 and +0.0 differ here.
inline ::testing::AssertionResult same_values(const ir::RtValue& a, const ir::RtValue& b) {
  if (a.index() != b.index()) return ::testing::AssertionFailure() << "tensor vs integer";
  if (const auto* ia = std::get_if<std::int64_t>(&a)) {
    if (*ia == std::get<std::int64_t>(b)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << *ia << " vs " << std::get<std::int64_t>(b);
  }
  const Tensor& ta = std::get<Tensor>(a);
  const Tensor& tb = std::get<Tensor>(b);
  if (ta.dtype() != tb.dtype() || !(ta.shape() == tb.shape())) {
    return ::testing::AssertionFailure() << ta.str() << " vs " << tb.str();
  }
  if (sinkgraph::is_integral(ta.dtype()) || ta.dtype() == DType::boolean) {
    if (ta.to_ints() == tb.to_ints()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "integer tensors differ";
  }
  const auto va = ta.to_floats();
  const auto vb = tb.to_floats();
  for (std::size_t i = 0; i < va.size(); ++i) {
    const bool nan = std::isnan(va[i]) && std::isnan(vb[i]);
    const bool eq = std::bit_cast<std::uint32_t>(va[i]) == std::bit_cast<std::uint32_t>(vb[i]);
    if (!nan && !eq) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << va[i] << " vs " << vb[i] << " (" << ta.str() << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Interprets `before` and `after` on the same inputs (fresh copies each) and
// compares the outputs and the inputs' final contents (in-place writes).
inline ::testing::AssertionResult same_results(const ir::Graph& before, const ir::Graph& after,
                                               const NamedInputs& named,
                                               const passes::PassContext* extra = nullptr) {
  auto in_a = inputs_for(before, named, extra);
  auto in_b = inputs_for(after, named, extra);
  const auto out_a = ir::interpret(before, in_a);
  const auto out_b = ir::interpret(after, in_b);
  if (out_a.size() != out_b.size()) {
    return ::testing::AssertionFailure() << out_a.size() << " vs " << out_b.size() << " outputs";
  }
  for (std::size_t i = 0; i < out_a.size(); ++i) {
    auto r = same_values(out_a[i], out_b[i]);
    if (!r) return r << " (output " << i << ")";
  }
  for (std::size_t i = 0; i < before.inputs().size(); ++i) {
    const std::string& name = before.inputs()[i]->name;
    for (std::size_t j = 0; j < after.inputs().size(); ++j) {
      if (after.inputs()[j]->name != name) continue;
      auto r = same_values(in_a[i], in_b[j]);
      if (!r) return r << " (input %" << name << " after the run)";
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs one pass on a clone and checks results against the original.
inline std::unique_ptr<ir::Graph> run_pass(const ir::Graph& g, const std::string& pass,
                                           passes::PassContext& ctx) {
  auto out = g.clone();
  passes::find_pass(pass).run(*out, ctx);
  ir::verify(*out);
  return out;
}

inline std::unique_ptr<ir::Graph> run_pass(const ir::Graph& g, const std::string& pass) {
  passes::PassContext ctx;
  return run_pass(g, pass, ctx);
}

// A pass context holding the params of `g` taken from the random inputs, as
// the compiler passes them.
inline passes::PassContext param_context(const ir::Graph& g, const NamedInputs& named,
                                         bool frozen) {
  passes::PassContext ctx;
  ctx.frozen_parameter = frozen;
  for (const ir::Value* in : g.inputs()) {
    if (!in->is_sym && in->kind == ir::InputKind::param) {
      ctx.param_data[in->name] = std::get<Tensor>(named.at(in->name));
    }
  }
  return ctx;
}

// |a - b| <= tol * (1 + |a|) for every output element (passes that are not
// bitwise: merged weights, folded batch norms).
inline ::testing::AssertionResult close_results(const ir::Graph& before, const ir::Graph& after,
                                                const NamedInputs& named,
                                                const passes::PassContext& ctx, double tol = 1e-5) {
  auto in_a = inputs_for(before, named, &ctx);
  auto in_b = inputs_for(after, named, &ctx);
  const auto out_a = ir::interpret(before, in_a);
  const auto out_b = ir::interpret(after, in_b);
  if (out_a.size() != out_b.size()) return ::testing::AssertionFailure() << "output counts differ";
  for (std::size_t i = 0; i < out_a.size(); ++i) {
    const auto a = std::get<Tensor>(out_a[i]).to_floats();
    const auto b = std::get<Tensor>(out_b[i]).to_floats();
    if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
    for (std::size_t j = 0; j < a.size(); ++j) {
      if (!(std::abs(a[j] - b[j]) <= tol * (1.0 + std::abs(a[j])))) {
        return ::testing::AssertionFailure()
               << "output " << i << " element " << j << ": " << a[j] << " vs " << b[j];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace sgtest

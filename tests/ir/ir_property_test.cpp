// Property: random well-formed graphs print, parse and print again to the
// same text, and both the built and the parsed graph verify.
#include <algorithm>
#include <numeric>
#include <rapidcheck.h>

#include <gtest/gtest.h>

#include "sinkgraph/ir.h"

namespace {

namespace ir = sinkgraph::ir;
using sinkgraph::DType;
using sinkgraph::OpRegistry;
using sinkgraph::SymInt;
using sinkgraph::SymShape;
using sinkgraph::TensorMeta;

const sinkgraph::OpDef& op(const char* name) { return OpRegistry::instance().get(name); }

SymInt random_dim(const std::vector<std::string>& symbols) {
  if (*rc::gen::inRange(0, 3) == 0) {
    return SymInt::symbol(symbols[static_cast<std::size_t>(
        *rc::gen::inRange<int>(0, static_cast<int>(symbols.size())))]);
  }
  return SymInt(*rc::gen::inRange<std::int64_t>(1, 9));
}

double random_real() {
  switch (*rc::gen::inRange(0, 3)) {
    case 0:
      return *rc::gen::arbitrary<double>();  // any bits: inf, nan, subnormals, -0.0
    case 1:
      return static_cast<double>(*rc::gen::inRange(-1000, 1000)) / 64.0;
    default:
      return *rc::gen::element(1e-5, 1e-6, 10000.0, 0.1, 500000.0, -0.0);
  }
}

// Adds one random node over the existing tensors; returns false when the
// shape function rejects the combination (the graph is left unchanged).
bool add_random_node(ir::Graph& g, std::vector<ir::Value*>& tensors, int index) {
  ir::Value* x = *rc::gen::elementOf(tensors);
  const SymShape& shape = x->meta.shape;
  const int rank = shape.size();
  const std::string name =
      *rc::gen::element(std::string("v"), std::string("layer") + std::to_string(index) + ".out",
                        std::string("t_") + std::to_string(index));
  const std::string result = g.find(name) ? g.fresh_name("n") : name;
  std::vector<ir::Value*> operands = {x};
  std::vector<ir::NamedAttr> attrs;
  const char* op_name = nullptr;
  switch (*rc::gen::inRange(0, 11)) {
    case 0:
      op_name = *rc::gen::element("silu", "relu", "exp", "neg", "gelu", "sqrt", "rsqrt", "softmax");
      break;
    case 1: {
      op_name = *rc::gen::element("add", "sub", "mul");
      std::vector<ir::Value*> same;
      for (ir::Value* v : tensors) {
        if (v->meta.shape == shape) same.push_back(v);
      }
      operands.push_back(*rc::gen::elementOf(same));
      break;
    }
    case 2:
      op_name = *rc::gen::element("add_scalar", "mul_scalar");
      attrs.push_back({"value", random_real()});
      break;
    case 3: {
      if (rank < 2) return false;
      op_name = "matmul";
      const TensorMeta w{DType::f32, SymShape{shape.back(), *rc::gen::inRange<std::int64_t>(1, 9)}};
      operands.push_back(g.add_input(g.fresh_name("w"), w, ir::InputKind::param));
      break;
    }
    case 4: {
      if (rank < 1) return false;
      op_name = "rms_norm";
      const TensorMeta w{DType::f32, SymShape{shape.back()}};
      operands.push_back(g.add_input(g.fresh_name("norm"), w, ir::InputKind::param));
      attrs.push_back({"eps", std::abs(random_real())});
      break;
    }
    case 5: {
      if (rank < 1) return false;
      op_name = "slice";
      const int dim = *rc::gen::inRange(0, rank);
      const SymInt size = shape[dim];
      SymInt start = 0;
      SymInt end = size;
      if (const auto n = size.maybe_value()) {
        start = *rc::gen::inRange<std::int64_t>(0, *n + 1);
        end = *rc::gen::inRange<std::int64_t>(start.value(), *n + 1);
      }
      attrs = {{"dim", SymInt(dim - (*rc::gen::arbitrary<bool>() ? rank : 0))},
               {"start", start},
               {"end", end},
               {"step", SymInt(*rc::gen::inRange<std::int64_t>(1, 4))}};
      break;
    }
    case 6: {
      if (rank < 2) return false;
      op_name = "view";
      std::vector<SymInt> dims(shape.begin(), shape.end() - 2);
      dims.push_back(*rc::gen::arbitrary<bool>() ? SymInt(-1) : shape[rank - 2] * shape[rank - 1]);
      attrs.push_back({"shape", dims});
      break;
    }
    case 7: {
      if (rank < 1) return false;
      op_name = "transpose";
      attrs = {{"dim0", SymInt(*rc::gen::inRange(0, rank))},
               {"dim1", SymInt(*rc::gen::inRange(-rank, rank))}};
      break;
    }
    case 8: {
      op_name = "permute";
      std::vector<int> perm(static_cast<std::size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      const auto order =
          *rc::gen::container<std::vector<int>>(perm.size(), rc::gen::inRange(0, 1000));
      std::vector<std::size_t> idx(perm.size());
      std::iota(idx.begin(), idx.end(), 0U);
      std::sort(idx.begin(), idx.end(),
                [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
      std::vector<SymInt> dims;
      for (const std::size_t i : idx) dims.emplace_back(perm[i]);
      attrs.push_back({"dims", dims});
      break;
    }
    case 9: {
      if (rank < 1) return false;
      op_name = "cat";
      operands.push_back(*rc::gen::element(x, tensors.front()));
      attrs.push_back({"dim", SymInt(*rc::gen::inRange(0, rank))});
      break;
    }
    default:
      op_name = "contiguous";
      break;
  }
  try {
    ir::Node* n = g.add_node(op(op_name), operands, attrs, result);
    tensors.push_back(n->result());
    return true;
  } catch (const sinkgraph::Error&) {
    return false;
  }
}

std::unique_ptr<ir::Graph> random_graph() {
  auto g =
      std::make_unique<ir::Graph>(*rc::gen::element(std::string("main"), std::string("block.0")));
  const std::vector<std::string> symbols = {"s0", "s1", "batch_size"};
  std::vector<ir::Value*> tensors;
  const int num_inputs = *rc::gen::inRange(1, 4);
  for (int i = 0; i < num_inputs; ++i) {
    SymShape shape;
    const int rank = *rc::gen::inRange(1, 5);
    for (int d = 0; d < rank; ++d) shape.push_back(random_dim(symbols));
    const auto kind =
        *rc::gen::element(ir::InputKind::input, ir::InputKind::param, ir::InputKind::mutated);
    tensors.push_back(g->add_input("in" + std::to_string(i), TensorMeta{DType::f32, shape}, kind));
  }
  if (*rc::gen::arbitrary<bool>()) g->add_sym_input("pos");
  const int num_nodes = *rc::gen::inRange(0, 16);
  for (int i = 0; i < num_nodes; ++i) add_random_node(*g, tensors, i);
  g->outputs.push_back(tensors.back());
  if (*rc::gen::arbitrary<bool>()) g->outputs.push_back(tensors.front());
  return g;
}

TEST(ir_property, random_graphs_round_trip_through_the_text_form) {
  const bool ok = rc::check("print(parse(print(g))) == print(g)", [] {
    const auto g = random_graph();
    const std::string text = ir::print(*g);
    RC_TAG(g->nodes().size());
    std::unique_ptr<ir::Graph> back;
    try {
      ir::verify(*g);
      back = ir::parse(text, "random.ir");
    } catch (const sinkgraph::Error& e) {
      RC_FAIL(std::string(e.what()) + "\n" + text);
    }
    RC_ASSERT(ir::print(*back) == text);
    ir::verify(*back);
    RC_ASSERT(back->nodes().size() == g->nodes().size());
  });
  EXPECT_TRUE(ok);
}

// Expressions: every canonical size prints to text that parses to the same size.
TEST(ir_property, symbolic_sizes_round_trip_through_a_full_node) {
  const bool ok = rc::check("size expressions round-trip", [] {
    const SymInt s0 = SymInt::symbol("s0");
    const SymInt s1 = SymInt::symbol("s1");
    SymInt e = *rc::gen::element(s0, s1, SymInt(3));
    const int steps = *rc::gen::inRange(1, 6);
    for (int i = 0; i < steps; ++i) {
      const SymInt other = *rc::gen::element(s0, s1, SymInt(*rc::gen::inRange(1, 7)));
      switch (*rc::gen::inRange(0, 5)) {
        case 0:
          e = e + other;
          break;
        case 1:
          e = e - other;
          break;
        case 2:
          e = e * other;
          break;
        case 3:
          e = sinkgraph::floordiv(e, other);
          break;
        default:
          e = sinkgraph::mod(e, other);
          break;
      }
    }
    if (const auto v = e.maybe_value(); v && *v < 0) RC_DISCARD("arange needs n >= 0");
    ir::Graph g("sizes");
    g.add_input("x", TensorMeta{DType::f32, SymShape{s0, s1}}, ir::InputKind::input);
    ir::Node* n = g.add_node(op("arange"), {}, {{"n", e}, {"dtype", DType::i64}}, "r");
    g.outputs.push_back(n->result());
    const std::string text = ir::print(g);
    const auto back = ir::parse(text);
    RC_ASSERT(ir::print(*back) == text);
    RC_ASSERT(std::get<SymInt>(back->nodes().front()->attrs[0].value) == e);
  });
  EXPECT_TRUE(ok);
}

}  // namespace

// The IR text form: golden files, error positions, the verifier, and that a
// parsed graph computes what the eager ops compute.
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "sinkgraph/ir.h"
#include "sinkgraph/ops.h"

namespace {

namespace ir = sinkgraph::ir;
namespace ops = sinkgraph::ops;
using sinkgraph::DType;
using sinkgraph::OpRegistry;
using sinkgraph::SymInt;
using sinkgraph::SymShape;
using sinkgraph::Tensor;
using sinkgraph::TensorMeta;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string golden(const std::string& name) {
  return std::string(SG_TEST_DATA) + "/ir/golden/" + name;
}

// ---- golden files -------------------------------------------------------------

class IrGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(IrGolden, prints_the_expected_text_and_is_a_fixed_point) {
  const std::string name = GetParam();
  const std::string input = read_file(golden(name + ".ir"));
  const std::string expected = read_file(golden(name + ".expected.ir"));
  const auto g = ir::parse(input, name + ".ir");
  const std::string printed = ir::print(*g);
  EXPECT_EQ(printed, expected);
  ir::verify(*g);
  // The printed form parses back to a graph that prints identically.
  const auto again = ir::parse(printed, name + ".expected.ir");
  EXPECT_EQ(ir::print(*again), printed);
  ir::verify(*again);
  // Node locations point at the operator in the text it came from.
  ASSERT_FALSE(again->nodes().empty());
  EXPECT_EQ(again->nodes().front()->loc.line, 2);
  EXPECT_EQ(again->nodes().front()->result()->loc.column, 3);
}

INSTANTIATE_TEST_SUITE_P(ir_golden, IrGolden, ::testing::Values("mlp", "attention", "views"));

TEST(ir_text, clone_prints_the_same) {
  const auto g = ir::parse(read_file(golden("attention.ir")));
  EXPECT_EQ(ir::print(*g->clone()), ir::print(*g));
}

// ---- errors -------------------------------------------------------------------

struct ErrorCase {
  const char* what;
  std::string text;
  std::string where;    // "t.ir:L:C: "
  std::string message;  // a substring of the message
};

const std::string kHead = "graph @g(%x: f32[s0,4] input, %w: f32[4,4] param, %p: sym) {\n";

std::vector<ErrorCase> error_cases() {
  return {
      {"unknown operator", kHead + "  %a = frobnicate(%x)\n  return (%a)\n}\n",
       "t.ir:2:8: ", "unknown operator 'frobnicate'"},
      {"arity", kHead + "  %a = matmul(%x)\n  return (%a)\n}\n",
       "t.ir:2:8: ", "matmul expects 2 tensor operands, got 1"},
      {"unknown attribute", kHead + "  %a = softmax(%x, dim=1)\n  return (%a)\n}\n",
       "t.ir:2:20: ", "unknown attribute 'dim' for softmax"},
      {"missing attribute", kHead + "  %a = rope(%x, theta=1.0, style=0)\n  return (%a)\n}\n",
       "t.ir:2:35: ", "missing attribute 'pos0' of rope"},
      {"duplicate attribute",
       kHead + "  %a = mul_scalar(%x, value=1.0, value=2.0)\n  return (%a)\n}\n",
       "t.ir:2:34: ", "duplicate attribute 'value'"},
      {"use before definition", kHead + "  %a = silu(%b)\n  %b = silu(%x)\n  return (%a)\n}\n",
       "t.ir:2:13: ", "use of undefined value %b"},
      {"redefinition", kHead + "  %a = silu(%x)\n  %a = relu(%x)\n  return (%a)\n}\n",
       "t.ir:3:3: ", "redefinition of %a (first defined at 2:3)"},
      {"redefinition of an input", kHead + "  %x = silu(%x)\n  return (%x)\n}\n",
       "t.ir:2:3: ", "redefinition of %x (first defined at 1:10)"},
      {"bad dtype", "graph @g(%x: f33[4] input) {\n  return (%x)\n}\n",
       "t.ir:1:14: ", "unknown dtype 'f33'"},
      {"bad dtype attribute",
       kHead + "  %a = full(shape=[2], value=0.0, dtype=float)\n  return (%a)\n}\n",
       "t.ir:2:41: ", "unknown dtype 'float'"},
      {"bad kind", "graph @g(%x: f32[4] weight) {\n  return (%x)\n}\n",
       "t.ir:1:21: ", "unknown input kind 'weight' (expected param, input or mutated)"},
      {"unbalanced parentheses", kHead + "  %a = matmul(%x, %w\n  return (%a)\n}\n",
       "t.ir:3:3: ", "expected ')' or ',' in the argument list, got 'return'"},
      {"unbalanced brackets", kHead + "  %a = cat([%x, %x, dim=0)\n  return (%a)\n}\n",
       "t.ir:2:21: ", "expected an operand (%name), got 'dim'"},
      {"missing closing brace", kHead + "  return (%x)\n",
       "t.ir:3:1: ", "expected '}', got end of input"},
      {"trailing garbage", kHead + "  return (%x)\n}\nextra\n",
       "t.ir:4:1: ", "unexpected 'extra' after the end of the graph"},
      {"two graphs", kHead + "  return (%x)\n}\n" + kHead + "  return (%x)\n}\n",
       "t.ir:4:1: ", "exactly one graph"},
      {"shape function error", kHead + "  %a = matmul(%w, %x)\n  return (%a)\n}\n",
       "t.ir:2:8: ", "matmul: inner dimensions differ"},
      {"annotation mismatch", kHead + "  %a = matmul(%x, %w) : f32[s0,5]\n  return (%a)\n}\n",
       "t.ir:2:25: ", "type annotation f32[s0,5] does not match the type f32[s0,4]"},
      {"multi-result node",
       kHead + "  %a, %b = silu(%x) : (f32[s0,4], f32[s0,4])\n  return (%a)\n}\n",
       "t.ir:2:7: ", "operator silu produces 1 result, but 2 names are bound"},
      {"sym operand", kHead + "  %a = silu(%p)\n  return (%a)\n}\n",
       "t.ir:2:13: ", "%p is a sym; operands must be tensors"},
      {"unbound symbol",
       kHead + "  %a = rope(%x, pos0=q+1, theta=1.0, style=0)\n  return (%a)\n}\n",
       "t.ir:2:22: ", "symbol 'q' is not bound"},
      {"unbound symbol in an input", "graph @g(%x: f32[s0*2] input) {\n  return (%x)\n}\n",
       "t.ir:1:18: ", "symbol 's0' is not bound"},
      {"integer overflow",
       kHead + "  %a = full(shape=[99999999999999999999], value=0.0, dtype=f32)\n}\n",
       "t.ir:2:20: ", "integer literal '99999999999999999999' is too large"},
      {"size overflow",
       kHead + "  %a = full(shape=[1048576*1048576*1048576], value=0.0, dtype=f32)\n}\n",
       "t.ir:2:35: ", "size expression is too large"},
      {"deep nesting",
       kHead + "  %a = rope(%x, pos0=" + std::string(300, '(') + "1" + std::string(300, ')') +
           ", theta=1.0, style=0)\n}\n",
       "t.ir:2:278: ", "expression nested too deeply"},
      {"unexpected character", kHead + "  %a = silu(%x) ; \n}\n",
       "t.ir:2:17: ", "unexpected character ';'"},
      {"float expected", kHead + "  %a = mul_scalar(%x, value=true)\n  return (%a)\n}\n",
       "t.ir:2:29: ", "expected a float"},
      {"integer expected", kHead + "  %a = transpose(%x, dim0=0.5, dim1=0)\n  return (%a)\n}\n",
       "t.ir:2:27: ", "expected an integer, got '0.5'"},
      {"operand after attribute", kHead + "  %a = rms_norm(%x, eps=0.1, %w)\n  return (%a)\n}\n",
       "t.ir:2:30: ", "operand after attributes"},
      {"list where a tensor goes", kHead + "  %a = silu([%x])\n  return (%a)\n}\n",
       "t.ir:2:13: ", "operand 'x' is a single tensor"},
      {"undefined output", kHead + "  return (%nope)\n}\n",
       "t.ir:2:11: ", "use of undefined value %nope"},
      {"empty text", "", "t.ir:1:1: ", "expected 'graph', got end of input"},
  };
}

TEST(ir_text, every_malformed_input_is_an_error_at_its_position) {
  for (const ErrorCase& c : error_cases()) {
    SCOPED_TRACE(c.what);
    try {
      (void)ir::parse(c.text, "t.ir");
      ADD_FAILURE() << "no error for: " << c.text;
    } catch (const ir::IrError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.substr(0, c.where.size()), c.where) << msg;
      EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    }
  }
}

TEST(ir_text, error_location_is_kept_in_the_exception) {
  try {
    (void)ir::parse(kHead + "  %a = matmul(%x)\n}\n", "t.ir");
    FAIL();
  } catch (const ir::IrError& e) {
    EXPECT_EQ(e.loc().line, 2);
    EXPECT_EQ(e.loc().column, 8);
  }
}

// ---- bounds: hostile input is an error, quickly ----------------------------------

TEST(ir_text, a_shape_whose_product_expands_to_too_many_terms_is_an_error) {
  std::string dim = "a";
  for (const char* s : {"b", "c", "d", "e", "f", "g", "h", "i", "j"}) dim += std::string("+") + s;
  std::string text = "graph @g(";
  for (const char* s : {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"})
    text += std::string("%") + s + ": sym, ";
  text +=
      "%x: f32[" + dim + "," + dim + "," + dim + "," + dim + "," + dim + "," + dim + "] input) {\n";
  text += "  %y = view(%x, shape=[-1])\n  return (%y)\n}\n";
  try {
    (void)ir::parse(text, "t.ir");
    FAIL() << "accepted";
  } catch (const ir::IrError& e) {
    EXPECT_NE(std::string(e.what()).find("too many terms"), std::string::npos) << e.what();
  }
}

// Each slice with step 2 nests one more floor in its result's size: the parser
// stops at the nesting limit, and everything below it round-trips.
TEST(ir_text, floor_nesting_is_bounded_and_round_trips) {
  std::string text = "graph @g(%x: f32[s0] input) {\n";
  std::string last = "x";
  SymInt size = SymInt::symbol("s0");
  for (int i = 0; i < 40; ++i) {
    const std::string name = "v" + std::to_string(i);
    text +=
        "  %" + name + " = slice(%" + last + ", dim=0, start=0, end=" + size.str() + ", step=2)\n";
    size = sinkgraph::floordiv(size + 1, 2);
    last = name;
  }
  text += "  return (%" + last + ")\n}\n";
  try {
    (void)ir::parse(text, "t.ir");
    FAIL() << "accepted";
  } catch (const ir::IrError& e) {
    EXPECT_NE(std::string(e.what()).find("floor/mod nested too deeply"), std::string::npos)
        << e.what();
    // Cut the graph just before the failing node: it parses and round-trips.
    const int bad_line = e.loc().line;
    EXPECT_GT(bad_line, 30);
    std::string kept;
    std::istringstream in(text);
    std::string line;
    std::string prev = "x";
    for (int n = 1; std::getline(in, line) && n < bad_line; ++n) {
      kept += line + "\n";
      if (n > 1) prev = line.substr(3, line.find(' ', 3) - 3);
    }
    kept += "  return (%" + prev + ")\n}\n";
    const auto g = ir::parse(kept, "kept.ir");
    const std::string printed = ir::print(*g);
    EXPECT_EQ(ir::print(*ir::parse(printed)), printed);
  }
}

// ---- floats -------------------------------------------------------------------

TEST(ir_text, floats_print_shortest_and_round_trip_bit_exactly) {
  const std::vector<std::pair<double, std::string>> cases = {
      {1e-5, "1e-05"},
      {10000.0, "10000.0"},
      {0.5, "0.5"},
      {0.1, "0.1"},
      {-0.0, "-0.0"},
      {1.0 / 3, "0.3333333333333333"},
      {1e300, "1e+300"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& [value, spelling] : cases) {
    ir::Graph g("f");
    ir::Value* x = g.add_input("x", TensorMeta{DType::f32, SymShape{2}}, ir::InputKind::input);
    ir::Node* n =
        g.add_node(OpRegistry::instance().get("mul_scalar"), {x}, {{"value", value}}, "y");
    g.outputs.push_back(n->result());
    const std::string text = ir::print(g);
    EXPECT_NE(text.find("value=" + spelling + ")"), std::string::npos) << text;
    const auto back = ir::parse(text);
    const double got = std::get<double>(back->nodes().front()->attrs[0].value);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got), std::bit_cast<std::uint64_t>(value)) << spelling;
    }
    EXPECT_EQ(ir::print(*back), text);
  }
}

// ---- the interpreter on a parsed graph ------------------------------------------

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

TEST(ir_text, interpreting_the_parsed_mlp_equals_the_eager_ops_bitwise) {
  const auto g = ir::parse(read_file(golden("mlp.ir")), "mlp.ir");
  std::mt19937 rng(7);
  for (const std::int64_t batch : {1, 3, 5}) {
    const Tensor x = Tensor::from_floats(random_floats(batch * 64, rng), {batch, 64});
    const Tensor w1 = Tensor::from_floats(random_floats(64 * 256, rng), {64, 256});
    const Tensor w2 = Tensor::from_floats(random_floats(256 * 64, rng), {256, 64});
    const std::vector<ir::RtValue> inputs = {x, w1, w2};
    const auto out = ir::interpret(*g, inputs);
    ASSERT_EQ(out.size(), 1U);
    const Tensor want = ops::matmul(ops::silu(ops::matmul(x, w1)), w2);
    const Tensor& got = std::get<Tensor>(out[0]);
    ASSERT_EQ(got.shape(), want.shape());
    const auto a = got.to_floats();
    const auto b = want.to_floats();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << i;
    }
  }
}

TEST(ir_text, interpreting_the_attention_step_writes_the_cache_at_pos) {
  const auto g = ir::parse(read_file(golden("attention.ir")));
  std::mt19937 rng(3);
  auto make = [&](sinkgraph::Shape shape) {
    return Tensor::from_floats(
        random_floats(static_cast<std::size_t>(sinkgraph::numel(shape)), rng), shape);
  };
  const Tensor kcache = ops::zeros(SymShape{128, 2, 16});
  const Tensor vcache = ops::zeros(SymShape{128, 2, 16});
  const std::vector<ir::RtValue> inputs = {make({1, 64}),  std::int64_t{5}, make({64}),
                                           make({64, 64}), make({64, 32}),  make({64, 32}),
                                           kcache,         vcache};
  const auto out = ir::interpret(*g, inputs);
  ASSERT_EQ(out.size(), 3U);
  const auto k = kcache.to_floats();
  float row5 = 0.0F;
  float row6 = 0.0F;
  for (int i = 0; i < 32; ++i) {
    row5 += std::abs(k[5 * 32 + i]);
    row6 += std::abs(k[6 * 32 + i]);
  }
  EXPECT_GT(row5, 0.0F);
  EXPECT_EQ(row6, 0.0F);
}

// ---- the verifier -----------------------------------------------------------------

const sinkgraph::OpDef& op(const char* name) { return OpRegistry::instance().get(name); }

// A built graph: %x: f32[s0,4], %w: f32[4,4], %pos: sym; %h = matmul; %r = rope.
std::unique_ptr<ir::Graph> built_graph() {
  auto g = std::make_unique<ir::Graph>("built");
  const SymInt s0 = SymInt::symbol("s0");
  ir::Value* x =
      g->add_input("x", TensorMeta{DType::f32, SymShape{s0, 2, 4}}, ir::InputKind::input);
  ir::Value* w = g->add_input("w", TensorMeta{DType::f32, SymShape{4, 4}}, ir::InputKind::param);
  g->add_sym_input("pos");
  ir::Node* h = g->add_node(op("matmul"), {x, w}, {}, "h");
  ir::Node* r = g->add_node(
      op("rope"), {h->result()},
      {{"pos0", SymInt::symbol("pos") + 1}, {"theta", 10000.0}, {"style", SymInt(0)}}, "r");
  g->outputs.push_back(r->result());
  return g;
}

void expect_verify_error(const ir::Graph& g, const std::string& substring) {
  try {
    ir::verify(g, "g.ir");
    ADD_FAILURE() << "verify accepted the graph; expected: " << substring;
  } catch (const ir::IrError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("g.ir: ", 0), 0U) << msg;
    EXPECT_NE(msg.find(substring), std::string::npos) << msg;
  }
}

ir::Node* node_named(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes()) {
    if (n->result()->name == name) return n.get();
  }
  return nullptr;
}

TEST(ir_verify, accepts_built_and_parsed_graphs) {
  const auto g = built_graph();
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_NO_THROW(ir::verify(*ir::parse(ir::print(*g))));
  EXPECT_EQ(ir::print(*ir::parse(ir::print(*g))), ir::print(*g));
}

TEST(ir_verify, rejects_a_use_before_its_definition) {
  auto g = built_graph();
  ir::Node* h = node_named(*g, "h");
  // A node placed before %h that reads %h.
  g->add_node(op("silu"), {h->result()}, {}, "early", h);
  expect_verify_error(*g, "node %early (silu): operand %h is not defined before its use");
}

TEST(ir_verify, rejects_wrong_arity_and_attributes) {
  auto g = built_graph();
  node_named(*g, "h")->operands.pop_back();
  expect_verify_error(*g, "node %h (matmul): matmul expects 2 tensor operands, got 1");
  g = built_graph();
  node_named(*g, "r")->attrs[1].name = "beta";
  expect_verify_error(*g, "attribute 1 is 'beta'; expected 'theta'");
  g = built_graph();
  node_named(*g, "r")->attrs.pop_back();
  expect_verify_error(*g, "node %r (rope): expected 3 attributes, got 2");
  g = built_graph();
  node_named(*g, "r")->attrs[1].value = true;
  expect_verify_error(*g, "attribute 'theta' must be float");
}

TEST(ir_verify, rejects_an_unknown_operator) {
  auto g = built_graph();
  static sinkgraph::OpDef stray = op("silu");  // not the registered definition
  node_named(*g, "h")->op = &stray;
  expect_verify_error(*g, "node %h: unknown operator 'silu'");
}

TEST(ir_verify, rejects_a_result_meta_that_disagrees_with_the_shape_function) {
  auto g = built_graph();
  node_named(*g, "h")->result()->meta.shape = SymShape{SymInt::symbol("s0"), 2, 5};
  expect_verify_error(*g, "result has type f32[s0,2,5] but matmul infers f32[s0,2,4]");
  g = built_graph();
  node_named(*g, "h")->result()->meta.dtype = DType::f16;
  expect_verify_error(*g, "result has type f16[s0,2,4]");
}

TEST(ir_verify, rejects_a_shape_function_error) {
  auto g = built_graph();
  ir::Node* h = node_named(*g, "h");
  std::swap(h->operands[0], h->operands[1]);
  expect_verify_error(*g, "node %h (matmul): matmul:");
}

TEST(ir_verify, rejects_unbound_symbols_and_undefined_outputs) {
  auto g = built_graph();
  node_named(*g, "r")->attrs[0].value = SymInt::symbol("nope");
  expect_verify_error(*g, "attribute 'pos0' uses symbol 'nope', which no input binds");
  g = built_graph();
  ir::Graph other;
  ir::Value* stranger =
      other.add_input("z", TensorMeta{DType::f32, SymShape{1}}, ir::InputKind::input);
  g->outputs.push_back(stranger);
  expect_verify_error(*g, "output %z is not a defined value");
}

TEST(ir_verify, rejects_names_that_do_not_print) {
  auto g = built_graph();
  ir::Graph bad("bad");
  bad.add_input("has space", TensorMeta{DType::f32, SymShape{1}}, ir::InputKind::input);
  expect_verify_error(bad, "value name 'has space' is not a valid IR name");
}

// An operator whose updatable argument (wrongly) sets the result's length.
sinkgraph::TensorMeta bad_updatable_shape(const sinkgraph::ShapeArgs& args) {
  return {DType::f32, SymShape{args.sym(0)}, sinkgraph::DeviceType::cpu};
}

TEST(ir_verify, rejects_an_updatable_attribute_that_determines_a_shape) {
  if (OpRegistry::instance().find("ir_test_bad_updatable") == nullptr) {
    sinkgraph::OpDef def;
    def.schema.name = "ir_test_bad_updatable";
    def.schema.args = {{"n", sinkgraph::ArgKind::integer, /*updatable=*/true}};
    def.shape_fn = bad_updatable_shape;
    OpRegistry::instance().add(std::move(def));
  }
  ir::Graph g("u");
  g.add_sym_input("pos");
  ir::Node* n = g.add_node(op("ir_test_bad_updatable"), {}, {{"n", SymInt::symbol("pos")}}, "y");
  g.outputs.push_back(n->result());
  expect_verify_error(
      g, "attribute 'n' of ir_test_bad_updatable is updatable but determines the result shape");
  // rope's and attention's updatable attributes do not: the built graph passes.
  EXPECT_NO_THROW(ir::verify(*built_graph()));
}

}  // namespace

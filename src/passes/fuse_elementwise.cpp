// fuse_elementwise (max-autotune): a tree of elementwise operators whose
// intermediate results each have a single use becomes ONE fused_elementwise
// node (Note [Fused elementwise programs] in src/kernels/fused_program.h).
//
// Fused: neg exp sqrt rsqrt erf relu silu gelu add_scalar mul_scalar (unary)
// and add sub mul div (binary, same shape or broadcast), on floating dtypes.
// Walking the nodes from the last, each elementwise node not yet absorbed is
// a root; an operand produced by an elementwise node that nobody else reads
// (no other node, no graph output) is absorbed into the root's program, the
// rest become the fused node's inputs. The fused node keeps the root's name
// and position.
//
// Soundness. The program computes what the chain computed, element for
// element: the shape is the broadcast of the inputs (the broadcast of a tree
// of broadcasts), each step is the same f32 formula, and f16/bf16 results are
// rounded where the chain stored them, so the fused node is bitwise equal.
// Intermediates had no other reader, so nothing else loses a value. The
// fused node reads its inputs at the root's position, later than the
// absorbed nodes did: a chain whose inputs share storage with a tensor
// written in place anywhere in the graph is not fused.
//
// Bounds. A program holds at most 16 instructions, 5 inputs, 6 constants
// and a stack of 8. An operand whose subtree would not fit becomes an input
// instead, and is then fused as a root of its own: long chains are split.
#include <algorithm>
#include <bit>
#include <unordered_map>

#include "../kernels/fused_program.h"
#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

namespace fp = kernels::fused;

struct OpCode {
  fp::Opcode opcode;
  int fn;  // unary/binary function; -1 for the scalar forms
};

const OpCode* opcode_for(const std::string& name) {
  static const std::unordered_map<std::string, OpCode> table = {
      {"neg", {fp::kUnary, fp::kNeg}},         {"exp", {fp::kUnary, fp::kExp}},
      {"sqrt", {fp::kUnary, fp::kSqrt}},       {"rsqrt", {fp::kUnary, fp::kRsqrt}},
      {"erf", {fp::kUnary, fp::kErf}},         {"relu", {fp::kUnary, fp::kRelu}},
      {"silu", {fp::kUnary, fp::kSilu}},       {"gelu", {fp::kUnary, fp::kGelu}},
      {"add", {fp::kBinary, fp::kAdd}},        {"sub", {fp::kBinary, fp::kSub}},
      {"mul", {fp::kBinary, fp::kMul}},        {"div", {fp::kBinary, fp::kDiv}},
      {"add_scalar", {fp::kAddConst, -1}},     {"mul_scalar", {fp::kMulConst, -1}},
  };
  const auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

bool is_fusable(const ir::Node& node) {
  return node.results.size() == 1 && opcode_for(node.op_name()) != nullptr &&
         is_floating(node.result()->meta.dtype);
}

// Emits a program for one root, absorbing what fits.
class Builder {
 public:
  Builder(const ir::Graph& graph, const std::unordered_set<const ir::Value*>& mutated)
      : graph_(graph), mutated_(mutated) {}

  // Emits the program of `root`; false when it does not fit even with every
  // operand as an input.
  bool emit_root(ir::Node* root) { return emit_node(root, 0); }

  std::vector<std::int64_t> code;
  std::vector<ir::Value*> inputs;
  std::vector<double> consts;
  std::vector<ir::Node*> absorbed;

 private:
  struct Snapshot {
    std::size_t code, inputs, consts, absorbed;
    int depth;
  };
  Snapshot snap() const { return {code.size(), inputs.size(), consts.size(), absorbed.size(), depth_}; }
  void rollback(const Snapshot& s) {
    code.resize(s.code);
    inputs.resize(s.inputs);
    consts.resize(s.consts);
    absorbed.resize(s.absorbed);
    depth_ = s.depth;
  }

  bool push(std::int64_t instr, int depth_change) {
    if (code.size() >= static_cast<std::size_t>(fp::kMaxCode)) return false;
    depth_ += depth_change;
    if (depth_ > fp::kMaxStack) return false;
    code.push_back(instr);
    return true;
  }

  bool emit_input(ir::Value* v) {
    if (mutated_.contains(detail::alias_root(v))) return false;
    auto it = std::find(inputs.begin(), inputs.end(), v);
    if (it == inputs.end()) {
      if (inputs.size() >= static_cast<std::size_t>(fp::kMaxInputs)) return false;
      inputs.push_back(v);
      it = inputs.end() - 1;
    }
    return push(fp::encode(fp::kLoad, static_cast<int>(it - inputs.begin())), 1);
  }

  bool absorbable(const ir::Value* v) const {
    const ir::Node* p = v->producer;
    return p != nullptr && is_fusable(*p) && graph_.num_uses(v) == 1 && !mutated_.contains(v);
  }

  // An operand: absorbed when it fits, else an input.
  bool emit_operand(ir::Value* v, int level) {
    // Each absorbed node costs an instruction: deeper than that never fits.
    if (absorbable(v) && level < fp::kMaxCode) {
      const Snapshot s = snap();
      if (emit_node(v->producer, level + 1)) return true;
      rollback(s);
    }
    return emit_input(v);
  }

  bool emit_node(ir::Node* node, int level) {
    const OpCode& oc = *opcode_for(node->op_name());
    for (ir::Value* operand : node->operands) {
      if (!emit_operand(operand, level)) return false;
    }
    if (level > 0) absorbed.push_back(node);
    switch (oc.opcode) {
      case fp::kUnary:
        return push(fp::encode(fp::kUnary, oc.fn), 0);
      case fp::kBinary:
        return push(fp::encode(fp::kBinary, oc.fn), -1);
      default: {
        const double value = std::get<double>(*node->attr("value"));
        auto it = std::find_if(consts.begin(), consts.end(), [&](double c) {
          return std::bit_cast<std::uint64_t>(c) == std::bit_cast<std::uint64_t>(value);
        });
        if (it == consts.end()) {
          if (consts.size() >= static_cast<std::size_t>(fp::kMaxConsts)) return false;
          consts.push_back(value);
          it = consts.end() - 1;
        }
        return push(fp::encode(oc.opcode, static_cast<int>(it - consts.begin())), 0);
      }
    }
  }

  const ir::Graph& graph_;
  const std::unordered_set<const ir::Value*>& mutated_;
  int depth_ = 0;
};

}  // namespace

void fuse_elementwise(ir::Graph& graph, PassContext& /*ctx*/) {
  const OpDef& fused_op = OpRegistry::instance().get("fused_elementwise");
  const auto mutated = detail::mutated_roots(graph);
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());
  std::unordered_set<const ir::Node*> gone;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node* root = *it;
    if (gone.contains(root) || !is_fusable(*root) || mutated.contains(root->result())) continue;
    Builder b(graph, mutated);
    if (!b.emit_root(root) || b.absorbed.empty()) continue;
    std::vector<ir::NamedAttr> attrs;
    attrs.push_back({"code", std::vector<SymInt>(b.code.begin(), b.code.end())});
    for (int c = 0; c < fp::kMaxConsts; ++c) {
      const auto i = static_cast<std::size_t>(c);
      attrs.push_back({"c" + std::to_string(c), i < b.consts.size() ? b.consts[i] : 0.0});
    }
    detail::replace_node(graph, root, fused_op, b.inputs, std::move(attrs));
    // The absorbed nodes are read only inside the tree: erase them users first.
    std::vector<ir::Node*> absorbed = b.absorbed;
    std::sort(absorbed.begin(), absorbed.end(), [&](const ir::Node* x, const ir::Node* y) {
      return std::find(nodes.begin(), nodes.end(), x) > std::find(nodes.begin(), nodes.end(), y);
    });
    for (ir::Node* n : absorbed) {
      graph.erase(n);
      gone.insert(n);
    }
  }
}

}  // namespace sinkgraph::passes

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
// Bounds. A program holds at most 18 instructions, 5 inputs, 5 constants
// and a stack of 8. An operand whose subtree would not fit becomes an input
// instead, and is then fused as a root of its own: long chains are split.
//
// Cost: O(nodes) programs of bounded size, each absorbed node erased in O(1):
// near-linear in nodes.
#include <algorithm>
#include <bit>
#include <optional>
#include <unordered_map>

#include "../kernels/fused_program.h"
#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

namespace fp = kernels::fused;

// The instruction a pointwise operator becomes (its traits say how: Note
// [Operator traits]); nullopt for any other operator.
struct OpCode {
  Pointwise form;
  int fn;
};

std::optional<OpCode> opcode_for(const OpDef& op) {
  if (op.traits.pointwise == Pointwise::none) return std::nullopt;
  return OpCode{op.traits.pointwise, op.traits.pointwise_fn};
}

bool is_fusable(const ir::Node& node) {
  return node.results.size() == 1 && opcode_for(*node.op).has_value() &&
         is_floating(node.result()->meta.dtype);
}

// Emits a program for one root, absorbing what fits.
//
// Absorption is greedy, operands first, so budget must be kept for what is
// still to come: while a node's operands are emitted, its own instruction
// (and constant) and at least one instruction and one input for each operand
// not yet emitted are reserved. An operand that does not fit in what is left
// rolls back and becomes an input, which the reservation guarantees room for.
class Builder {
 public:
  Builder(const std::unordered_map<const ir::Value*, int>& uses,
          const std::unordered_set<const ir::Value*>& mutated, detail::AliasRoots& roots)
      : uses_(uses), mutated_(mutated), roots_(roots) {}

  // Emits the program of `root`; false when it does not fit even with every
  // operand as an input.
  bool emit_root(ir::Node* root) { return emit_node(root, 0); }

  std::vector<std::int64_t> code;
  std::vector<ir::Value*> inputs;
  std::vector<double> consts;
  std::vector<ir::Node*> absorbed;

 private:
  struct State {
    std::size_t code, inputs, consts, absorbed;
    int depth, reserved_code, reserved_inputs, reserved_consts;
  };
  State save() const {
    return {code.size(), inputs.size(),  consts.size(),    absorbed.size(),
            depth_,      reserved_code_, reserved_inputs_, reserved_consts_};
  }
  void restore(const State& s) {
    code.resize(s.code);
    inputs.resize(s.inputs);
    consts.resize(s.consts);
    absorbed.resize(s.absorbed);
    depth_ = s.depth;
    reserved_code_ = s.reserved_code;
    reserved_inputs_ = s.reserved_inputs;
    reserved_consts_ = s.reserved_consts;
  }

  bool push(std::int64_t instr, int depth_change) {
    if (static_cast<int>(code.size()) + 1 + reserved_code_ > fp::kMaxCode) return false;
    if (depth_ + depth_change > fp::kMaxStack) return false;
    depth_ += depth_change;
    code.push_back(instr);
    return true;
  }

  bool emit_input(ir::Value* v) {
    if (mutated_.contains(roots_.find(v))) return false;
    auto it = std::find(inputs.begin(), inputs.end(), v);
    if (it == inputs.end()) {
      if (static_cast<int>(inputs.size()) + 1 + reserved_inputs_ > fp::kMaxInputs) return false;
      inputs.push_back(v);
      it = inputs.end() - 1;
    }
    return push(fp::encode(fp::kLoad, static_cast<int>(it - inputs.begin())), 1);
  }

  bool absorbable(const ir::Value* v) const {
    const ir::Node* p = v->producer;
    const auto it = uses_.find(v);
    return p != nullptr && is_fusable(*p) && it != uses_.end() && it->second == 1 &&
           !mutated_.contains(v);
  }

  // An operand: absorbed when it fits, else an input.
  bool emit_operand(ir::Value* v, int level) {
    // Each absorbed node costs an instruction: deeper than that never fits.
    if (absorbable(v) && level < fp::kMaxCode) {
      const State s = save();
      if (emit_node(v->producer, level + 1)) return true;
      restore(s);
    }
    return emit_input(v);
  }

  bool emit_node(ir::Node* node, int level) {
    const OpCode oc = *opcode_for(*node->op);
    const bool scalar = oc.form == Pointwise::add_scalar || oc.form == Pointwise::mul_scalar;
    const auto n = static_cast<int>(node->operands.size());
    reserved_code_ += 1 + n;
    reserved_inputs_ += n;
    reserved_consts_ += scalar ? 1 : 0;
    for (ir::Value* operand : node->operands) {
      --reserved_code_;
      --reserved_inputs_;
      if (!emit_operand(operand, level)) return false;
    }
    --reserved_code_;
    if (level > 0) absorbed.push_back(node);
    switch (oc.form) {
      case Pointwise::unary:
        return push(fp::encode_unary(oc.fn), 0);
      case Pointwise::binary:
        return push(fp::encode(fp::kBinary, oc.fn), -1);
      default: {  // add_scalar, mul_scalar
        --reserved_consts_;
        const double value = std::get<double>(*node->attr("value"));
        auto it = std::find_if(consts.begin(), consts.end(), [&](double c) {
          return std::bit_cast<std::uint64_t>(c) == std::bit_cast<std::uint64_t>(value);
        });
        if (it == consts.end()) {
          if (static_cast<int>(consts.size()) + 1 + reserved_consts_ > fp::kMaxConsts) return false;
          consts.push_back(value);
          it = consts.end() - 1;
        }
        const fp::Opcode opcode = oc.form == Pointwise::add_scalar ? fp::kAddConst : fp::kMulConst;
        return push(fp::encode(opcode, static_cast<int>(it - consts.begin())), 0);
      }
    }
  }

  // Counted once before any fusion. A fusion only lowers the count of values
  // the fused node reads, and the fused node is no elementwise operator, so a
  // stale count never lets a value be absorbed that should not be.
  const std::unordered_map<const ir::Value*, int>& uses_;
  const std::unordered_set<const ir::Value*>& mutated_;
  detail::AliasRoots& roots_;
  int depth_ = 0;
  int reserved_code_ = 0;
  int reserved_inputs_ = 0;
  int reserved_consts_ = 0;
};

}  // namespace

void fuse_elementwise(ir::Graph& graph, PassContext& /*ctx*/) {
  const OpDef& fused_op = OpRegistry::instance().get("fused_elementwise");
  const auto mutated = detail::mutated_roots(graph);
  const auto uses = detail::use_counts(graph);
  detail::AliasRoots roots;
  std::vector<ir::Node*> nodes;
  std::unordered_map<const ir::Node*, std::size_t> position;
  for (const auto& node : graph.nodes()) {
    position.emplace(node.get(), nodes.size());
    nodes.push_back(node.get());
  }
  std::unordered_set<const ir::Node*> gone;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node* root = *it;
    if (gone.contains(root) || !is_fusable(*root) || mutated.contains(root->result())) continue;
    Builder b(uses, mutated, roots);
    if (!b.emit_root(root) || b.absorbed.empty()) continue;
    std::vector<ir::NamedAttr> attrs;
    attrs.reserve(fp::kCodeSlots + fp::kMaxConsts);
    std::int64_t slots[fp::kCodeSlots];
    fp::pack_program(b.code, slots);
    for (int c = 0; c < fp::kCodeSlots; ++c) {
      attrs.push_back({"code" + std::to_string(c), SymInt(slots[c])});
    }
    for (int c = 0; c < fp::kMaxConsts; ++c) {
      const auto i = static_cast<std::size_t>(c);
      attrs.push_back({"c" + std::to_string(c), i < b.consts.size() ? b.consts[i] : 0.0});
    }
    detail::replace_node(graph, root, fused_op, b.inputs, std::move(attrs));
    // The absorbed nodes are read only inside the tree: erase them users first.
    std::vector<ir::Node*> absorbed = b.absorbed;
    std::sort(absorbed.begin(), absorbed.end(), [&](const ir::Node* x, const ir::Node* y) {
      return position.at(x) > position.at(y);
    });
    for (ir::Node* n : absorbed) {
      graph.erase(n);
      gone.insert(n);
    }
  }
}

}  // namespace sinkgraph::passes

#pragma once
// The graph IR: an FX-like graph of operator nodes over values (docs/ir.md).
//
// A Graph has inputs (each with a kind: param, input, mutated, sym), nodes in
// program order, and outputs. A Node applies one registered operator (its
// OpDef: the same definition the eager dispatcher runs) to tensor operands and
// named attributes, and produces result values whose meta (dtype; shape with
// symbolic dims) comes from the operator's shape function. In-place operators
// stay in-place nodes; their result is a new name for the mutated tensor.
//
// Note [Symbols in the IR]
// A symbol is bound either by a `sym` input of the same name (an integer the
// caller passes), or by the first input tensor dimension that is exactly that
// symbol (`%x: f32[s0,64]` binds s0 to x's dim 0). Attributes and shapes are
// canonical SymInt expressions over bound symbols (`seq_len=pos+1`).
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "sinkgraph/error.h"
#include "sinkgraph/export.h"
#include "sinkgraph/op_registry.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::ir {

enum class InputKind : std::uint8_t { param, input, mutated, sym };
SG_API const char* input_kind_name(InputKind kind);
SG_API bool parse_input_kind(std::string_view text, InputKind& out);

// 1-based line and column in the text a graph was parsed from; 0 when the
// graph was built in code.
struct SourceLoc {
  int line = 0;
  int column = 0;
};

// An error in IR text or a malformed graph: "file:line:column: message".
class SG_API IrError : public Error {
 public:
  IrError(const std::string& file, SourceLoc loc, const std::string& message);
  [[nodiscard]] SourceLoc loc() const { return loc_; }

 private:
  SourceLoc loc_;
};

class Node;

class SG_API Value {
 public:
  std::string name;  // printed as %name
  bool is_sym = false;
  TensorMeta meta;                    // tensors only
  InputKind kind = InputKind::input;  // graph inputs only
  Node* producer = nullptr;           // null for graph inputs
  int result_index = 0;
  SourceLoc loc;

  [[nodiscard]] bool is_input() const { return producer == nullptr; }
};

using Attr = ScalarValue;
struct NamedAttr {
  std::string name;
  Attr value;
};

// Note [Placement hints]
// Two node fields, set by the max-autotune passes and printed as trailing
// pseudo-attributes (docs/ir.md, "Placement hints"), say where a fresh
// operator's result lives instead of a fresh allocation:
// - `reuse` (`reuse=%a`): the result is written into the memory of operand
//   `reuse` (same dtype, shape and layout), which dies at this node (or is a
//   `mutated` input the graph may write). The result is then a new name for
//   that storage, exactly like an in-place operator's result.
// - `placed` (`placed=true`, cat only): each operand was produced directly
//   into its slice of this node's result, so the cat copies nothing; the
//   result's memory exists from the first operand's producer on.
// Both are properties of memory only: ignoring them computes the same values.
class SG_API Node {
 public:
  const OpDef* op = nullptr;
  std::vector<Value*> operands;  // tensor arguments in schema order (lists expanded)
  std::vector<NamedAttr> attrs;  // non-tensor arguments in schema order
  std::vector<Value*> results;
  SourceLoc loc;
  int reuse = -1;       // Note [Placement hints]: operand whose memory holds the result
  bool placed = false;  // Note [Placement hints]: cat whose operands were produced in place

  // The operand whose storage the result shares (a view, an in-place
  // operator's mutated tensor, or `reuse`), or -1 for fresh memory.
  [[nodiscard]] int aliased_operand() const {
    return op->schema.alias_of >= 0 ? op->schema.alias_of : reuse;
  }

  [[nodiscard]] const std::string& op_name() const { return op->schema.name; }
  [[nodiscard]] const Attr* attr(std::string_view name) const;
  [[nodiscard]] Value* result() const { return results.at(0); }
  // Scalars in schema order, as shape functions and the dispatcher take them.
  [[nodiscard]] std::vector<ScalarValue> scalar_args() const;
};

class SG_API Graph {
 public:
  explicit Graph(std::string name = "main");
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name;

  Value* add_input(const std::string& name, const TensorMeta& meta, InputKind kind);
  Value* add_sym_input(const std::string& name);
  // Appends a node before `before` (or at the end when null). Its result meta
  // comes from the operator's shape function; `result_name` empty picks a
  // fresh name. Throws sinkgraph::Error when the shape function rejects it.
  Node* add_node(const OpDef& op, std::vector<Value*> operands, std::vector<NamedAttr> attrs,
                 const std::string& result_name = "", Node* before = nullptr);
  // Removes a node whose results have no uses (checked in debug builds: the
  // check walks the graph). O(1).
  void erase(Node* node);
  // Makes `node` compute `op` over `operands` and `attrs` instead, in place:
  // same position, same result value (name and uses kept); the result's meta
  // is inferred again. Single-result nodes. O(1) but for the shape function.
  void rewrite(Node* node, const OpDef& op, std::vector<Value*> operands,
               std::vector<NamedAttr> attrs);
  // Rewrites every operand and output use of `from` to `to`. O(nodes): a
  // pass replacing many values resolves them in its own walk instead
  // (passes::detail::Replacements).
  void replace_all_uses(Value* from, Value* to);
  // O(nodes): passes count uses once (use_counts in src/passes) instead.
  [[nodiscard]] std::size_t num_uses(const Value* value) const;

  [[nodiscard]] const std::vector<Value*>& inputs() const { return inputs_; }
  [[nodiscard]] const std::list<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*> outputs;

  [[nodiscard]] Value* find(std::string_view name) const;
  [[nodiscard]] std::string fresh_name(std::string_view hint = "v");
  // A deep copy with the same names.
  [[nodiscard]] std::unique_ptr<Graph> clone() const;

 private:
  Value* new_value(const std::string& name);
  std::unordered_map<const Value*, std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::list<std::unique_ptr<Node>> nodes_;
  // Each node's place in nodes_, so erase and insert-before are O(1).
  std::unordered_map<const Node*, std::list<std::unique_ptr<Node>>::iterator> where_;
  std::uint64_t next_id_ = 0;
};

// Runs the operator's shape function on a node's operands and attributes.
SG_API TensorMeta infer_meta(const Node& node);

// Text form (docs/ir.md). print(parse(t)) == t for printed text t, and
// parse(print(g)) reproduces g.
SG_API std::string print(const Graph& graph);
SG_API std::unique_ptr<Graph> parse(std::string_view text, const std::string& file = "<input>");

// Checks a graph: definitions before uses, known operators, arity, dtype and
// shape agreement with the shape functions (symbolic dims included), that no
// updatable attribute determines a shape, and the outputs. Throws IrError.
SG_API void verify(const Graph& graph, const std::string& file = "<graph>");

// A runtime value for a graph input or output: a tensor or a sym's integer.
using RtValue = std::variant<Tensor, std::int64_t>;

// Symbol bindings from the inputs (Note [Symbols in the IR]).
SG_API SymBindings bind_symbols(const Graph& graph, std::span<const RtValue> inputs);

// Runs the graph through the eager dispatcher on the current stream. The
// observer, when given, sees every node's output as it is produced. Without a
// runner, each intermediate is let go after its last reader is launched
// (Note [Intermediates die at their last reader] in interpreter.cpp).
using NodeObserver = std::function<void(const Node& node, const Tensor& output)>;
// Where a fresh node result goes (Note [Output placement] in op_registry.h): a
// tensor of the result's concrete shape and dtype, or an undefined tensor to
// let the dispatcher allocate. interpret() asks it for every node with fresh
// memory (no view, no in-place operator, no `reuse`, and not an operand of a
// `placed` cat, whose memory is the cat's: the cat is asked before its first
// operand is produced). A memory plan is one (passes::MemoryPlan).
using PlacementFn = std::function<Tensor(const Node& node)>;
// Runs one node instead of the dispatcher (a capture that generates code
// for some nodes): the node, its operands and concrete scalars, and its placed
// output (undefined when none); returns the node's result as run_op would.
using NodeRunner =
    std::function<Tensor(const Node& node, std::span<const Tensor* const> operands,
                         std::span<const ScalarValue> scalars, const Tensor& placed)>;
SG_API std::vector<RtValue> interpret(const Graph& graph, std::span<const RtValue> inputs,
                                      const NodeObserver& observer = {},
                                      const PlacementFn& placement = {},
                                      const NodeRunner& runner = {});

}  // namespace sinkgraph::ir

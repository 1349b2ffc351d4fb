#include <algorithm>
#include <unordered_set>

#include "sinkgraph/ir.h"

namespace sinkgraph::ir {

const char* input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::param:
      return "param";
    case InputKind::input:
      return "input";
    case InputKind::mutated:
      return "mutated";
    case InputKind::sym:
      return "sym";
  }
  return "?";
}

bool parse_input_kind(std::string_view text, InputKind& out) {
  for (const InputKind k :
       {InputKind::param, InputKind::input, InputKind::mutated, InputKind::sym}) {
    if (text == input_kind_name(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

namespace {
std::string format_loc(const std::string& file, SourceLoc loc, const std::string& message) {
  if (loc.line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": " + message;
}
}  // namespace

IrError::IrError(const std::string& file, SourceLoc loc, const std::string& message)
    : Error(format_loc(file, loc, message)), loc_(loc) {}

const Attr* Node::attr(std::string_view name) const {
  for (const auto& a : attrs) {
    if (a.name == name) return &a.value;
  }
  return nullptr;
}

std::vector<ScalarValue> Node::scalar_args() const {
  std::vector<ScalarValue> out;
  out.reserve(attrs.size());
  for (const auto& a : attrs) out.push_back(a.value);
  return out;
}

Graph::Graph(std::string graph_name) : name(std::move(graph_name)) {}

Value* Graph::new_value(const std::string& value_name) {
  SG_CHECK(!value_name.empty(), "a value needs a name");
  SG_CHECK(!by_name_.contains(value_name), "value %", value_name, " is defined twice");
  auto owned = std::make_unique<Value>();
  Value* v = owned.get();
  values_.emplace(v, std::move(owned));
  v->name = value_name;
  by_name_.emplace(value_name, v);
  return v;
}

Value* Graph::add_input(const std::string& input_name, const TensorMeta& meta, InputKind kind) {
  SG_CHECK(kind != InputKind::sym, "add_input: use add_sym_input for sym inputs");
  Value* v = new_value(input_name);
  v->meta = meta;
  v->kind = kind;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_sym_input(const std::string& input_name) {
  Value* v = new_value(input_name);
  v->is_sym = true;
  v->kind = InputKind::sym;
  inputs_.push_back(v);
  return v;
}

TensorMeta infer_meta(const Node& node) {
  std::vector<TensorMeta> metas;
  metas.reserve(node.operands.size());
  for (const Value* v : node.operands) {
    SG_CHECK(!v->is_sym, node.op_name(), ": operand %", v->name, " is a sym; expected a tensor");
    metas.push_back(v->meta);
  }
  const std::vector<ScalarValue> scalars = node.scalar_args();
  return node.op->shape_fn(ShapeArgs{metas, scalars});
}

Node* Graph::add_node(const OpDef& op, std::vector<Value*> operands, std::vector<NamedAttr> attrs,
                      const std::string& result_name, Node* before) {
  auto node = std::make_unique<Node>();
  node->op = &op;
  node->operands = std::move(operands);
  node->attrs = std::move(attrs);
  const TensorMeta meta = infer_meta(*node);
  Value* result = new_value(result_name.empty() ? fresh_name() : result_name);
  result->meta = meta;
  result->producer = node.get();
  node->results.push_back(result);
  Node* raw = node.get();
  auto pos = nodes_.end();
  if (before != nullptr) {
    const auto it = where_.find(before);
    SG_ASSERT(it != where_.end(), "add_node: `before` is not in this graph");
    pos = it->second;
  }
  where_.emplace(raw, nodes_.insert(pos, std::move(node)));
  return raw;
}

void Graph::rewrite(Node* node, const OpDef& op, std::vector<Value*> operands,
                    std::vector<NamedAttr> attrs) {
  SG_ASSERT(node->results.size() == 1, "rewrite: only single-result nodes");
  SG_ASSERT(where_.contains(node), "rewrite: the node is not in this graph");
  Node fresh;
  fresh.op = &op;
  fresh.operands = std::move(operands);
  fresh.attrs = std::move(attrs);
  const TensorMeta meta = infer_meta(fresh);  // throws before anything changes
  node->op = &op;
  node->operands = std::move(fresh.operands);
  node->attrs = std::move(fresh.attrs);
  node->reuse = -1;
  node->placed = false;
  node->result()->meta = meta;
}

std::size_t Graph::num_uses(const Value* value) const {
  auto n = static_cast<std::size_t>(std::count(outputs.begin(), outputs.end(), value));
  for (const auto& node : nodes_) {
    n += static_cast<std::size_t>(std::count(node->operands.begin(), node->operands.end(), value));
  }
  return n;
}

void Graph::erase(Node* node) {
#ifndef NDEBUG
  // O(nodes): only where quadratic passes are affordable (debug builds).
  for (const Value* r : node->results) {
    SG_ASSERT(num_uses(r) == 0, "erase: %", r->name, " still has uses");
  }
#endif
  const auto it = where_.find(node);
  SG_ASSERT(it != where_.end(), "erase: node is not in this graph");
  const auto pos = it->second;
  where_.erase(it);
  for (Value* r : node->results) {
    by_name_.erase(r->name);
    r->producer = nullptr;
    values_.erase(r);
  }
  nodes_.erase(pos);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  for (auto& node : nodes_) std::replace(node->operands.begin(), node->operands.end(), from, to);
  std::replace(outputs.begin(), outputs.end(), from, to);
}

Value* Graph::find(std::string_view value_name) const {
  const auto it = by_name_.find(std::string(value_name));
  return it == by_name_.end() ? nullptr : it->second;
}

std::string Graph::fresh_name(std::string_view hint) {
  for (;;) {
    std::string candidate = std::string(hint) + std::to_string(next_id_++);
    if (!by_name_.contains(candidate)) return candidate;
  }
}

std::unique_ptr<Graph> Graph::clone() const {
  auto out = std::make_unique<Graph>(name);
  std::unordered_map<const Value*, Value*> map;
  for (const Value* in : inputs_) {
    Value* v =
        in->is_sym ? out->add_sym_input(in->name) : out->add_input(in->name, in->meta, in->kind);
    v->loc = in->loc;
    map[in] = v;
  }
  for (const auto& node : nodes_) {
    auto copy = std::make_unique<Node>();
    copy->op = node->op;
    copy->attrs = node->attrs;
    copy->loc = node->loc;
    copy->reuse = node->reuse;
    copy->placed = node->placed;
    for (const Value* o : node->operands) copy->operands.push_back(map.at(o));
    for (const Value* r : node->results) {
      Value* v = out->new_value(r->name);
      v->meta = r->meta;
      v->is_sym = r->is_sym;
      v->producer = copy.get();
      v->result_index = r->result_index;
      v->loc = r->loc;
      copy->results.push_back(v);
      map[r] = v;
    }
    Node* raw = copy.get();
    out->where_.emplace(raw, out->nodes_.insert(out->nodes_.end(), std::move(copy)));
  }
  for (const Value* o : outputs) out->outputs.push_back(map.at(o));
  out->next_id_ = next_id_;
  return out;
}

}  // namespace sinkgraph::ir

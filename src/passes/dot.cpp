// Graphviz DOT of a graph: inputs as ellipses (name, kind, type), nodes as
// boxes (result, operator, attributes, type), an edge per operand use, and a
// `return` node with an edge per output, labeled with its position.
#include <sstream>
#include <unordered_map>

#include "passes_internal.h"

namespace sinkgraph::passes {
namespace {

// Escapes a label for a double-quoted DOT string; "\n" stays a line break.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string to_dot(const ir::Graph& graph) {
  std::ostringstream out;
  std::unordered_map<const ir::Value*, std::string> ids;
  out << "digraph " << quote(graph.name) << " {\n";
  out << "  node [fontname=\"monospace\"];\n";
  for (std::size_t i = 0; i < graph.inputs().size(); ++i) {
    const ir::Value* in = graph.inputs()[i];
    const std::string id = "in" + std::to_string(i);
    ids[in] = id;
    std::string label = "%" + in->name + "\n" + ir::input_kind_name(in->kind);
    if (!in->is_sym) label += " " + detail::type_str(*in);
    out << "  " << id << " [shape=ellipse, label=" << quote(label) << "];\n";
  }
  std::size_t n = 0;
  for (const auto& node : graph.nodes()) {
    const std::string id = "n" + std::to_string(n++);
    std::string label;
    for (std::size_t r = 0; r < node->results.size(); ++r) {
      label += (r ? ", %" : "%") + node->results[r]->name;
      ids[node->results[r]] = id;
    }
    label += " = " + node->op_name();
    for (const auto& a : node->attrs) label += "\n" + a.name + "=" + detail::attr_str(a.value);
    for (const ir::Value* r : node->results) label += "\n" + detail::type_str(*r);
    out << "  " << id << " [shape=box, label=" << quote(label) << "];\n";
    for (std::size_t i = 0; i < node->operands.size(); ++i) {
      const auto it = ids.find(node->operands[i]);
      const std::string from = it == ids.end() ? "missing" : it->second;
      out << "  " << from << " -> " << id;
      if (node->operands.size() > 1) out << " [label=\"" << i << "\"]";
      out << ";\n";
    }
  }
  out << "  return [shape=invhouse, style=bold, label=\"return\"];\n";
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    const auto it = ids.find(graph.outputs[i]);
    const std::string from = it == ids.end() ? "missing" : it->second;
    out << "  " << from << " -> return [style=bold, label=\"" << i << "\"];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace sinkgraph::passes

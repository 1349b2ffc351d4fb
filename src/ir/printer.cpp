// The IR's text form, printed canonically so that parse(print(g)) prints the
// same text again (docs/ir.md).
#include <charconv>
#include <cmath>

#include "sinkgraph/ir.h"
#include "text.h"

namespace sinkgraph::ir {
namespace text {

std::string float_str(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value);
  std::string out(buf, res.ptr);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

std::string dims_str(std::span<const SymInt> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ',';
    out += dims[i].str();
  }
  return out + "]";
}

std::string type_str(const TensorMeta& meta) {
  return std::string(dtype_name(meta.dtype)) + dims_str(meta.shape.span());
}

std::string attr_str(const Attr& value) {
  struct Visitor {
    std::string operator()(const SymInt& v) const { return v.str(); }
    std::string operator()(double v) const { return float_str(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::vector<SymInt>& v) const { return dims_str(v); }
    std::string operator()(DType v) const { return std::string(dtype_name(v)); }
  };
  return std::visit(Visitor{}, value);
}

const char* arg_kind_name(ArgKind kind) {
  switch (kind) {
    case ArgKind::tensor:
      return "tensor";
    case ArgKind::tensor_list:
      return "tensor list";
    case ArgKind::integer:
      return "integer";
    case ArgKind::real:
      return "float";
    case ArgKind::boolean:
      return "bool";
    case ArgKind::int_list:
      return "integer list";
    case ArgKind::dtype:
      return "dtype";
  }
  return "?";
}

}  // namespace text

namespace {

std::string operands_str(const Node& node) {
  // Tensor arguments in schema order; a tensor_list takes the operands that
  // the plain tensor arguments leave.
  const auto& args = node.op->schema.args;
  std::size_t plain = 0;
  for (const auto& a : args) plain += a.kind == ArgKind::tensor ? 1 : 0;
  const std::size_t list_len = node.operands.size() > plain ? node.operands.size() - plain : 0;
  std::string out;
  std::size_t next = 0;
  auto sep = [&] {
    if (!out.empty()) out += ", ";
  };
  for (const auto& a : args) {
    if (a.kind == ArgKind::tensor && next < node.operands.size()) {
      sep();
      out += "%" + node.operands[next++]->name;
    } else if (a.kind == ArgKind::tensor_list) {
      sep();
      out += "[";
      for (std::size_t i = 0; i < list_len && next < node.operands.size(); ++i) {
        if (i > 0) out += ", ";
        out += "%" + node.operands[next++]->name;
      }
      out += "]";
    }
  }
  for (; next < node.operands.size(); ++next) {  // malformed: more than the schema takes
    sep();
    out += "%" + node.operands[next]->name;
  }
  for (const auto& a : node.attrs) {
    sep();
    out += a.name + "=" + text::attr_str(a.value);
  }
  // Note [Placement hints] in ir.h.
  if (node.reuse >= 0 && static_cast<std::size_t>(node.reuse) < node.operands.size()) {
    sep();
    out += "reuse=%" + node.operands[static_cast<std::size_t>(node.reuse)]->name;
  }
  if (node.placed) {
    sep();
    out += "placed=true";
  }
  return out;
}

}  // namespace

std::string print(const Graph& graph) {
  std::string out = "graph @" + graph.name + "(";
  bool first = true;
  for (const Value* in : graph.inputs()) {
    if (!first) out += ", ";
    first = false;
    out += "%" + in->name + ": ";
    out += in->is_sym ? std::string("sym")
                      : text::type_str(in->meta) + " " + input_kind_name(in->kind);
  }
  out += ") {\n";
  for (const auto& node : graph.nodes()) {
    out += "  ";
    for (std::size_t i = 0; i < node->results.size(); ++i) {
      if (i > 0) out += ", ";
      out += "%" + node->results[i]->name;
    }
    out += " = " + node->op_name() + "(" + operands_str(*node) + ") : ";
    if (node->results.size() == 1) {
      out += text::type_str(node->results[0]->meta);
    } else {
      out += "(";
      for (std::size_t i = 0; i < node->results.size(); ++i) {
        if (i > 0) out += ", ";
        out += text::type_str(node->results[i]->meta);
      }
      out += ")";
    }
    out += "\n";
  }
  out += "  return (";
  for (std::size_t i = 0; i < graph.outputs.size(); ++i) {
    if (i > 0) out += ", ";
    out += "%" + graph.outputs[i]->name;
  }
  out += ")\n}\n";
  return out;
}

}  // namespace sinkgraph::ir

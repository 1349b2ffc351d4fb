// GraphSignature: binding, graph keys and output bases (Note [Graph keys]).
#include "graph_signature.h"

#include <algorithm>
#include <sstream>

#include "sinkgraph/error.h"

namespace sinkgraph::detail {

namespace {

void collect(const SymInt& v, std::set<std::string>& out) {
  for (auto& s : v.free_symbols()) out.insert(std::move(s));
}

void collect(const ScalarValue& v, std::set<std::string>& out) {
  if (const auto* s = std::get_if<SymInt>(&v)) collect(*s, out);
  if (const auto* list = std::get_if<std::vector<SymInt>>(&v)) {
    for (const auto& d : *list) collect(d, out);
  }
}

std::string ptr_text(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

}  // namespace

GraphSignature::GraphSignature(const ir::Graph& graph, bool frozen_parameter, bool clone_input)
    : graph_(graph), frozen_parameter_(frozen_parameter), clone_input_(clone_input) {
  const auto& inputs = graph_.inputs();
  std::set<std::string> bound;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* in = inputs[i];
    const int index = static_cast<int>(i);
    if (!in->is_sym) tensor_inputs_.push_back(index);
    switch (in->kind) {
      case ir::InputKind::sym:
        symbols_.push_back({in->name, index, -1});
        bound.insert(in->name);
        break;
      case ir::InputKind::param:
        param_inputs_.push_back(index);
        break;
      case ir::InputKind::input:
        user_inputs_.push_back(index);
        if (!clone_input_) layout_inputs_.push_back(index);
        break;
      case ir::InputKind::mutated:
        mutated_inputs_.push_back(index);
        layout_inputs_.push_back(index);
        break;
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* in = inputs[i];
    if (in->is_sym) continue;
    for (int d = 0; d < in->meta.shape.size(); ++d) {
      const SymInt& dim = in->meta.shape[d];
      const auto syms = dim.free_symbols();
      if (syms.size() == 1 && dim == SymInt::symbol(syms[0]) && !bound.contains(syms[0])) {
        symbols_.push_back({syms[0], static_cast<int>(i), d});
        bound.insert(syms[0]);
      } else if (dim.is_symbolic()) {
        has_derived_dims_ = true;  // checked by bind_symbols on every call
      }
    }
  }
  for (const auto& s : symbols_) symbol_names_.push_back(s.name);

  // Symbols that feed shapes or fixed arguments are in the key.
  std::set<std::string> keyed;
  for (const ir::Value* in : inputs) {
    if (!in->is_sym) {
      for (const auto& d : in->meta.shape) collect(d, keyed);
    }
  }
  for (const auto& node : graph_.nodes()) {
    for (const auto& d : node->result()->meta.shape) collect(d, keyed);
    int scalar = 0;
    std::size_t attr = 0;
    for (const ArgSpec& spec : node->op->schema.args) {
      if (spec.kind == ArgKind::tensor || spec.kind == ArgKind::tensor_list) continue;
      const ScalarValue& value = node->attrs[attr++].value;
      const bool in_block = spec.kind != ArgKind::int_list;
      const auto* sym = std::get_if<SymInt>(&value);
      if (spec.updatable && sym != nullptr && sym->is_symbolic()) {
        updatables_.push_back({node.get(), scalar, *sym});
      } else {
        collect(value, keyed);
      }
      if (in_block) ++scalar;
    }
  }
  for (std::size_t i = 0; i < symbols_.size(); ++i) {
    if (keyed.contains(symbols_[i].name)) key_symbols_.push_back(static_cast<int>(i));
  }

  // Outputs that are views or in-place results of an input are returned as
  // that view of the caller's tensor, never stamped (Note [Stale outputs]).
  for (const ir::Value* out : graph_.outputs) {
    const ir::Value* v = out;
    while (v->producer != nullptr && v->producer->aliased_operand() >= 0) {
      v = v->producer->operands[static_cast<std::size_t>(v->producer->aliased_operand())];
    }
    int base = -1;
    if (v->is_input()) {
      base = static_cast<int>(std::find(inputs.begin(), inputs.end(), v) - inputs.begin());
    }
    output_bases_.push_back(base);
  }
}

void GraphSignature::bind(std::span<const ir::RtValue> inputs,
                          std::vector<std::int64_t>& values) const {
  const auto& ins = graph_.inputs();
  SG_CHECK(inputs.size() == ins.size(), "graph @", graph_.name, " takes ", ins.size(),
           " inputs, got ", inputs.size());
  // Cheap checks of the common case; anything unusual gets bind_symbols' full
  // validation and its error message.
  bool simple = true;
  for (std::size_t i = 0; i < ins.size() && simple; ++i) {
    if (ins[i]->is_sym) {
      simple = std::holds_alternative<std::int64_t>(inputs[i]);
      continue;
    }
    const Tensor* t = std::get_if<Tensor>(&inputs[i]);
    simple = t != nullptr && t->defined() && t->dtype() == ins[i]->meta.dtype &&
             t->ndim() == ins[i]->meta.shape.size();
    for (int d = 0; simple && d < t->ndim(); ++d) {
      const auto want = ins[i]->meta.shape[d].maybe_value();
      simple = !want || *want == t->size(d);
    }
    if (simple) t->check_not_stale("input of a graph replay");
  }
  if (!simple || has_derived_dims_) (void)ir::bind_symbols(graph_, inputs);
  values.resize(symbols_.size());
  for (std::size_t i = 0; i < symbols_.size(); ++i) {
    const SymbolSource& s = symbols_[i];
    const ir::RtValue& in = inputs[static_cast<std::size_t>(s.input)];
    values[i] = s.dim < 0 ? std::get<std::int64_t>(in) : std::get<Tensor>(in).size(s.dim);
  }
}

GraphKey GraphSignature::key_of(std::span<const ir::RtValue> inputs,
                                const std::vector<std::int64_t>& values) const {
  const auto tensor = [&](int i) -> const Tensor& {
    return std::get<Tensor>(inputs[static_cast<std::size_t>(i)]);
  };
  GraphKey key;
  key.syms.reserve(key_symbols_.size());
  for (const int k : key_symbols_) key.syms.push_back(values[static_cast<std::size_t>(k)]);
  if (!frozen_parameter_) {
    key.params.reserve(param_inputs_.size());
    for (const int p : param_inputs_) key.params.push_back(tensor(p).data_ptr());
  }
  key.mutated.reserve(mutated_inputs_.size());
  for (const int m : mutated_inputs_) key.mutated.push_back(tensor(m).data_ptr());
  for (const int i : layout_inputs_) {
    const Tensor& t = tensor(i);
    key.layout.insert(key.layout.end(), t.strides().begin(), t.strides().end());
  }
  // Aliasing: which other input each mutated input shares storage with.
  for (const int m : mutated_inputs_) {
    std::int64_t shares = -1;
    for (const int other : tensor_inputs_) {
      if (other != m && tensor(other).shares_storage(tensor(m))) {
        shares = other;
        break;
      }
    }
    key.layout.push_back(shares);
  }
  return key;
}

KeyChange GraphSignature::classify(const GraphKey& key, const std::vector<GraphKey>& known,
                                   std::string& why) const {
  const auto& ins = graph_.inputs();
  std::string values_text;
  for (std::size_t k = 0; k < key.syms.size(); ++k) {
    values_text += (k > 0 ? ", " : "") + symbols_[static_cast<std::size_t>(key_symbols_[k])].name +
                   "=" + std::to_string(key.syms[k]);
  }
  const std::string suffix = values_text.empty() ? "" : " [" + values_text + "]";
  if (known.empty()) {
    why = "first call" + suffix;
    return KeyChange::first;
  }
  // The closest known key: same syms, then same params, then same mutated addresses.
  const GraphKey* same_syms = nullptr;
  const GraphKey* same_params = nullptr;
  const GraphKey* same_addresses = nullptr;
  for (const GraphKey& k : known) {
    if (k.syms != key.syms) continue;
    same_syms = &k;
    if (k.params != key.params) continue;
    same_params = &k;
    if (k.mutated == key.mutated) same_addresses = &k;
  }
  if (same_syms == nullptr) {
    why = "new graph key" + suffix;
    return KeyChange::new_syms;
  }
  if (same_params == nullptr) {
    for (std::size_t p = 0; p < key.params.size(); ++p) {
      if (key.params[p] != same_syms->params[p]) {
        why = "param %" + ins[static_cast<std::size_t>(param_inputs_[p])]->name + " moved from " +
              ptr_text(same_syms->params[p]) + " to " + ptr_text(key.params[p]) +
              " (params' addresses are part of the key unless frozen_parameter)" + suffix;
        break;
      }
    }
    return KeyChange::param_moved;
  }
  if (same_addresses == nullptr) {
    for (std::size_t m = 0; m < key.mutated.size(); ++m) {
      if (key.mutated[m] != same_params->mutated[m]) {
        why = "mutated input %" + ins[static_cast<std::size_t>(mutated_inputs_[m])]->name +
              " is at " + ptr_text(key.mutated[m]) + ", a new address set (captured kernels " +
              "read and write it in place; each address set is its own graph key)" + suffix;
        break;
      }
    }
    return KeyChange::mutated_moved;
  }
  why = "an input read in place has other strides or aliases another input" + suffix;
  return KeyChange::layout_changed;
}

Tensor GraphSignature::rebase_view(const Tensor& captured_output, const Tensor& captured_input,
                                   const Tensor& caller) {
  if (caller.strides() != captured_input.strides() || caller.dtype() != captured_input.dtype() ||
      captured_output.dtype() != captured_input.dtype()) {
    return {};
  }
  const std::int64_t relative = captured_output.offset() - captured_input.offset();
  Tensor view(caller.storage(), captured_output.dtype(), captured_output.shape(),
              captured_output.strides(), caller.offset() + relative);
  return view;
}

}  // namespace sinkgraph::detail

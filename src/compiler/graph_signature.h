#pragma once
// GraphSignature: what a captured graph needs to know about its inputs, as
// pure functions of the IR and of one call's values: which symbols bind from
// where, which of them are in the graph key, the input kinds, the updatable
// slots, which outputs are views of inputs, and the graph key of a call.
// CapturedGraph (captured_graph.cpp) keeps one device graph per key.
//
// Note [Graph keys]
// A graph key is what a captured device graph baked in about its inputs:
//  - the values of the syms that feed shapes or fixed (non-updatable)
//    arguments; a sym that feeds only updatable slots (a decode position) is
//    not in the key: one capture serves every value, and each replay writes
//    the value into the captured nodes;
//  - the addresses of params, unless frozen_parameter (then a moved param is
//    an error);
//  - the addresses of mutated inputs, read and written in place: each address
//    set is its own key, so two KV caches used in turn replay two graphs;
//  - the layout of the inputs read in place (mutated inputs, and user inputs
//    under clone_input=false): their strides, and which other input a mutated
//    input shares storage with. A transposed view at the same address, or a
//    cache that is now also passed as another argument, is a new key.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sinkgraph/ir.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::detail {

struct GraphKey {
  std::vector<std::int64_t> syms;    // values of the key symbols, in order
  std::vector<const void*> params;   // param addresses (empty under frozen_parameter)
  std::vector<const void*> mutated;  // mutated input addresses
  std::vector<std::int64_t> layout;  // strides of in-place inputs, then aliasing
  bool operator==(const GraphKey& other) const = default;
};

// How a new key differs from the keys captured before (the explain report and
// TorchAir's counters name the cause).
enum class KeyChange : std::uint8_t {
  first,           // no key captured yet
  new_syms,        // key symbol values never seen
  param_moved,     // same syms, a param moved
  mutated_moved,   // same syms and params, a mutated input moved
  layout_changed,  // same addresses, other strides or aliasing
};

class GraphSignature {
 public:
  GraphSignature(const ir::Graph& graph, bool frozen_parameter, bool clone_input);

  // Checks the inputs against the graph (sizes, dtypes, stale outputs) and
  // returns every bound symbol's value, in symbol_names() order.
  void bind(std::span<const ir::RtValue> inputs, std::vector<std::int64_t>& values) const;
  [[nodiscard]] GraphKey key_of(std::span<const ir::RtValue> inputs,
                                const std::vector<std::int64_t>& values) const;
  // Why `key` is new given the keys captured so far, and in words.
  [[nodiscard]] KeyChange classify(const GraphKey& key, const std::vector<GraphKey>& known,
                                   std::string& why) const;

  [[nodiscard]] const std::vector<std::string>& symbol_names() const { return symbol_names_; }
  [[nodiscard]] const std::vector<int>& key_symbols() const { return key_symbols_; }
  [[nodiscard]] const std::vector<int>& param_inputs() const { return param_inputs_; }
  [[nodiscard]] const std::vector<int>& user_inputs() const { return user_inputs_; }
  [[nodiscard]] const std::vector<int>& mutated_inputs() const { return mutated_inputs_; }
  // Per graph output: the input whose storage it is a view of (following
  // views and in-place results), or -1 when it lives in the graph's memory.
  [[nodiscard]] const std::vector<int>& output_bases() const { return output_bases_; }

  struct Updatable {
    const ir::Node* node = nullptr;
    int scalar_index = 0;
    SymInt expr;
  };
  [[nodiscard]] const std::vector<Updatable>& updatables() const { return updatables_; }

  // The same view of `caller` as `captured_output` is of `captured_input`
  // (same shape, strides and relative offset), or an undefined tensor when the
  // caller's layout differs from the captured input's so no such view exists.
  [[nodiscard]] static Tensor rebase_view(const Tensor& captured_output,
                                          const Tensor& captured_input, const Tensor& caller);

 private:
  struct SymbolSource {
    std::string name;
    int input = 0;
    int dim = -1;  // -1: the input is a sym
  };
  const ir::Graph& graph_;
  bool frozen_parameter_;
  bool clone_input_;
  std::vector<SymbolSource> symbols_;  // every bound symbol, in binding order
  bool has_derived_dims_ = false;      // an input dim is an expression, not a plain symbol
  std::vector<std::string> symbol_names_;
  std::vector<int> key_symbols_;  // indices into symbols_
  std::vector<int> param_inputs_, user_inputs_, mutated_inputs_;
  std::vector<int> layout_inputs_;  // inputs read in place whose strides are keyed
  std::vector<int> tensor_inputs_;  // every non-sym input
  std::vector<int> output_bases_;
  std::vector<Updatable> updatables_;
};

}  // namespace sinkgraph::detail

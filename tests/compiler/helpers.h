#pragma once
// Helpers shared by the compiler tests.
#include <functional>
#include <string>

#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"

namespace sgtest {

// reduce-overhead with its default passes (the two in-place passes included).
inline sinkgraph::CompilerConfig reduce_overhead() {
  sinkgraph::CompilerConfig c;
  c.set("mode", "reduce-overhead");
  return c;
}

// The message of the sinkgraph::Error `fn` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const sinkgraph::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace sgtest

#pragma once
// The C++ backend: registers an emitter (Note [Operator emitters] in
// sinkgraph/op_registry.h) for every operator the code generator handles.
namespace sinkgraph::codegen {

// Idempotent and thread-safe; the code generator calls it before its first region.
void register_emitters();

}  // namespace sinkgraph::codegen

#pragma once
// Note [Collectives]
// all_reduce (sum) and all_gather are ordinary operators (ops.h): they trace,
// go through the passes and are captured into device graphs like any other
// kernel, so a tensor-parallel decode step stays one replay. Their CPU
// kernels move no bytes themselves: they call the process's collective
// backend, which the distributed layer installs (src/dist/, over MPI: the
// only code that knows MPI). Without one, a collective is a clear kernel
// error, never a silent no-op.
//
// Rules the kernels and passes keep:
// - A collective runs on the stream's worker thread, in stream order; every
//   rank must issue a group's collectives in the same order, so a group's
//   collectives belong on one stream (the backend's threading level allows
//   calls from any one thread at a time per group).
// - No pass fuses a collective, merges two (CSE) or moves work across one:
//   OpTraits::collective.
// - Inputs and outputs are contiguous f32; the output is a fresh tensor.
#include <cstdint>
#include <string>

#include "sinkgraph/export.h"

namespace sinkgraph {

class SG_API CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  // recv[i] = sum over the group's ranks of their send[i], i < count. send
  // may equal recv. Returns "" or what went wrong.
  virtual std::string all_reduce_sum(std::int64_t group, const float* send, float* recv,
                                     std::int64_t count) = 0;
  // recv[r * count + i] = rank r's send[i]; recv_count must be the group's
  // size times count (an error otherwise).
  virtual std::string all_gather(std::int64_t group, const float* send, std::int64_t count,
                                 float* recv, std::int64_t recv_count) = 0;
};

// The process's backend (one per process; nullptr: none). The distributed
// layer sets it before its first collective; set it while no collective runs.
SG_API void set_collective_backend(CollectiveBackend* backend);
SG_API CollectiveBackend* collective_backend();

}  // namespace sinkgraph

#pragma once
// The distributed layer (src/dist/, the sinkgraph_dist library: the only code
// that knows MPI; the core library never links it). A build configured with
// SINKGRAPH_MPI=OFF gets the same library without MPI (src/dist/no_mpi.cpp):
// launched_by_mpi() still answers, and init() throws a sinkgraph::Error
// saying that this build has no MPI. It initialises MPI,
// names process groups for the collective operators (ops::all_reduce,
// ops::all_gather; Note [Collectives] in sinkgraph/collectives.h) and moves
// their bytes with MPI.
//
// Note [MPI threading]
// A collective's kernel runs on the stream's worker thread, not on the thread
// that initialised MPI, and several streams (or host threads of their own)
// may run collectives on different groups at once. MPI allows that only at
// MPI_THREAD_MULTIPLE, so init() asks for it and refuses to run with less.
// One group's collectives must still be issued in the same order on every
// rank: keep each group's collectives on one stream.
#include <cstdint>

#include "sinkgraph/export.h"
#include "sinkgraph/tensor.h"

namespace sinkgraph::dist {

// True when this build has MPI (SINKGRAPH_MPI=ON); false in the library
// built without it, whose init() throws.
[[nodiscard]] SG_API bool available();

// True when an MPI launcher (mpirun, mpiexec) started this process: its
// environment then holds OMPI_COMM_WORLD_SIZE (Open MPI), PMIX_RANK or
// PMI_RANK. A plain run never initialises MPI.
SG_API bool launched_by_mpi();

// Initialises MPI once per process (later calls return at once) at
// MPI_THREAD_MULTIPLE (Note [MPI threading]) and installs the MPI collective
// backend. Throws sinkgraph::Error when the MPI library offers less. MPI is
// finalized at exit; synchronize streams that ran collectives before.
SG_API void init();
[[nodiscard]] SG_API bool initialized();

// This process's rank in MPI_COMM_WORLD and the world's size (init() first).
[[nodiscard]] SG_API int world_rank();
[[nodiscard]] SG_API int world_size();
// The ranks of the job on this machine, this one included (init() first;
// collective over MPI_COMM_WORLD: every rank calls it, in the same order).
[[nodiscard]] SG_API int local_size();

// Ends every process of the job (MPI_Abort on MPI_COMM_WORLD) with `code`:
// for a rank that failed where the others cannot see it, so that they exit
// instead of waiting in a collective for it.
[[noreturn]] SG_API void abort(int code);

// A process group: a duplicate of MPI_COMM_WORLD, so its collectives never
// match another group's. Creating one is itself collective: every rank must
// create its groups in the same order. Groups live until MPI is finalized.
class SG_API Communicator {
 public:
  // Calls init() first.
  static Communicator world();

  // The id the collective operators take.
  [[nodiscard]] std::int64_t group() const { return group_; }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }

  // Returns when every rank has called it (on the host, not stream-ordered).
  void barrier() const;

 private:
  Communicator(std::int64_t group, int rank, int size) : group_(group), rank_(rank), size_(size) {}
  std::int64_t group_;
  int rank_, size_;
};

// ops::all_reduce / ops::all_gather over `comm`.
SG_API Tensor all_reduce(const Communicator& comm, const Tensor& x);
SG_API Tensor all_gather(const Communicator& comm, const Tensor& x);

}  // namespace sinkgraph::dist

// sinkgraph_dist in a build configured with SINKGRAPH_MPI=OFF (the tsan
// preset; machines without libopenmpi-dev): the same API, so that its users
// (the CLI) link one library in every build; anything that needs MPI is a
// clear error instead.
#include <cstdlib>

#include "sinkgraph/dist.h"
#include "sinkgraph/error.h"

namespace sinkgraph::dist {
namespace {
[[noreturn]] void no_mpi() {
  ::sinkgraph::detail::throw_error(
      "dist: this sinkgraph was built without MPI (configured with SINKGRAPH_MPI=OFF): rebuild "
      "with -DSINKGRAPH_MPI=ON and libopenmpi-dev for mpirun and tensor parallelism");
}
}  // namespace

bool available() { return false; }
void init() { no_mpi(); }
bool initialized() { return false; }
int world_rank() { no_mpi(); }
int world_size() { no_mpi(); }
int local_size() { no_mpi(); }
void abort(int code) { std::_Exit(code); }
Communicator Communicator::world() { no_mpi(); }
void Communicator::barrier() const { no_mpi(); }

}  // namespace sinkgraph::dist

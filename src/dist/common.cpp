// The parts of sinkgraph_dist (include/sinkgraph/dist.h) that are the same
// whether or not this build has MPI: the launcher's environment, and the
// collective operators over a Communicator.
#include <algorithm>
#include <array>
#include <cstdlib>

#include "sinkgraph/dist.h"
#include "sinkgraph/ops.h"

namespace sinkgraph::dist {

bool launched_by_mpi() {
  constexpr std::array<const char*, 3> kLauncherVars{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                                     "PMI_RANK"};
  return std::ranges::any_of(kLauncherVars, [](const char* var) {
    return std::getenv(var) != nullptr;  // NOLINT(concurrency-mt-unsafe): read-only
  });
}

Tensor all_reduce(const Communicator& comm, const Tensor& x) {
  return ops::all_reduce(x, comm.group());
}

Tensor all_gather(const Communicator& comm, const Tensor& x) {
  return ops::all_gather(x, comm.group(), comm.size());
}

}  // namespace sinkgraph::dist

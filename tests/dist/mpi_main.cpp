// main() of the MPI test executables (ctest runs them under mpirun): MPI is
// initialised before the tests, and a rank with a failed test ends the whole
// job (MPI_Abort), so that the other ranks never wait in a collective for it.
#include <gtest/gtest.h>

#include "sinkgraph/dist.h"
#include "sinkgraph/stream.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sinkgraph::dist::init();
  const int failed = RUN_ALL_TESTS();
  sinkgraph::current_stream().synchronize();
  if (failed != 0) sinkgraph::dist::abort(1);
  return 0;
}

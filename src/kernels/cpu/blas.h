#pragma once
// OpenBLAS as the CPU kernels share it (linalg.cpp, conv.cpp): every cblas
// call holds blas_mutex() (Note [OpenBLAS is not reentrant] in linalg.cpp),
// and the library stays single threaded (keep_blas_serial()): the compute
// threads are ours (Note [Compute threads]).
#include <mutex>

namespace sinkgraph::kernels::cpu {

std::mutex& blas_mutex();
void keep_blas_serial();

}  // namespace sinkgraph::kernels::cpu

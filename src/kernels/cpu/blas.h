#pragma once
// OpenBLAS as the CPU kernels share it (linalg.cpp, conv.cpp): every cblas
// call holds blas_mutex() (Note [OpenBLAS is not reentrant] in linalg.cpp),
// and the library's thread count follows the intra-op setting.
#include <mutex>

namespace sinkgraph::kernels::cpu {

std::mutex& blas_mutex();
void sync_blas_threads(int threads);

}  // namespace sinkgraph::kernels::cpu

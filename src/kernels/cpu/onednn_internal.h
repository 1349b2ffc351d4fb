#pragma once
// What the oneDNN kernels (onednn_conv.cpp, onednn_matmul.cpp) share. Only
// files built with SINKGRAPH_ONEDNN include it.
#include <oneapi/dnnl/dnnl.hpp>

// OpenMP's one call we make, declared here rather than through <omp.h>: the
// header is the compiler's own (GCC's here), and clang-tidy, with clang's
// headers, has none. The function is libgomp's, which libdnnl links.
extern "C" void omp_set_num_threads(int threads);

namespace sinkgraph::kernels::cpu::onednn {

// The process's one CPU engine.
dnnl::engine& engine();

}  // namespace sinkgraph::kernels::cpu::onednn

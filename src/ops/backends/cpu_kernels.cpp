// The CPU backend's kernels (src/kernels/cpu/), registered for the operators
// they implement. An operator's definition (src/ops/*_ops.cpp) says what it
// computes; this table says which CPU function computes it. Another backend
// (a CUDA device, generated code) adds a table of its own, chosen in CMake.
#include "../../kernels/cpu/kernels.h"
#include "../../kernels/cpu/onednn.h"
#include "../../kernels/cpu/quant.h"
#include "../dispatch.h"
#include "sinkgraph/ops.h"

namespace sinkgraph::detail {

// The quantized kernels number the formats as the operators do.
static_assert(static_cast<std::int64_t>(kernels::cpu::quant::Format::q8_0) ==
              static_cast<std::int64_t>(ops::QuantFormat::q8_0));
static_assert(static_cast<std::int64_t>(kernels::cpu::quant::Format::q4_0) ==
              static_cast<std::int64_t>(ops::QuantFormat::q4_0));
static_assert(kernels::cpu::quant::kBlock == ops::kQuantBlockValues);

void register_cpu_kernels(OpRegistry& r) {
  namespace k = kernels::cpu;
  struct Entry {
    const char* op;
    KernelFn kernel;
  };
  static constexpr Entry kTable[] = {
      // Elementwise.
      {"add", k::add},
      {"sub", k::sub},
      {"mul", k::mul},
      {"div", k::div},
      {"add_scalar", k::add_scalar},
      {"mul_scalar", k::mul_scalar},
      {"neg", k::neg},
      {"exp", k::exp},
      {"sqrt", k::sqrt},
      {"rsqrt", k::rsqrt},
      {"erf", k::erf},
      {"relu", k::relu},
      {"silu", k::silu},
      {"gelu", k::gelu},
      {"tanh", k::tanh},
      {"sigmoid", k::sigmoid},
      {"hardswish", k::hardswish},
      {"hardsigmoid", k::hardsigmoid},
      {"cos", k::cos},
      {"sin", k::sin},
      {"where", k::where},
      {"compare", k::compare},
      // Memory.
      {"copy_", k::copy},
      {"index_copy_", k::index_copy},
      {"index_copy_rows_", k::index_copy_rows},
      {"fill_", k::fill},
      {"full", k::fill},
      {"arange", k::arange},
      {"contiguous", k::contiguous},
      // Linear algebra, rows, transformer pieces.
      {"matmul", k::matmul},
      {"linear", k::linear},
      {"linear_q", k::linear_q},
      {"embedding_q", k::embedding_q},
      {"softmax", k::softmax},
      {"rms_norm", k::rms_norm},
      {"layer_norm", k::layer_norm},
      {"rope", k::rope},
      {"rope_rows", k::rope_rows},
      {"embedding", k::embedding},
      {"attention", k::attention},
      {"attention_rows", k::attention_rows},
      {"sdpa", k::sdpa},
      {"sdpa_mask", k::sdpa_mask},
      {"sdpa_causal", k::sdpa_causal},
      {"argmax", k::argmax},
      {"sample", k::sample},
      {"count_nonfinite", k::count_nonfinite},
      // Collectives.
      {"all_reduce", k::all_reduce},
      {"all_gather", k::all_gather},
      // Vision and reductions.
      {"conv2d", k::conv2d},
      {"batch_norm", k::batch_norm},
      {"max_pool2d", k::max_pool2d},
      {"mean", k::mean},
      // Fused (max-autotune).
      {"silu_mul", k::silu_mul},
      {"add_rms_norm", k::add_rms_norm},
      {"fused_elementwise", k::fused_elementwise},
  };
  for (const Entry& e : kTable) r.set_kernel(e.op, DeviceType::cpu, e.kernel);
}

}  // namespace sinkgraph::detail

namespace sinkgraph::ops {

void set_use_onednn(bool use) { kernels::cpu::onednn::set_enabled(use); }
bool use_onednn() { return kernels::cpu::onednn::enabled(); }
bool onednn_built() { return kernels::cpu::onednn::built(); }
bool onednn_linear_products() { return kernels::cpu::onednn::rows_in_any_order(); }
std::uint64_t onednn_conv_calls() { return kernels::cpu::onednn::calls(); }
std::uint64_t onednn_matmul_calls() { return kernels::cpu::onednn::matmul_calls(); }

}  // namespace sinkgraph::ops

// all_reduce and all_gather (Note [Collectives] in sinkgraph/collectives.h):
// the bytes move in the process's collective backend; these kernels check
// the layout and hand it the buffers.
#include <string>

#include <climits>

#include "kernels.h"
#include "sinkgraph/collectives.h"

namespace sinkgraph::kernels::cpu {
namespace {

// The backend, or nullptr after failing `ctx` with what to do.
CollectiveBackend* backend_for(const char* op, const TensorArg& x, const TensorArg& out,
                               KernelContext& ctx) {
  CollectiveBackend* b = collective_backend();
  if (b == nullptr) {
    ctx.fail(std::string(op) +
             ": no collective backend in this process (create a sinkgraph::dist::Communicator, "
             "from the sinkgraph_dist library, before running collectives)");
    return nullptr;
  }
  if (!x.is_contiguous() || !out.is_contiguous()) {
    ctx.fail(std::string(op) + ": input and output must be contiguous (call contiguous() first)");
    return nullptr;
  }
  if (x.numel() > INT_MAX) {
    ctx.fail(std::string(op) + ": more than INT_MAX elements (MPI counts are int)");
    return nullptr;
  }
  return b;
}

}  // namespace

void all_reduce(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& out = args.tensors[1];
  CollectiveBackend* b = backend_for("all_reduce", x, out, ctx);
  if (b == nullptr) return;
  const std::string err =
      b->all_reduce_sum(args.scalars[0].i, x.ptr<float>(), out.ptr<float>(), x.numel());
  if (!err.empty()) ctx.fail("all_reduce: " + err);
}

void all_gather(const ArgBlock& args, KernelContext& ctx) {
  const TensorArg& x = args.tensors[0];
  const TensorArg& out = args.tensors[1];
  CollectiveBackend* b = backend_for("all_gather", x, out, ctx);
  if (b == nullptr) return;
  const std::string err =
      b->all_gather(args.scalars[0].i, x.ptr<float>(), x.numel(), out.ptr<float>(), out.numel());
  if (!err.empty()) ctx.fail("all_gather: " + err);
}

}  // namespace sinkgraph::kernels::cpu

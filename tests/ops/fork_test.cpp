// A process forked between calls (Note [Threads after fork], runtime/fork.h):
// the child's streams and compute pool start their threads again and compute
// what the parent computed; a child forked while work was queued refuses the
// stream with an error instead of waiting for a worker it does not have.
#include <atomic>
#include <chrono>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/ops.h"
#include "sinkgraph/stream.h"
#include "sinkgraph/tensor.h"

namespace sg = sinkgraph;

namespace {

// TSan cannot follow threads started after a multi-threaded fork (it stops
// such a child itself).
bool under_tsan() {
#if defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 97) * scale - 1.0F;
  return v;
}

// The child's exit status: 0 when fn returned true, 1 when false, 2 when it
// threw (the message on stderr); SIGALRM ends a child that hangs.
template <typename Fn>
int in_child(Fn fn) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(60);
    int code = 0;
    try {
      code = fn() ? 0 : 1;
    } catch (const sg::Error& e) {
      fprintf(stderr, "child: %s\n", e.what());
      code = 2;
    }
    _exit(code);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::atomic<bool> g_release{false};

void hold(const sg::ArgBlock& /*args*/, sg::KernelContext& /*ctx*/) {
  while (!g_release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST(ops_fork, a_child_forked_between_calls_computes_what_the_parent_did) {
  if (under_tsan()) GTEST_SKIP() << "TSan stops children that start threads";
  sg::set_num_threads(2);  // the worker and a compute helper run in the parent
  const sg::Tensor a = sg::Tensor::from_floats(ramp(256 * 256, 0.01F), {256, 256});
  const sg::Tensor b = sg::Tensor::from_floats(ramp(256 * 256, 0.02F), {256, 256});
  const std::vector<float> want = sg::ops::matmul(a, b).to_floats();
  const auto seven = [&] {  // another shape, as the parent ran it
    const sg::Tensor rows = sg::ops::narrow(a, 0, 0, 7);
    return sg::ops::add(sg::ops::matmul(rows, b), rows).to_floats();
  };
  const std::vector<float> want_seven = seven();
  const int code = in_child([&] {
    // The same product (the pool splits it), then another shape.
    return sg::ops::matmul(a, b).to_floats() == want && seven() == want_seven &&
           sg::ops::matmul(a, b).to_floats() == want;
  });
  EXPECT_EQ(code, 0) << "0: the child's results were the parent's; 1: they differed; 2: an "
                        "error; 142: it hung (SIGALRM)";
  EXPECT_EQ(sg::ops::matmul(a, b).to_floats(), want);  // the parent goes on
}

TEST(ops_fork, a_child_forked_with_work_queued_refuses_the_stream) {
  if (under_tsan()) GTEST_SKIP() << "TSan stops children that start threads";
  sg::Stream& stream = sg::current_stream();
  const sg::Tensor a = sg::Tensor::from_floats({1.0F, 2.0F}, {2});
  g_release = false;
  sg::ArgBlock args{};
  args.num_scalars = 1;
  stream.launch(hold, args, "hold");  // running on the worker when the process forks
  const int code = in_child([&] { return sg::ops::add(a, a).to_floats().size() == 2; });
  g_release = true;
  stream.synchronize();
  EXPECT_EQ(code, 2) << "the child should refuse the stream (2), not compute (0) or hang (142)";
  EXPECT_EQ(sg::ops::add(a, a).to_floats(), (std::vector<float>{2.0F, 4.0F}));
}

// The runtime conformance suite: every device type runs the same tests through
// the public API only (streams, kernels over an ArgBlock, events, errors).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/device.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/kernel_abi.h"
#include "sinkgraph/stream.h"

namespace sinkgraph {
// Readable parameter values in gtest's failure messages.
inline void PrintTo(DeviceType type, std::ostream* out) { *out << device_type_name(type); }
}  // namespace sinkgraph

namespace {

using namespace std::chrono_literals;
using sinkgraph::ArgBlock;
using sinkgraph::DeviceType;
using sinkgraph::KernelContext;
using sinkgraph::Stream;

// ---- Test kernels -------------------------------------------------------------
// Test state travels through scalar slots as pointers (the block is POD).

template <typename T>
void put(ArgBlock& args, int slot, T* ptr) {
  args.scalars[slot].i = reinterpret_cast<std::intptr_t>(ptr);
  if (args.num_scalars <= slot) args.num_scalars = static_cast<std::uint16_t>(slot + 1);
}

template <typename T>
T* get(const ArgBlock& args, int slot) {
  return reinterpret_cast<T*>(args.scalars[slot].i);
}

ArgBlock block() { return ArgBlock{}; }

template <typename T>
ArgBlock block(T* ptr) {
  ArgBlock args{};
  put(args, 0, ptr);
  return args;
}

// A gate the host opens later. A kernel waiting on it gives up after a long
// deadline (and says so), so a synchronous launch fails the test instead of
// hanging it.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  std::atomic<bool> timed_out{false};
  void release() { open.store(true); }
  void wait_entered() const {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!entered.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
    }
  }
};

void gate_wait(Gate& gate) {
  gate.entered.store(true);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!gate.open.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate.timed_out.store(true);
      return;
    }
    std::this_thread::sleep_for(100us);
  }
}

// scalars: [0] Gate*, optionally [1] std::atomic<int>* sequence, [2] std::atomic<int>* stamp.
void gate_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  gate_wait(*get<Gate>(args, 0));
  if (args.num_scalars >= 3) {
    get<std::atomic<int>>(args, 2)->store(get<std::atomic<int>>(args, 1)->fetch_add(1) + 1);
  }
}

// scalars: [0] std::atomic<int>* sequence, [1] std::atomic<int>* stamp (1-based position).
void stamp_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  get<std::atomic<int>>(args, 1)->store(get<std::atomic<int>>(args, 0)->fetch_add(1) + 1);
}

// scalars: [0] std::vector<int>*, [1] index to append.
void append_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  get<std::vector<int>>(args, 0)->push_back(static_cast<int>(args.scalars[1].i));
}

void increment_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  get<std::atomic<int>>(args, 0)->fetch_add(1, std::memory_order_relaxed);
}

// scalars: [0] milliseconds to sleep, optionally [1] std::atomic<bool>* set when done.
void sleep_kernel(const ArgBlock& args, KernelContext& /*ctx*/) {
  std::this_thread::sleep_for(std::chrono::milliseconds(args.scalars[0].i));
  if (args.num_scalars >= 2) get<std::atomic<bool>>(args, 1)->store(true);
}

ArgBlock sleep_block(std::int64_t ms, std::atomic<bool>* done = nullptr) {
  ArgBlock args{};
  args.num_scalars = 1;
  args.scalars[0].i = ms;
  if (done != nullptr) put(args, 1, done);
  return args;
}

void fail_kernel(const ArgBlock& /*args*/, KernelContext& ctx) { ctx.fail("boom"); }

void noop_kernel(const ArgBlock& /*args*/, KernelContext& /*ctx*/) {}

// ---- The suite ----------------------------------------------------------------

class RuntimeConformance : public testing::TestWithParam<DeviceType> {
 protected:
  sinkgraph::Device& device() { return sinkgraph::get_device(GetParam()); }
  std::unique_ptr<Stream> make_stream(std::int64_t spin_us = 200) {
    return device().create_stream(sinkgraph::StreamOptions{.spin_us = spin_us, .name = ""});
  }

  // Launches N appending kernels and checks they ran in launch order.
  static void expect_in_order(Stream& stream, int n) {
    std::vector<int> seen;
    for (int i = 0; i < n; ++i) {
      ArgBlock args = block(&seen);
      args.scalars[1].i = i;
      args.num_scalars = 2;
      stream.launch(append_kernel, args, "append");
    }
    stream.synchronize();
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], i) << "position " << i;
  }
};

TEST_P(RuntimeConformance, LaunchIsAsynchronous) {
  auto stream = make_stream();
  Gate gate;
  stream->launch(gate_kernel, block(&gate), "gate");
  // launch() has returned while the kernel cannot have finished.
  gate.wait_entered();
  EXPECT_TRUE(gate.entered.load()) << "the kernel never started";
  EXPECT_FALSE(stream->query()) << "query() is true while a kernel is still blocked";
  EXPECT_FALSE(gate.timed_out.load()) << "launch() waited for the kernel to finish";
  gate.release();
  stream->synchronize();
  EXPECT_TRUE(stream->query());
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_P(RuntimeConformance, QueryIsTrueOnAnIdleStream) {
  auto stream = make_stream();
  EXPECT_TRUE(stream->query());
  stream->synchronize();  // nothing queued: returns at once
  EXPECT_TRUE(stream->query());
}

TEST_P(RuntimeConformance, KernelsRunInLaunchOrder) {
  auto stream = make_stream();
  expect_in_order(*stream, 500);
}

TEST_P(RuntimeConformance, SynchronizeWaitsForAllWork) {
  auto stream = make_stream();
  std::atomic<bool> done[3]{};
  for (auto& d : done) stream->launch(sleep_kernel, sleep_block(10, &d), "sleep");
  stream->synchronize();
  for (const auto& d : done) EXPECT_TRUE(d.load());
  EXPECT_TRUE(stream->query());
}

TEST_P(RuntimeConformance, CrossStreamEventWait) {
  auto a = make_stream();
  auto b = make_stream();
  Gate gate;
  std::atomic<int> sequence{0};
  std::atomic<int> a_stamp{0};
  std::atomic<int> b_stamp{0};

  ArgBlock a_args = block(&gate);
  put(a_args, 1, &sequence);
  put(a_args, 2, &a_stamp);
  a->launch(gate_kernel, a_args, "a_kernel");
  sinkgraph::Event event;
  event.record(*a);
  b->wait(event);
  ArgBlock b_args = block(&sequence);
  put(b_args, 1, &b_stamp);
  b->launch(stamp_kernel, b_args, "b_kernel");

  gate.wait_entered();
  std::this_thread::sleep_for(20ms);  // give a broken wait the chance to let B run
  EXPECT_EQ(b_stamp.load(), 0) << "B's kernel ran before the event it waits on";
  EXPECT_FALSE(event.query());
  EXPECT_FALSE(b->query());

  gate.release();
  b->synchronize();
  EXPECT_EQ(a_stamp.load(), 1);
  EXPECT_EQ(b_stamp.load(), 2) << "B's kernel did not run after A's";
  EXPECT_TRUE(event.query());
  a->synchronize();
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_P(RuntimeConformance, WaitOnANeverRecordedEventDoesNotBlock) {
  auto stream = make_stream();
  sinkgraph::Event event;
  EXPECT_TRUE(event.query());
  stream->wait(event);
  std::atomic<int> sequence{0};
  std::atomic<int> stamp{0};
  ArgBlock args = block(&sequence);
  put(args, 1, &stamp);
  stream->launch(stamp_kernel, args, "after_wait");
  stream->synchronize();
  EXPECT_EQ(stamp.load(), 1);
}

TEST_P(RuntimeConformance, EventQueryAndSynchronize) {
  auto stream = make_stream();
  Gate gate;
  sinkgraph::Event event;
  stream->launch(gate_kernel, block(&gate), "gate");
  stream->record(event);
  gate.wait_entered();
  EXPECT_FALSE(event.query());
  gate.release();
  event.synchronize();
  EXPECT_TRUE(event.query());
  stream->synchronize();
  EXPECT_FALSE(gate.timed_out.load());
}

TEST_P(RuntimeConformance, EventElapsedTime) {
  auto stream = make_stream();
  sinkgraph::Event start;
  sinkgraph::Event end;
  EXPECT_THROW((void)start.elapsed_ms(end), sinkgraph::Error);  // never recorded

  // Not completed yet: elapsed time is an error.
  Gate gate;
  start.record(*stream);
  stream->launch(gate_kernel, block(&gate), "gate");
  end.record(*stream);
  gate.wait_entered();
  EXPECT_THROW((void)start.elapsed_ms(end), sinkgraph::Error);
  gate.release();
  stream->synchronize();

  start.record(*stream);
  stream->launch(sleep_kernel, sleep_block(25), "sleep");
  end.record(*stream);
  end.synchronize();
  EXPECT_GE(start.elapsed_ms(end), 25.0);
}

TEST_P(RuntimeConformance, CountersCountLaunchesKernelsAndTime) {
  auto stream = make_stream();
  stream->reset_counters();
  std::atomic<int> counter{0};
  constexpr int kLaunches = 20;
  for (int i = 0; i < kLaunches; ++i) {
    stream->launch(increment_kernel, block(&counter), "increment");
    EXPECT_EQ(stream->counters().launches, static_cast<std::uint64_t>(i + 1));
  }
  stream->launch(sleep_kernel, sleep_block(20), "sleep");
  EXPECT_EQ(stream->counters().launches, static_cast<std::uint64_t>(kLaunches + 1));
  stream->synchronize();

  const sinkgraph::StreamCounters c = stream->counters();
  EXPECT_EQ(counter.load(), kLaunches);
  EXPECT_EQ(c.launches, static_cast<std::uint64_t>(kLaunches + 1));
  EXPECT_EQ(c.kernels, static_cast<std::uint64_t>(kLaunches + 1));
  EXPECT_GT(c.host_launch_ns, 0);
  EXPECT_GE(c.device_busy_ns, std::chrono::nanoseconds(20ms).count());
  EXPECT_GE(c.window_ns, c.device_busy_ns);
  EXPECT_GE(c.device_idle_ns(), 0);

  stream->reset_counters();
  const sinkgraph::StreamCounters z = stream->counters();
  EXPECT_EQ(z.launches, 0U);
  EXPECT_EQ(z.kernels, 0U);
  EXPECT_EQ(z.host_launch_ns, 0);
  EXPECT_EQ(z.device_busy_ns, 0);
  EXPECT_EQ(z.window_ns, 0);
  EXPECT_EQ(z.device_idle_ns(), 0);

  // Counting resumes after a reset.
  stream->launch(noop_kernel, block(), "noop");
  stream->synchronize();
  EXPECT_EQ(stream->counters().launches, 1U);
  EXPECT_EQ(stream->counters().kernels, 1U);
  EXPECT_GE(stream->counters().device_idle_ns(), 0);
}

TEST_P(RuntimeConformance, SpansOnlyWhileTracing) {
  auto stream = make_stream();
  stream->launch(noop_kernel, block(), "untraced");
  stream->synchronize();
  EXPECT_TRUE(stream->take_spans().empty()) << "spans recorded with tracing off";

  stream->set_tracing(true);
  stream->launch(noop_kernel, block(), "alpha");
  stream->launch(sleep_kernel, sleep_block(2), "beta");
  stream->synchronize();
  std::vector<sinkgraph::KernelSpan> spans;
  std::vector<sinkgraph::KernelSpan> host_spans;
  for (const auto& span : stream->take_spans()) (span.host ? host_spans : spans).push_back(span);
  ASSERT_EQ(host_spans.size(), 2U) << "one host span per launch";
  EXPECT_EQ(std::string(host_spans[1].name), "beta");
  EXPECT_LE(host_spans[0].end_ns, spans.empty() ? host_spans[0].end_ns : spans[1].end_ns);
  ASSERT_EQ(spans.size(), 2U);
  EXPECT_EQ(std::string(spans[0].name), "alpha");
  EXPECT_EQ(std::string(spans[1].name), "beta");
  for (const auto& span : spans) EXPECT_LE(span.start_ns, span.end_ns);
  EXPECT_LE(spans[0].end_ns, spans[1].start_ns);
  EXPECT_GE(spans[1].end_ns - spans[1].start_ns, std::chrono::nanoseconds(2ms).count());
  EXPECT_TRUE(stream->take_spans().empty()) << "take_spans() did not drain";

  stream->set_tracing(false);
  stream->launch(noop_kernel, block(), "untraced_again");
  stream->synchronize();
  EXPECT_TRUE(stream->take_spans().empty());
}

TEST_P(RuntimeConformance, WorkerParkingPolicies) {
  for (const std::int64_t spin_us : {std::int64_t{0}, std::int64_t{100'000}}) {
    SCOPED_TRACE("spin_us = " + std::to_string(spin_us));
    auto stream = make_stream(spin_us);
    std::atomic<int> counter{0};
    for (int i = 0; i < 1000; ++i) stream->launch(increment_kernel, block(&counter), "increment");
    stream->synchronize();
    EXPECT_EQ(counter.load(), 1000);
    // Launches that find the worker idle (parked when spin_us is 0) still run.
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(1ms);
      stream->launch(increment_kernel, block(&counter), "increment");
      if (i % 2 == 0) stream->synchronize();
    }
    stream->synchronize();
    EXPECT_EQ(counter.load(), 1020);
    expect_in_order(*stream, 100);
  }
}

TEST_P(RuntimeConformance, StickyKernelError) {
  auto stream = make_stream();
  auto bystander = make_stream();
  stream->launch(fail_kernel, block(), "exploding_op");
  bystander->launch(noop_kernel, block(), "noop");
  try {
    stream->synchronize();
    ADD_FAILURE() << "synchronize() did not raise the kernel's error";
  } catch (const sinkgraph::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("exploding_op"), std::string::npos) << message;
    EXPECT_NE(message.find("boom"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(stream->synchronize()) << "the error is not cleared once raised";
  EXPECT_NO_THROW(bystander->synchronize()) << "the error leaked to another stream";
  expect_in_order(*stream, 50);

  // The first error wins.
  stream->launch(fail_kernel, block(), "first_op");
  stream->launch(fail_kernel, block(), "second_op");
  try {
    stream->synchronize();
    ADD_FAILURE() << "synchronize() did not raise the kernel's error";
  } catch (const sinkgraph::Error& e) {
    EXPECT_NE(std::string(e.what()).find("first_op"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(stream->synchronize());
}

TEST_P(RuntimeConformance, CurrentStreamIsPerThread) {
  sinkgraph::Device& dev = device();
  Stream* const default_stream = &dev.default_stream();
  EXPECT_EQ(&sinkgraph::current_stream(dev), default_stream);
  auto s1 = make_stream();
  auto s2 = make_stream();
  {
    sinkgraph::StreamGuard guard(*s1);
    EXPECT_EQ(&sinkgraph::current_stream(dev), s1.get());
    Stream* seen_by_other = nullptr;
    std::thread other([&] { seen_by_other = &sinkgraph::current_stream(dev); });
    other.join();
    EXPECT_EQ(seen_by_other, default_stream) << "a guard leaked to another thread";
    {
      sinkgraph::StreamGuard inner(*s2);
      EXPECT_EQ(&sinkgraph::current_stream(dev), s2.get());
    }
    EXPECT_EQ(&sinkgraph::current_stream(dev), s1.get()) << "the inner guard did not restore";
  }
  EXPECT_EQ(&sinkgraph::current_stream(dev), default_stream);

  sinkgraph::set_current_stream(s2.get());
  EXPECT_EQ(&sinkgraph::current_stream(dev), s2.get());
  sinkgraph::set_current_stream(nullptr);
  EXPECT_EQ(&sinkgraph::current_stream(dev), default_stream);
}

TEST_P(RuntimeConformance, DefaultStreamRunsWork) {
  Stream& stream = device().default_stream();
  EXPECT_EQ(&stream, &device().default_stream());
  std::atomic<int> counter{0};
  for (int i = 0; i < 10; ++i) stream.launch(increment_kernel, block(&counter), "increment");
  stream.synchronize();
  EXPECT_EQ(counter.load(), 10);
}

TEST_P(RuntimeConformance, ConcurrentLaunchesOntoOneStream) {
  auto stream = make_stream();
  stream->reset_counters();
  std::atomic<int> counter{0};
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        stream->launch(increment_kernel, block(&counter), "increment");
      }
    });
  }
  for (auto& thread : threads) thread.join();
  stream->synchronize();
  EXPECT_EQ(counter.load(), kThreads * kPerThread);
  EXPECT_EQ(stream->counters().launches, static_cast<std::uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(stream->counters().kernels, static_cast<std::uint64_t>(kThreads * kPerThread));
}

TEST_P(RuntimeConformance, ConcurrentSynchronizeFromManyThreads) {
  auto stream = make_stream(0);
  std::atomic<int> counter{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        stream->launch(increment_kernel, block(&counter), "increment");
        if (i % 7 == 0) stream->synchronize();
      }
      stream->synchronize();
    });
  }
  for (auto& thread : threads) thread.join();
  stream->synchronize();
  EXPECT_EQ(counter.load(), 600);
}

TEST_P(RuntimeConformance, StreamsHaveDistinctIdsAndTheirDevice) {
  auto a = make_stream();
  auto b = make_stream();
  EXPECT_NE(a->id(), b->id());
  EXPECT_EQ(&a->device(), &device());
  EXPECT_FALSE(a->name().empty());
  auto named = device().create_stream(sinkgraph::StreamOptions{.spin_us = 0, .name = "copy"});
  EXPECT_EQ(named->name(), "copy");
}

INSTANTIATE_TEST_SUITE_P(runtime, RuntimeConformance,
                         testing::ValuesIn(sinkgraph::available_device_types()),
                         [](const testing::TestParamInfo<DeviceType>& param) {
                           return std::string(sinkgraph::device_type_name(param.param));
                         });

}  // namespace

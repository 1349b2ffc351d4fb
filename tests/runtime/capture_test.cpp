// Capture and replay at the runtime level, for every device type: recording,
// updatable slots, stream ordering of replays, fork/join, capture errors.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/allocator.h"
#include "sinkgraph/device.h"
#include "sinkgraph/device_graph.h"
#include "sinkgraph/error.h"
#include "sinkgraph/event.h"
#include "sinkgraph/stream.h"
#include "thread_count.h"

namespace {

namespace sg = sinkgraph;

// A log the kernels append to: (tag, scalar 1, the worker thread).
struct Log {
  std::mutex mutex;
  std::vector<std::int64_t> values;
  std::vector<std::thread::id> threads;
};

void append(const sg::ArgBlock& args, sg::KernelContext&) {
  auto* log = reinterpret_cast<Log*>(args.scalars[0].i);
  std::lock_guard lock(log->mutex);
  log->values.push_back(args.scalars[1].i);
  log->threads.push_back(std::this_thread::get_id());
}

void fail_kernel(const sg::ArgBlock&, sg::KernelContext& ctx) { ctx.fail("replayed failure"); }

sg::ArgBlock entry(Log& log, std::int64_t value) {
  sg::ArgBlock a{};
  a.num_scalars = 2;
  a.scalars[0].i = reinterpret_cast<std::intptr_t>(&log);
  a.scalars[1].i = value;
  return a;
}

class RuntimeCapture : public testing::TestWithParam<sg::DeviceType> {
 protected:
  sg::Device& device() { return sg::get_device(GetParam()); }
  std::shared_ptr<sg::MemPool> pool() { return device().allocator().create_pool("capture-test"); }
};

TEST_P(RuntimeCapture, records_instead_of_running_and_replays_with_one_entry) {
  auto s = device().create_stream();
  Log log;
  s->begin_capture(pool());
  EXPECT_TRUE(s->is_capturing());
  for (int i = 0; i < 5; ++i) s->launch(append, entry(log, i), "append");
  const sg::DeviceGraph graph = s->end_capture();
  EXPECT_FALSE(s->is_capturing());
  s->synchronize();
  EXPECT_TRUE(log.values.empty()) << "captured kernels must not run during capture";
  ASSERT_EQ(graph.nodes.size(), 5U);
  EXPECT_EQ(graph.nodes[3].deps, std::vector<int>{2});

  auto exec = graph.instantiate();
  s->reset_counters();
  for (int r = 0; r < 3; ++r) exec->launch(*s, {});
  s->synchronize();
  EXPECT_EQ(s->counters().launches, 3U) << "one queue entry per replay";
  EXPECT_EQ(log.values, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
}

TEST_P(RuntimeCapture, updatable_slots_take_each_replays_values_in_stream_order) {
  auto s = device().create_stream();
  Log log;
  s->begin_capture(pool());
  s->launch(append, entry(log, 0), "append");
  sg::DeviceGraph graph = s->end_capture();
  graph.nodes[0].updates.push_back({1, sg::SymInt::symbol("pos") * 2 + 1});
  EXPECT_NE(graph.str().find("updatable 2*pos+1"), std::string::npos) << graph.str();
  auto exec = graph.instantiate({"pos"});
  // 50 replays enqueued back to back, one synchronize: each keeps its own value.
  std::vector<std::int64_t> expected;
  for (std::int64_t pos = 0; pos < 50; ++pos) {
    const std::int64_t values[] = {pos};
    exec->launch(*s, values);
    expected.push_back(2 * pos + 1);
  }
  s->synchronize();
  EXPECT_EQ(log.values, expected);
  EXPECT_THROW(exec->launch(*s, {}), sg::Error);  // wrong number of sym values
}

TEST_P(RuntimeCapture, fork_and_join_through_events_records_both_branches) {
  auto s = device().create_stream();
  auto t = device().create_stream();
  Log log;
  sg::Event fork, join;
  s->begin_capture(pool());
  s->launch(append, entry(log, 1), "a");
  fork.record(*s);
  t->wait(fork);  // t joins the capture
  EXPECT_TRUE(t->is_capturing());
  t->launch(append, entry(log, 2), "b");
  join.record(*t);
  s->wait(join);  // and joins back
  s->launch(append, entry(log, 3), "c");
  const sg::DeviceGraph graph = s->end_capture();
  EXPECT_FALSE(t->is_capturing());
  ASSERT_EQ(graph.nodes.size(), 3U);
  EXPECT_EQ(graph.num_streams, 2);
  EXPECT_EQ(graph.nodes[1].stream, 1);
  EXPECT_EQ(graph.nodes[1].deps, std::vector<int>{0});
  EXPECT_EQ(graph.nodes[2].deps, (std::vector<int>{0, 1}));

  auto exec = graph.instantiate();
  EXPECT_EQ(exec->num_streams(), 2);
  for (int r = 0; r < 10; ++r) exec->launch(*s, {});
  s->synchronize();
  ASSERT_EQ(log.values.size(), 30U);
  for (int r = 0; r < 10; ++r) {
    EXPECT_EQ(log.values[static_cast<std::size_t>(3 * r)], 1);
    EXPECT_EQ(log.values[static_cast<std::size_t>(3 * r + 1)], 2);
    EXPECT_EQ(log.values[static_cast<std::size_t>(3 * r + 2)], 3);
  }
  // The branch ran on its own worker.
  EXPECT_NE(log.threads[0], log.threads[1]);
  EXPECT_EQ(log.threads[0], log.threads[2]);
}

TEST_P(RuntimeCapture, a_fork_that_never_joins_back_is_an_error) {
  auto s = device().create_stream();
  auto t = device().create_stream();
  Log log;
  sg::Event fork;
  s->begin_capture(pool());
  fork.record(*s);
  t->wait(fork);
  t->launch(append, entry(log, 1), "orphan");
  try {
    (void)s->end_capture();
    FAIL() << "expected an error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("never joined back"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(s->is_capturing());
  EXPECT_FALSE(t->is_capturing());
  s->launch(append, entry(log, 7), "after");  // both streams work again
  s->synchronize();
  EXPECT_EQ(log.values, std::vector<std::int64_t>{7});
}

TEST_P(RuntimeCapture, synchronize_during_capture_depends_on_the_error_mode) {
  auto s = device().create_stream();
  auto other = device().create_stream();
  s->begin_capture(pool(), sg::CaptureErrorMode::global);
  try {
    s->synchronize();
    ADD_FAILURE() << "synchronize during a global capture must throw";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("synchronize"), std::string::npos) << e.what();
  }
  EXPECT_THROW(other->synchronize(), sg::Error);  // global: any stream, any thread
  std::atomic<bool> threw{false};
  std::thread([&] {
    try {
      other->synchronize();
    } catch (const sg::Error&) {
      threw = true;
    }
  }).join();
  EXPECT_TRUE(threw.load());
  (void)s->end_capture();

  s->begin_capture(pool(), sg::CaptureErrorMode::thread_local_);
  EXPECT_THROW(other->synchronize(), sg::Error);  // the capturing thread
  threw = false;
  std::thread([&] {
    try {
      other->synchronize();
    } catch (const sg::Error&) {
      threw = true;
    }
  }).join();
  EXPECT_FALSE(threw.load()) << "thread_local only restricts the capturing thread";
  (void)s->end_capture();

  s->begin_capture(pool(), sg::CaptureErrorMode::relaxed);
  EXPECT_NO_THROW(s->synchronize());
  EXPECT_NO_THROW(other->synchronize());
  (void)s->end_capture();
}

TEST_P(RuntimeCapture, allocations_for_a_capturing_stream_come_from_its_pool) {
  auto s = device().create_stream();
  auto p = pool();
  s->begin_capture(p);
  sg::DataPtr a = device().allocator().allocate(4096, *s);
  EXPECT_EQ(a.pool(), p.get());
  EXPECT_THROW((void)device().allocator().allocate(64, device().default_stream()), sg::Error)
      << "allocating outside the pool during a global capture";
  (void)s->end_capture();
  sg::DataPtr b = device().allocator().allocate(4096, *s);
  EXPECT_NE(b.pool(), p.get());
  EXPECT_GE(p->stats().reserved_bytes, 4096);
}

TEST_P(RuntimeCapture, a_launch_on_a_stream_outside_the_capture_is_an_error) {
  auto s = device().create_stream();
  auto other = device().create_stream();
  Log log;
  s->begin_capture(pool());
  try {
    other->launch(append, entry(log, 1), "stray_kernel");
    ADD_FAILURE() << "expected an error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stray_kernel"), std::string::npos) << e.what();
  }
  (void)s->end_capture();
}

TEST_P(RuntimeCapture, kernel_errors_in_a_replay_are_sticky_on_the_launch_stream) {
  auto s = device().create_stream();
  s->begin_capture(pool());
  s->launch(fail_kernel, sg::ArgBlock{}, "failing_node");
  const sg::DeviceGraph graph = s->end_capture();
  auto exec = graph.instantiate();
  exec->launch(*s, {});
  try {
    s->synchronize();
    FAIL() << "expected the replayed kernel's error";
  } catch (const sg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("replayed failure"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(s->synchronize());
}

sg::DeviceGraph capture_appends(sg::Stream& s, std::shared_ptr<sg::MemPool> pool, Log& log) {
  s.begin_capture(std::move(pool));
  for (int i = 0; i < 3; ++i) s.launch(append, entry(log, i), "append");
  return s.end_capture();
}

// Note [Replays on the caller]: with on_caller, launch() returns with the
// replay complete, and on the CPU device an idle stream's replay runs on the
// calling thread when the compute threads fill the cores.
TEST_P(RuntimeCapture, a_replay_on_the_caller_is_complete_when_launch_returns) {
  const sgtest::ThreadCount restore;
  sg::set_num_threads(sg::available_cores());
  auto s = device().create_stream();
  Log log;
  auto exec = capture_appends(*s, pool(), log).instantiate();
  sg::GraphExec::LaunchOptions options;
  options.on_caller = true;
  s->reset_counters();
  exec->launch(*s, {}, options);
  {
    std::lock_guard lock(log.mutex);
    EXPECT_EQ(log.values, (std::vector<std::int64_t>{0, 1, 2}));
    if (GetParam() == sg::DeviceType::cpu) {
      for (const auto id : log.threads) EXPECT_EQ(id, std::this_thread::get_id());
    }
  }
  EXPECT_EQ(s->counters().launches, 1U);
  EXPECT_EQ(s->counters().kernels, 1U);
  EXPECT_TRUE(s->query());
}

// With a core left free by the compute threads, the stream's worker runs it
// (on its own core), and launch() still returns with the replay complete.
TEST_P(RuntimeCapture, a_replay_on_the_caller_goes_to_the_worker_when_a_core_is_free) {
  if (GetParam() != sg::DeviceType::cpu || sg::available_cores() < 2)
    GTEST_SKIP() << "needs the CPU device and two cores";
  const sgtest::ThreadCount restore;
  sg::set_num_threads(1);
  auto s = device().create_stream();
  Log log;
  auto exec = capture_appends(*s, pool(), log).instantiate();
  sg::GraphExec::LaunchOptions options;
  options.on_caller = true;
  exec->launch(*s, {}, options);
  std::lock_guard lock(log.mutex);
  EXPECT_EQ(log.values, (std::vector<std::int64_t>{0, 1, 2}));
  for (const auto id : log.threads) EXPECT_NE(id, std::this_thread::get_id());
}

void sleep_then_append(const sg::ArgBlock& args, sg::KernelContext& ctx) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  append(args, ctx);
}

TEST_P(RuntimeCapture, a_replay_on_the_caller_runs_after_the_work_queued_before_it) {
  auto s = device().create_stream();
  Log log;
  auto exec = capture_appends(*s, pool(), log).instantiate();
  s->launch(sleep_then_append, entry(log, 100), "sleep_then_append");
  sg::GraphExec::LaunchOptions options;
  options.on_caller = true;
  exec->launch(*s, {}, options);
  std::lock_guard lock(log.mutex);
  EXPECT_EQ(log.values, (std::vector<std::int64_t>{100, 0, 1, 2}));
}

TEST_P(RuntimeCapture, work_launched_during_a_replay_on_the_caller_runs_after_it) {
  auto s = device().create_stream();
  Log log;
  s->begin_capture(pool());
  s->launch(sleep_then_append, entry(log, 1), "sleep_then_append");
  auto exec = s->end_capture().instantiate();
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s->launch(append, entry(log, 2), "append");  // while the replay sleeps
  });
  sg::GraphExec::LaunchOptions options;
  options.on_caller = true;
  exec->launch(*s, {}, options);
  other.join();
  s->synchronize();
  std::lock_guard lock(log.mutex);
  EXPECT_EQ(log.values, (std::vector<std::int64_t>{1, 2}));
}

TEST_P(RuntimeCapture, a_kernel_error_in_a_replay_on_the_caller_is_sticky_until_synchronize) {
  auto s = device().create_stream();
  s->begin_capture(pool());
  s->launch(fail_kernel, sg::ArgBlock{}, "failing_node");
  auto exec = s->end_capture().instantiate();
  sg::GraphExec::LaunchOptions options;
  options.on_caller = true;
  EXPECT_NO_THROW(exec->launch(*s, {}, options));
  EXPECT_THROW(s->synchronize(), sg::Error);
  EXPECT_NO_THROW(s->synchronize());
}

INSTANTIATE_TEST_SUITE_P(runtime, RuntimeCapture, testing::ValuesIn(sg::available_device_types()),
                         [](const auto& p) { return std::string(sg::device_type_name(p.param)); });

}  // namespace

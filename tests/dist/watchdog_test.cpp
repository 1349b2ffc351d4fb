// The collective watchdog (Note [Collective watchdog], src/dist/watchdog.h)
// without MPI: a scope held past the timeout is reported once, with its name
// and slot; scopes that end in time never are, whatever their total; a
// process stopped and resumed does not report the wait it was stopped in;
// and SINKGRAPH_DIST_TIMEOUT is read strictly. Built in every preset (tsan too:
// the scopes are stamped and cleared from several threads at once).
#include "dist/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "sinkgraph/error.h"

namespace sinkgraph::dist {
namespace {

using namespace std::chrono_literals;
using Seconds = std::chrono::duration<double>;

struct Expiry {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::string what;
  int slot = -1;
  Seconds waited{0};

  Watchdog::OnExpire callback() {
    return [this](std::string_view w, int s, Seconds d) {
      const std::lock_guard lock(mu);
      ++calls;
      what = std::string(w);
      slot = s;
      waited = d;
      cv.notify_all();
    };
  }
};

TEST(DistWatchdog, ReportsAScopeHeldPastTheTimeout) {
  Expiry seen;
  const Seconds timeout = 200ms;
  Watchdog dog(timeout, seen.callback());
  { const Watchdog::Scope quick(&dog, 3, "MPI_Allreduce"); }
  const auto start = std::chrono::steady_clock::now();
  {
    const Watchdog::Scope stuck(&dog, 7, "MPI_Allgather");
    std::unique_lock lock(seen.mu);
    ASSERT_TRUE(seen.cv.wait_for(lock, 30s, [&] { return seen.calls > 0; }))
        << "a wait past the timeout was never reported";
  }
  const Seconds elapsed = std::chrono::steady_clock::now() - start;
  const std::lock_guard lock(seen.mu);
  EXPECT_EQ(seen.what, "MPI_Allgather");
  EXPECT_EQ(seen.slot, 7);
  EXPECT_GT(seen.waited, timeout);
  EXPECT_LE(seen.waited, elapsed);
  // Reported once: the watchdog stops after its callback returns.
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(seen.calls, 1);
}

TEST(DistWatchdog, ScopesThatEndInTimeAreNeverReported) {
  // Four threads (three groups and the host slot) stamp and clear their
  // slots for 2.5 timeouts in all: only a single wait counts.
  Expiry seen;
  {
    Watchdog dog(1s, seen.callback());
    std::vector<std::thread> threads;
    threads.reserve(4);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&dog, t] {
        const auto end = std::chrono::steady_clock::now() + 2500ms;
        while (std::chrono::steady_clock::now() < end) {
          const Watchdog::Scope scope(&dog, t == 3 ? Watchdog::kHostSlot : t, "MPI_Allreduce");
          std::this_thread::sleep_for(1ms);
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }
  const std::lock_guard lock(seen.mu);
  EXPECT_EQ(seen.calls, 0) << seen.what << " on slot " << seen.slot << " reported after "
                           << seen.waited.count() << " s";
}

TEST(DistWatchdog, AStoppedProcessDoesNotBlameTheOthersWhenResumed) {
  // The hung rank of a job: a child process holds a scope begun before it is
  // stopped (SIGSTOP) for a little longer than the timeout, and ends it soon
  // after it is resumed. Its own watchdog was stopped too, so the wait is not
  // the others' fault and must not be reported. (The first watchdog, which
  // took only a wake a whole timeout plus an interval late for a stop, and
  // began counting when its thread first ran, reported it in 8 of 8 runs.)
  // A timeout long enough that the parent, even on a loaded machine, stops
  // the child before its watchdog could rightly report the wait.
  constexpr auto kTimeout = 1000ms;
  constexpr auto kStop = 1050ms;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<bool> reported{false};
    {
      Watchdog dog(kTimeout, [&reported](std::string_view, int, Seconds) { reported = true; });
      const auto start = std::chrono::steady_clock::now();
      const Watchdog::Scope scope(&dog, 0, "MPI_Allreduce");
      if (write(ready[1], "r", 1) != 1) _exit(3);
      // Held until about 300 ms after the resume: past the timeout counted
      // from the scope's start, well within it counted from the resume.
      while (std::chrono::steady_clock::now() < start + kStop + 300ms)
        std::this_thread::sleep_for(5ms);
    }
    _exit(reported ? 1 : 0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(kStop);
  ASSERT_EQ(kill(child, SIGCONT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(ready[0]);
  close(ready[1]);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the resumed process reported its own stop as a hang";
}

TEST(DistWatchdog, ANullWatchdogWatchesNothing) {
  const Watchdog::Scope scope(nullptr, 0, "MPI_Barrier");  // no timeout configured
  SUCCEED();
}

TEST(DistWatchdog, TimeoutFromTheEnvironment) {
  EXPECT_EQ(parse_dist_timeout(nullptr), Seconds(600));
  EXPECT_EQ(parse_dist_timeout(""), Seconds(600));
  EXPECT_EQ(parse_dist_timeout("2.5"), Seconds(2.5));
  EXPECT_EQ(parse_dist_timeout("30"), Seconds(30));
  EXPECT_EQ(parse_dist_timeout("0"), std::nullopt);
  for (const char* bad : {"-1", "abc", "5s", " 5", "nan", "inf", "1e9"}) {
    try {
      (void)parse_dist_timeout(bad);
      ADD_FAILURE() << "accepted SINKGRAPH_DIST_TIMEOUT=" << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SINKGRAPH_DIST_TIMEOUT=\"" + std::string(bad) + "\""),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace sinkgraph::dist

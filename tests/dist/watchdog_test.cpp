// The collective watchdog (Note [Collective watchdog], src/dist/watchdog.h)
// without MPI: a scope held past the timeout is reported once, with its name
// and slot; scopes that end in time never are, whatever their total; and
// SINKGRAPH_DIST_TIMEOUT is read strictly. Built in every preset (tsan too:
// the scopes are stamped and cleared from several threads at once).
#include "dist/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
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

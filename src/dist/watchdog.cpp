// The collective watchdog (Note [Collective watchdog] in watchdog.h).
#include "watchdog.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

#include "sinkgraph/error.h"

namespace sinkgraph::dist {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(std::chrono::duration<double> timeout, OnExpire on_expire)
    : timeout_(timeout), on_expire_(std::move(on_expire)) {
  SG_CHECK(timeout_.count() > 0, "dist: a watchdog needs a timeout above 0 s");
  // The thread's first look counts from now, not from when it first runs: a
  // process stopped before its watchdog's thread started is a late wake too.
  thread_ = std::thread([this, created = now_ns()] { run(created); });
}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Watchdog::Scope::Scope(Watchdog* dog, int slot, const char* what) : dog_(dog), slot_(slot) {
  if (dog_ == nullptr) return;
  SG_ASSERT(slot >= 0 && slot < kSlots, "watchdog slot ", slot, " out of range");
  const auto i = static_cast<std::size_t>(slot_);
  dog_->what_[i].store(what, std::memory_order_relaxed);
  // release: the watchdog that sees this time also sees `what`.
  dog_->since_[i].store(now_ns(), std::memory_order_release);
}

Watchdog::Scope::~Scope() {
  if (dog_ != nullptr)
    dog_->since_[static_cast<std::size_t>(slot_)].store(0, std::memory_order_relaxed);
}

void Watchdog::run(std::int64_t created_ns) {
  // A few looks per timeout, so a wait is reported at most a quarter of the
  // timeout late; never busier than 100 times a second.
  const auto interval =
      std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(timeout_ / 4),
                 std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  const auto limit_ns = static_cast<std::int64_t>(timeout_.count() * 1e9);
  const auto interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count();
  // A watchdog that wakes a whole interval late was not running: the
  // process was stopped (SIGSTOP, a debugger) or starved. Waits then count
  // from when it runs again, so that a rank that was itself the hung one does
  // not blame the others once it resumes. (A wake a whole timeout late
  // would miss a stop just past the timeout, over a scope begun before it.)
  // Starvation only delays a report.
  std::int64_t last = created_ns;
  std::int64_t resumed = 0;
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, interval, [this] { return stop_; })) {
    const std::int64_t now = now_ns();
    if (now - last > 2 * interval_ns) resumed = now;
    last = now;
    for (int slot = 0; slot < kSlots; ++slot) {
      const auto i = static_cast<std::size_t>(slot);
      const std::int64_t since = since_[i].load(std::memory_order_acquire);
      if (since == 0) continue;
      const std::int64_t waited = now - std::max(since, resumed);
      if (waited <= limit_ns) continue;
      const char* what = what_[i].load(std::memory_order_relaxed);
      lock.unlock();
      on_expire_(what != nullptr ? what : "?", slot,
                 std::chrono::duration<double>(static_cast<double>(waited) * 1e-9));
      return;
    }
  }
}

std::optional<std::chrono::duration<double>> parse_dist_timeout(const char* text) {
  constexpr double kDefaultSeconds = 600;
  constexpr double kMaxSeconds = 1e6;  // keeps the nanosecond arithmetic in range
  if (text == nullptr || *text == '\0') return std::chrono::duration<double>(kDefaultSeconds);
  const std::string_view s(text);
  double seconds = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), seconds);
  SG_CHECK(
      ec == std::errc() && end == s.data() + s.size() && seconds >= 0 && seconds <= kMaxSeconds,
      "SINKGRAPH_DIST_TIMEOUT=\"", s,
      "\" is not a number of seconds from 0 to 1000000 (how long a collective may wait "
      "for the other ranks before the job is ended; 0 waits for ever)");
  if (seconds == 0) return std::nullopt;
  return std::chrono::duration<double>(seconds);
}

}  // namespace sinkgraph::dist

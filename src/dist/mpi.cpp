// sinkgraph_dist over MPI (include/sinkgraph/dist.h): initialisation, groups
// and the collective backend the all_reduce and all_gather kernels call.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "sinkgraph/collectives.h"
#include "sinkgraph/dist.h"
#include "sinkgraph/error.h"
#include "sinkgraph/log.h"
#include "watchdog.h"

namespace sinkgraph::dist {
namespace {

std::string mpi_error(int rc) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int len = 0;
  if (MPI_Error_string(rc, text.data(), &len) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(rc);
  }
  return std::string(text.data(), static_cast<std::size_t>(len));
}

// Groups by id: written under the mutex before `count` publishes them, then
// read without a lock by the kernels (stream workers).
class MpiBackend final : public CollectiveBackend {
 public:
  static constexpr std::int64_t kMaxGroups = 64;

  std::int64_t add(MPI_Comm comm) {
    const std::lock_guard lock(mu_);
    const int n = count_.load(std::memory_order_relaxed);
    SG_CHECK(n < kMaxGroups, "dist: at most ", kMaxGroups, " communicators per process");
    comms_[static_cast<std::size_t>(n)] = comm;
    count_.store(n + 1, std::memory_order_release);
    return n;
  }

  std::string all_reduce_sum(std::int64_t group, const float* send, float* recv,
                             std::int64_t count) override {
    MPI_Comm comm = MPI_COMM_NULL;
    if (std::string err = lookup(group, comm); !err.empty()) return err;
    const void* from = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send);
    const Watchdog::Scope watch = watch_group(group, "MPI_Allreduce");
    const int rc = MPI_Allreduce(from, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
    return rc == MPI_SUCCESS ? std::string() : "MPI_Allreduce: " + mpi_error(rc);
  }

  std::string all_gather(std::int64_t group, const float* send, std::int64_t count, float* recv,
                         std::int64_t recv_count) override {
    MPI_Comm comm = MPI_COMM_NULL;
    if (std::string err = lookup(group, comm); !err.empty()) return err;
    int size = 0;
    MPI_Comm_size(comm, &size);
    if (recv_count != count * size) {
      return "the output holds " + std::to_string(recv_count) + " elements, not the group size " +
             std::to_string(size) + " times the input's " + std::to_string(count) +
             " (the size argument must be the group's size)";
    }
    const int n = static_cast<int>(count);
    const Watchdog::Scope watch = watch_group(group, "MPI_Allgather");
    const int rc = MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, comm);
    return rc == MPI_SUCCESS ? std::string() : "MPI_Allgather: " + mpi_error(rc);
  }

  // Starts the watchdog (Note [Collective watchdog]); init() calls it once,
  // before any collective.
  void start_watchdog(std::chrono::duration<double> timeout) {
    dog_ = std::make_unique<Watchdog>(
        timeout, [timeout](std::string_view what, int slot, std::chrono::duration<double> waited) {
          int rank = -1;
          MPI_Comm_rank(MPI_COMM_WORLD, &rank);
          log(LogLevel::error,
              fmt::format("dist: rank {} waited {:.1f} s in {} ({}), longer than "
                          "SINKGRAPH_DIST_TIMEOUT={:g} s: another rank is hung or far behind; "
                          "ending the job (Note [Collective watchdog])",
                          rank, waited.count(), what,
                          slot == Watchdog::kHostSlot ? std::string("on the host thread")
                                                      : fmt::format("group {}", slot),
                          timeout.count()));
          MPI_Abort(MPI_COMM_WORLD, 1);
        });
  }

  // A scope for one MPI call of the host thread that waits for other ranks.
  Watchdog::Scope watch_host(const char* what) { return {dog_.get(), Watchdog::kHostSlot, what}; }

  // The communicator of a group this process created.
  MPI_Comm comm_of(std::int64_t group) const {
    MPI_Comm comm = MPI_COMM_NULL;
    const std::string err = lookup(group, comm);
    SG_CHECK(err.empty(), "dist: ", err);
    return comm;
  }

 private:
  Watchdog::Scope watch_group(std::int64_t group, const char* what) {
    static_assert(kMaxGroups < Watchdog::kSlots);
    return {dog_.get(), static_cast<int>(group), what};
  }

  std::string lookup(std::int64_t group, MPI_Comm& comm) const {
    if (group < 0 || group >= count_.load(std::memory_order_acquire)) {
      return "group " + std::to_string(group) +
             " is not a communicator of this process (dist::Communicator::group())";
    }
    comm = comms_[static_cast<std::size_t>(group)];
    return {};
  }

  std::mutex mu_;
  std::array<MPI_Comm, kMaxGroups> comms_{};
  std::atomic<int> count_{0};
  std::unique_ptr<Watchdog> dog_;  // set by init() before any collective; null: no timeout
};

MpiBackend& backend() {
  // Constructed before init() registers finalize_at_exit, so destroyed after
  // MPI is finalized.
  static MpiBackend b;
  return b;
}

std::once_flag g_init;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  // MPI_Finalize waits for the other ranks too.
  const Watchdog::Scope watch = backend().watch_host("MPI_Finalize");
  MPI_Finalize();
}

}  // namespace

bool available() { return true; }

void init() {
  std::call_once(g_init, [] {
    MpiBackend& b = backend();
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read once, under call_once
    const auto timeout = parse_dist_timeout(std::getenv("SINKGRAPH_DIST_TIMEOUT"));
    int already = 0;
    MPI_Initialized(&already);
    int provided = 0;
    if (already == 0) {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      SG_CHECK(rc == MPI_SUCCESS, "dist: MPI_Init_thread failed: ", mpi_error(rc));
      std::atexit(finalize_at_exit);
    } else {
      MPI_Query_thread(&provided);
    }
    SG_CHECK(provided >= MPI_THREAD_MULTIPLE, "dist: the MPI library provides thread level ",
             provided,
             ", below MPI_THREAD_MULTIPLE; collectives run on stream worker threads and need it "
             "(Note [MPI threading])");
    if (timeout) b.start_watchdog(*timeout);
    set_collective_backend(&b);
  });
}

bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

int world_rank() {
  SG_CHECK(initialized(), "dist: world_rank() before dist::init()");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  SG_CHECK(initialized(), "dist: world_size() before dist::init()");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int local_size() {
  SG_CHECK(initialized(), "dist: local_size() before dist::init()");
  MPI_Comm local = MPI_COMM_NULL;
  const Watchdog::Scope watch = backend().watch_host("MPI_Comm_split_type");
  const int rc =
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  SG_CHECK(rc == MPI_SUCCESS, "dist: MPI_Comm_split_type failed: ", mpi_error(rc));
  int size = 0;
  MPI_Comm_size(local, &size);
  MPI_Comm_free(&local);
  return size;
}

void abort(int code) {
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Communicator Communicator::world() {
  init();
  MPI_Comm comm = MPI_COMM_NULL;
  const Watchdog::Scope watch = backend().watch_host("MPI_Comm_dup");
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  SG_CHECK(rc == MPI_SUCCESS, "dist: MPI_Comm_dup failed: ", mpi_error(rc));
  // Errors come back to the kernel, which names the operator (Note [Kernel ABI]).
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return {backend().add(comm), rank, size};
}

void Communicator::barrier() const {
  const Watchdog::Scope watch = backend().watch_host("MPI_Barrier");
  const int rc = MPI_Barrier(backend().comm_of(group_));
  SG_CHECK(rc == MPI_SUCCESS, "dist: MPI_Barrier failed: ", mpi_error(rc));
}

}  // namespace sinkgraph::dist

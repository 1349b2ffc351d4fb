#include "sinkgraph/files.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sinkgraph/error.h"

namespace sinkgraph {

namespace {

// Temporaries in flight, for the signal handler: fixed storage, no locks.
constexpr int kSlots = 64;
constexpr std::size_t kPathMax = 4096;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 registered
  std::array<char, kPathMax> path{};
};
std::array<Slot, kSlots> g_slots;

int register_temp(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path.data(), path.c_str(), path.size() + 1);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;  // unregistered: still removed on errors, not on signals
}

void unregister_temp(int slot) {
  if (slot >= 0) g_slots[slot].state.store(0, std::memory_order_release);
}

std::string reason(int err) { return std::strerror(err); }

}  // namespace

int open_regular_file(const std::string& path, std::uint64_t& size, const char* what) {
  SG_CHECK(!path.empty(), "the ", what, " path is empty");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SG_CHECK(fd >= 0, path, ": cannot open the ", what, ": ", reason(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SG_CHECK(false, path, ": cannot stat the ", what, ": ", reason(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    SG_CHECK(false, path, ": the ", what, " is not a regular file (",
             S_ISDIR(st.st_mode)    ? "a folder"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
             : S_ISCHR(st.st_mode)  ? "a character device"
             : S_ISBLK(st.st_mode)  ? "a block device"
             : S_ISSOCK(st.st_mode) ? "a socket"
                                    : "not a plain file",
             ")");
  }
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

std::string read_text_file(const std::string& path, std::uint64_t limit, const char* what) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, size, what);
  if (size > limit) {
    ::close(fd);
    SG_CHECK(false, path, ": the ", what, " has ", size, " bytes, more than the limit of ", limit);
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      SG_CHECK(false, path, ": reading the ", what, " failed",
               err != 0 ? ": " + reason(err) : std::string(" (it shrank while being read)"));
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return text;
}

namespace {
// The process's umask, read once. umask() can only be read by setting it, so
// it is set back at once; a program that changes its umask on another thread
// at that very moment could race, which is why this runs once, not per file.
mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return mask;
}
}  // namespace

TempFile::TempFile(std::string path) : path_(std::move(path)) {
  SG_CHECK(!path_.empty(), "the output path is empty");
  struct stat st {};
  const bool exists = ::lstat(path_.c_str(), &st) == 0;
  if (exists) {
    SG_CHECK(S_ISREG(st.st_mode), path_,
             ": exists and is not a regular file (a symlink, device, FIFO or folder); refusing "
             "to replace it");
  }
  temp_ = path_ + ".tmp.XXXXXX";
  fd_ = ::mkstemp(temp_.data());
  SG_CHECK(fd_ >= 0, path_, ": cannot write here: ", reason(errno));
  ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  // mkstemp creates the temporary 0600; the output gets the mode a plain
  // open(O_CREAT, 0666) would give it, or keeps the mode of the file it replaces.
  ::fchmod(fd_, exists ? (st.st_mode & 07777) : (0666 & ~process_umask()));
  slot_ = register_temp(temp_);
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
  unregister_temp(slot_);
}

void TempFile::write(std::string_view bytes) {
  SG_CHECK(fd_ >= 0 && !committed_, path_, ": written after commit");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    SG_CHECK(n > 0, path_, ": cannot write ", bytes.size(),
             " bytes: ", n < 0 ? reason(errno) : std::string("no progress"),
             " (nothing was written to ", path_, ")");
    done += static_cast<std::size_t>(n);
  }
}

void TempFile::commit() {
  SG_CHECK(fd_ >= 0 && !committed_, path_, ": committed twice");
  const int fd = fd_;
  fd_ = -1;
  SG_CHECK(::close(fd) == 0, path_, ": cannot write: ", reason(errno), " (nothing was written to ",
           path_, ")");
  SG_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, path_, ": cannot replace: ", reason(errno));
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  TempFile file(path);
  file.write(bytes);
  file.commit();
}

void remove_temp_files_on_signal() noexcept {
  for (auto& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path.data());
  }
}

}  // namespace sinkgraph

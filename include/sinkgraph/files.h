#pragma once
// Files in and out, for everything that reads or writes a path a user gave
// (checkpoints, config.json, IR files, logits and traces): the library's
// readers and writers use these, and so can tools built on it.
//
// Note [Reading untrusted paths]
// A path is opened without blocking (O_NONBLOCK: a FIFO would otherwise wait
// forever for a writer), then refused unless it is a regular file, and read
// only up to a stated limit. Errors name the path and the system's reason
// (permission denied is not "not found").
//
// Note [Temporary files]
// An output is written to "<path>.tmp.XXXXXX" in the destination's folder and
// renamed over the destination only once complete, so a reader never sees a
// half-written file: a full disk or an error removes the temporary, and so
// does a signal (the command-line tool's handler calls
// remove_temp_files_on_signal()). Creating the temporary up front also proves
// the destination writable before any work. An existing destination that is
// not a regular file (a device, a FIFO, a folder, a symlink) is refused, never
// replaced. The output gets the mode a plain create would give it (0666 less
// the umask), or keeps the mode of the file it replaces.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sinkgraph/export.h"

namespace sinkgraph {

// Opens `path` for reading (Note [Reading untrusted paths]); returns the file
// descriptor and its size. `what` names the file's role in messages.
SG_API int open_regular_file(const std::string& path, std::uint64_t& size,
                             const char* what = "file");

// The whole file as text, refused past `limit` bytes.
SG_API std::string read_text_file(const std::string& path, std::uint64_t limit,
                                  const char* what = "file");

class SG_API TempFile {
 public:
  // Creates the temporary beside `path`; throws sinkgraph::Error when the
  // folder cannot be written or `path` exists and is not a regular file.
  explicit TempFile(std::string path);
  ~TempFile();  // removes the temporary unless committed
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(std::string_view bytes);  // throws on a short write (disk full, file too large)
  // Flushes, closes and renames the temporary over the destination.
  void commit();
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_, temp_;
  int fd_ = -1;
  int slot_ = -1;
  bool committed_ = false;
};

// Writes `bytes` to `path` through a TempFile.
SG_API void write_file_atomically(const std::string& path, std::string_view bytes);

// Async-signal-safe: unlinks every temporary still in flight.
SG_API void remove_temp_files_on_signal() noexcept;

}  // namespace sinkgraph

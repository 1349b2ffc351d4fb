#include "compile_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <spawn.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <fmt/core.h>

#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/version.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): for posix_spawnp

// Note [Compile cache]
// A region's shared object lives at <cache>/<key>.so, beside its source
// <key>.cpp (kept for people reading what was generated). The key hashes
// everything the binary depends on: the source (which holds the region's IR
// as loops, its shapes, strides and constants), the compiler's path, size and
// modification time, the flags, sinkgraph's version, kRegionAbi, and this
// CPU's feature flags (code built with -march=native faults on a CPU without
// them). So a second process with the same graph loads the binary without
// compiling, and anything that could change the binary changes the key.
//   - Writes: the source and the object are written under temporary names
//     and renamed into place, so a process never sees a half-written entry
//     (two processes compiling one key both rename; either result is whole).
//   - Loading checks the entry: the object exports its own key
//     (sg_region_key), which must equal the name it was found under. A file
//     that fails to load or carries another key is a corrupt entry: warned
//     about by the caller, removed and compiled again.
//   - The folder is created private to the user (0700). A folder that others
//     may write to is refused (a planted .so would run as us); the region then
//     runs on its kernels.
//   - Size: after each new entry, the oldest entries (by modification time)
//     are removed until the folder holds at most kCacheMaxBytes.
//   - Libraries stay loaded for the life of the process: a captured graph
//     holds plain function pointers into them.

namespace sinkgraph::codegen {
namespace {

namespace fs = std::filesystem;

std::uint64_t fnv1a(std::string_view text, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// This CPU's feature flags, read once per process.
const std::string& cpu_features() {
  static const std::string flags = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) == 0) return line;
    }
    return std::string("unknown cpu");
  }();
  return flags;
}

// The compiler's executable: a path, or a name looked up in PATH.
std::string resolve(const std::string& cxx) {
  if (cxx.find('/') != std::string::npos) return access(cxx.c_str(), X_OK) == 0 ? cxx : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + cxx;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string compiler_identity(const std::string& exe) {
  std::error_code ec;
  const fs::path real = fs::canonical(exe, ec);
  struct stat st {};
  if (ec || ::stat(real.c_str(), &st) != 0) return exe;
  return fmt::format("{} {} {}", real.string(), st.st_size, st.st_mtime);
}

// Runs argv, stderr into `log`; the exit status, or -1 when it could not start.
int run(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string first_lines(const std::string& path, int n) {
  std::ifstream in(path);
  std::string line, out;
  for (int i = 0; i < n && std::getline(in, line); ++i) out += (i ? " | " : "") + line;
  return out;
}

void evict(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  std::int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".so") continue;
    std::error_code e2;
    total += static_cast<std::int64_t>(e.file_size(e2));
    entries.emplace_back(e.last_write_time(e2), e.path());
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& [time, path] : entries) {
    if (total <= kCacheMaxBytes) break;
    std::error_code e2;
    total -= static_cast<std::int64_t>(fs::file_size(path, e2));
    fs::remove(path, e2);
    fs::path src = path;
    fs::remove(src.replace_extension(".cpp"), e2);
  }
}

struct Loaded {
  RegionFn fn = nullptr;
  std::string error;
};

// dlopen + the key check (Note [Compile cache]).
Loaded load(const std::string& so, const std::string& key) {
  void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    return {nullptr, e != nullptr ? e : "dlopen failed"};
  }
  const auto* stored = static_cast<const char*>(::dlsym(handle, "sg_region_key"));
  auto* fn = reinterpret_cast<RegionFn>(::dlsym(handle, "sg_region"));  // NOLINT
  if (stored == nullptr || fn == nullptr || key != stored) {
    ::dlclose(handle);
    return {nullptr, "it holds another region (key mismatch)"};
  }
  return {fn, ""};  // never closed: see Note [Compile cache]
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::string hash_hex(const std::string& text) {
  return fmt::format("{:016x}{:016x}", fnv1a(text, 14695981039346656037ULL),
                     fnv1a(text, 0x9e3779b97f4a7c15ULL));
}

std::string prepare_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    const mode_t old = ::umask(077);
    fs::create_directories(dir, ec);
    ::umask(old);
    if (ec) return "cannot create the cache folder " + dir + ": " + ec.message();
    ::chmod(dir.c_str(), 0700);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return "the cache folder " + dir + " is not a folder";
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
    return "the cache folder " + dir +
           " is not private to this user (others could plant code in it); use a folder only "
           "you can write, e.g. SINKGRAPH_CACHE_DIR";
  return "";
}

std::string cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* d = std::getenv("SINKGRAPH_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/sinkgraph";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : "/tmp") + "/.cache/sinkgraph";
}

std::string compiler() {
  if (const char* c = std::getenv("SINKGRAPH_CXX"); c != nullptr && *c != '\0') return c;
  return SG_CODEGEN_CXX;
}

const std::string& compile_flags() {
  // Note [Generated code and float rounding] in region.cpp: contraction and
  // reassociation (so reductions vectorize), no errno; never
  // -ffinite-math-only (masks and maxima start from -inf).
  static const std::string flags =
      "-std=c++17 -O3 -march=native -fPIC -shared -fno-math-errno -fno-trapping-math "
      "-fno-signed-zeros -fassociative-math -ffp-contract=fast -fno-semantic-interposition";
  return flags;
}

CompileResult compile_region(const std::string& source, const std::string& configured_dir) {
  CompileResult r;
  const std::string cxx = compiler();
  const std::string exe = resolve(cxx);
  if (exe.empty()) {
    r.error = "the C++ compiler '" + cxx + "' was not found (set SINKGRAPH_CXX)";
    return r;
  }
  r.key = hash_hex(source + "\n" + compiler_identity(exe) + "\n" + compile_flags() + "\n" +
                   version() + "\n" + std::to_string(kRegionAbi) + "\n" + cpu_features());
  const std::lock_guard lock(cache_mutex());
  static std::map<std::string, RegionFn> loaded;  // this process's regions, by key
  if (const auto it = loaded.find(r.key); it != loaded.end()) {
    r.fn = it->second;
    r.cache_hit = true;
    return r;
  }
  const std::string dir = cache_dir(configured_dir);
  if (const std::string problem = prepare_dir(dir); !problem.empty()) {
    r.error = problem;
    return r;
  }
  const std::string base = dir + "/" + r.key;
  const std::string so = base + ".so";
  std::error_code ec;
  std::string corrupt;
  if (fs::exists(so, ec)) {
    Loaded l = load(so, r.key);
    if (l.fn != nullptr) {
      r.fn = l.fn;
      r.cache_hit = true;
      loaded[r.key] = r.fn;
      return r;
    }
    corrupt = "corrupt cache entry " + so + " (" + l.error + "); compiled again";
    fs::remove(so, ec);
  }
  // The source names its key, so a loaded object can prove what it is.
  const std::string text = source +
                           "\nextern \"C\" __attribute__((visibility(\"default\"))) const char "
                           "sg_region_key[] = \"" +
                           r.key + "\";\n";
  try {
    write_file_atomically(base + ".cpp", text);
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  const std::string tmp = fmt::format("{}.so.tmp.{}", base, ::getpid());
  const std::string log = fmt::format("{}.log.tmp.{}", base, ::getpid());
  std::vector<std::string> argv{exe};
  std::stringstream fl(compile_flags());
  for (std::string f; fl >> f;) argv.push_back(f);
  argv.insert(argv.end(), {"-o", tmp, base + ".cpp"});
  const int status = run(argv, log);
  if (status != 0) {
    r.error = status < 0
                  ? "cannot run the C++ compiler " + exe
                  : fmt::format("{} exited with status {}: {}", exe, status, first_lines(log, 3));
    fs::remove(tmp, ec);
    fs::remove(log, ec);
    return r;
  }
  fs::remove(log, ec);
  fs::rename(tmp, so, ec);
  if (ec) {
    r.error = "cannot place " + so + ": " + ec.message();
    fs::remove(tmp, ec);
    return r;
  }
  Loaded l = load(so, r.key);
  if (l.fn == nullptr) {
    r.error = "the compiled region did not load: " + l.error;
    return r;
  }
  r.fn = l.fn;
  r.error = corrupt;  // loaded, but the caller reports the corrupt entry it replaced
  loaded[r.key] = r.fn;
  evict(dir);
  return r;
}

}  // namespace sinkgraph::codegen

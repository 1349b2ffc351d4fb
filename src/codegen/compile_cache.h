#pragma once
// Compiling generated source into a loadable function, through an on-disk
// cache shared by processes (Note [Compile cache] in compile_cache.cpp).
#include <cstdint>
#include <string>

namespace sinkgraph::codegen {

// The compute threads as generated code sees them (Note [Parallel loops in
// generated code] in emitters.cpp): `run(ctx, parts, fn, arg)` calls
// fn(arg, part) for every part in [0, parts) on the stream's worker and the
// compute pool (KernelContext::parallel_run), and returns when all are done.
// The prelude declares the same layout as `sg_pool`.
struct RegionPool {
  void* ctx = nullptr;
  int threads = 1;
  void (*run)(void* ctx, int parts, void (*fn)(void* arg, int part), void* arg) = nullptr;
};

// The entry point every generated region defines (Note [Generated regions]):
// `p` the region's tensor addresses, `s` its runtime scalars, `pool` the
// threads its loops may split across; returns 0, or non-zero after writing a
// message into err[0 .. errlen).
using RegionFn = int (*)(void* const* p, const long long* s, char* err, int errlen,
                         const RegionPool* pool);

// Bumped whenever RegionFn or the generated prelude changes meaning: part of
// every cache key, so entries from an older sinkgraph are never loaded.
// 2: no thread_local scratch in the prelude; 3: the compute pool argument.
inline constexpr int kRegionAbi = 3;

struct CompileResult {
  RegionFn fn = nullptr;  // null: failed (see error)
  bool cache_hit = false;
  std::string error;  // why it failed, for the one warning
  std::string key;    // the cache key (hex)
};

// The cache folder: `configured` when not empty, else SINKGRAPH_CACHE_DIR,
// else $XDG_CACHE_HOME/sinkgraph, else $HOME/.cache/sinkgraph.
std::string cache_dir(const std::string& configured);
// Creates `dir` private to the user (0700) when missing; returns "" when it
// can hold cache entries, else why not (not a folder, or writable by others:
// a planted entry would run as us).
std::string prepare_dir(const std::string& dir);
// 128 bits of FNV-1a (two seeds) as hex: cache keys.
std::string hash_hex(const std::string& text);
// The compiler: SINKGRAPH_CXX when set, else the one the project was
// configured with.
std::string compiler();
// The flags every region is compiled with (part of the key).
const std::string& compile_flags();

// Compiles `source` (or loads it from the cache) and returns its sg_region.
// Never throws for a compiler problem: the caller falls back to kernels.
// Loaded libraries stay loaded for the life of the process (a captured graph
// may call them until it is destroyed).
CompileResult compile_region(const std::string& source, const std::string& configured_dir);

// Bytes the cache may hold; older entries are removed past it.
inline constexpr std::int64_t kCacheMaxBytes = 256LL << 20;

}  // namespace sinkgraph::codegen

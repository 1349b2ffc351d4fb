#include <algorithm>
#include <charconv>
#include <functional>
#include <map>

#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"

namespace sinkgraph {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::eager:
      return "eager";
    case Mode::reduce_overhead:
      return "reduce-overhead";
    case Mode::max_autotune:
      return "max-autotune";
  }
  return "?";
}

Mode parse_mode(const std::string& text) {
  for (const Mode m : {Mode::eager, Mode::reduce_overhead, Mode::max_autotune}) {
    if (text == mode_name(m)) return m;
  }
  SG_CHECK(false, "unknown mode '", text,
           "'; expected \"eager\", \"reduce-overhead\" or \"max-autotune\"");
  return Mode::eager;
}

namespace {

bool parse_bool(const std::string& name, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  SG_CHECK(false, "option '", name, "' expects true or false, got '", v, "'");
  return false;
}

std::int64_t parse_count(const std::string& name, const std::string& v, std::int64_t min) {
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  SG_CHECK(ec == std::errc{} && end == v.data() + v.size() && out >= min, "option '", name,
           "' expects an integer >= ", min, ", got '", v, "'");
  return out;
}

struct Option {
  std::function<void(CompilerConfig&, const std::string&)> set;
  std::function<std::string(const CompilerConfig&)> get;
};

template <bool CompilerConfig::*Field>
Option bool_option(const char* name) {
  return {[name](CompilerConfig& c, const std::string& v) { c.*Field = parse_bool(name, v); },
          [](const CompilerConfig& c) { return std::string(c.*Field ? "true" : "false"); }};
}

template <std::int64_t CompilerConfig::*Field>
Option count_option(const char* name, std::int64_t min) {
  return {[name, min](CompilerConfig& c, const std::string& v) {
            c.*Field = parse_count(name, v, min);
          },
          [](const CompilerConfig& c) { return std::to_string(c.*Field); }};
}

template <std::string CompilerConfig::*Field>
Option string_option() {
  return {[](CompilerConfig& c, const std::string& v) { c.*Field = v; },
          [](const CompilerConfig& c) { return c.*Field; }};
}

// The one table of options, in the order they print.
const std::vector<std::pair<std::string, Option>>& options() {
  static const std::vector<std::pair<std::string, Option>> table = {
      {"mode",
       {[](CompilerConfig& c, const std::string& v) { c.mode = parse_mode(v); },
        [](const CompilerConfig& c) { return std::string(mode_name(c.mode)); }}},
      {"force_eager", bool_option<&CompilerConfig::force_eager>("force_eager")},
      {"capture_limit", count_option<&CompilerConfig::capture_limit>("capture_limit", 1)},
      {"force_recapture", bool_option<&CompilerConfig::force_recapture>("force_recapture")},
      {"capture_error_mode",
       {[](CompilerConfig& c, const std::string& v) {
          for (const auto m : {CaptureErrorMode::global, CaptureErrorMode::thread_local_,
                               CaptureErrorMode::relaxed}) {
            if (v == capture_error_mode_name(m)) {
              c.capture_error_mode = m;
              return;
            }
          }
          SG_CHECK(false,
                   "option 'capture_error_mode' expects \"global\", \"thread_local\" or "
                   "\"relaxed\", got '",
                   v, "'");
        },
        [](const CompilerConfig& c) {
          return std::string(capture_error_mode_name(c.capture_error_mode));
        }}},
      {"clone_input", bool_option<&CompilerConfig::clone_input>("clone_input")},
      {"clone_output", bool_option<&CompilerConfig::clone_output>("clone_output")},
      {"frozen_parameter", bool_option<&CompilerConfig::frozen_parameter>("frozen_parameter")},
      {"reuse_graph_pool_in_same_fx",
       bool_option<&CompilerConfig::reuse_graph_pool_in_same_fx>("reuse_graph_pool_in_same_fx")},
      {"use_graph_pool",
       {[](CompilerConfig&, const std::string& v) {
          SG_CHECK(v == "none",
                   "option 'use_graph_pool' takes a MemPool in code "
                   "(CompilerConfig::use_graph_pool); as text only \"none\" is accepted, got '",
                   v, "'");
        },
        [](const CompilerConfig& c) {
          return c.use_graph_pool ? "pool '" + c.use_graph_pool->name() + "'" : std::string("none");
        }}},
      {"warmup_iters", count_option<&CompilerConfig::warmup_iters>("warmup_iters", 0)},
      {"inplace_pass", bool_option<&CompilerConfig::inplace_pass>("inplace_pass")},
      {"input_inplace_pass",
       bool_option<&CompilerConfig::input_inplace_pass>("input_inplace_pass")},
      {"pattern_fusion_pass",
       bool_option<&CompilerConfig::pattern_fusion_pass>("pattern_fusion_pass")},
      {"remove_noop_ops", bool_option<&CompilerConfig::remove_noop_ops>("remove_noop_ops")},
      {"remove_cat_ops", bool_option<&CompilerConfig::remove_cat_ops>("remove_cat_ops")},
      {"memory_planning", bool_option<&CompilerConfig::memory_planning>("memory_planning")},
      {"debug_save", string_option<&CompilerConfig::debug_save>()},
      {"data_dump", string_option<&CompilerConfig::data_dump>()},
      {"recompile_limit", count_option<&CompilerConfig::recompile_limit>("recompile_limit", 1)},
      {"codegen", bool_option<&CompilerConfig::codegen>("codegen")},
      {"cache_dir", string_option<&CompilerConfig::cache_dir>()},
      {"capture_sizes",
       {[](CompilerConfig& c, const std::string& v) {
          std::vector<std::int64_t> sizes;
          std::size_t start = 0;
          while (start <= v.size()) {
            const std::size_t comma = std::min(v.find(',', start), v.size());
            const std::string word = v.substr(start, comma - start);
            std::int64_t n = 0;
            const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), n);
            SG_CHECK(!word.empty() && ec == std::errc{} && end == word.data() + word.size() &&
                         n >= 1 && (sizes.empty() || n > sizes.back()),
                     "option 'capture_sizes' expects increasing batch sizes >= 1 separated by "
                     "commas, such as 1,2,4,8; got '",
                     v, "'");
            sizes.push_back(n);
            start = comma + 1;
          }
          c.capture_sizes = std::move(sizes);
        },
        [](const CompilerConfig& c) {
          std::string out;
          for (const std::int64_t n : c.capture_sizes)
            out += (out.empty() ? "" : ",") + std::to_string(n);
          return out;
        }}},
      {"graph_memory_budget",
       count_option<&CompilerConfig::graph_memory_budget>("graph_memory_budget", 0)},
  };
  return table;
}

const Option& find_option(const std::string& name) {
  for (const auto& [n, o] : options()) {
    if (n == name) return o;
  }
  std::string known;
  for (const auto& [n, o] : options()) known += (known.empty() ? "" : ", ") + n;
  SG_CHECK(false, "unknown compiler option '", name, "'; known options: ", known);
  std::abort();
}

}  // namespace

void CompilerConfig::set(const std::string& name, const std::string& value) {
  find_option(name).set(*this, value);
}

std::string CompilerConfig::get(const std::string& name) const {
  return find_option(name).get(*this);
}

const std::vector<std::string>& CompilerConfig::option_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [n, o] : options()) out.push_back(n);
    return out;
  }();
  return names;
}

std::string CompilerConfig::str() const {
  std::string out;
  for (const auto& [n, o] : options()) out += n + " = " + o.get(*this) + "\n";
  out += "pre_passes = " + std::to_string(pre_passes.size()) +
         ", post_passes = " + std::to_string(post_passes.size()) + "\n";
  return out;
}

}  // namespace sinkgraph

// Note [One way to read a value]
// Every value the command line takes is read by the rules below, whatever the
// flag and whatever CLI11 would accept on its own:
//  - An integer (CLI11's INT and UINT options) is decimal: digits with an
//    optional leading '-' (UINT: none), as std::from_chars reads them. CLI11
//    also took `0x3`, `+3` and ` 3` for `--steps` (3 steps) while
//    `--prompt-ids 0x1` was refused, and clamped a value out of range to
//    the type's limit, so `--steps 99999999999999999999999` was
//    reported as 9223372036854775807; now it is an error quoting the text as
//    typed. `--prompt-ids`, `--prompts-file` lines and `--seed` use the same
//    reader.
//  - A real (FLOAT) is a finite decimal number; `nan`, `inf` and values that
//    overflow a double are errors.
//  - No value may be empty: `--dump-logits ""` wrote nothing, `--temperature
//    ""` meant greedy and `--prompts-file ""` ran the default prompt, each
//    without a word. Leave the flag out for its default.
// The checks are attached to every option of every subcommand in one place
// (check_values), so a flag added later gets them too; their errors reach
// main() as CLI11 validation errors, one `error:` line naming the flag.
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>

#include <fmt/core.h>

#include "commands.h"

namespace sinkgraph::tools {

namespace {

constexpr const char* kEmpty = "the value is empty";

template <typename T>
std::string integer_error(const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return fmt::format("{} is out of range ({} to {})", text, std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::max());
  }
  if (ec != std::errc() || ptr != end) {
    return fmt::format("'{}' is not a decimal integer{}", text,
                       std::is_signed_v<T> ? "" : " of 0 or more");
  }
  return "";
}

std::string real_error(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    return fmt::format("{} is out of range for a double", text);
  }
  if (ec != std::errc() || ptr != end || !std::isfinite(v)) {
    return fmt::format("'{}' is not a finite decimal number", text);
  }
  return "";
}

}  // namespace

std::optional<std::string> value_error(const std::string& text, ValueKind kind) {
  if (text.empty()) return std::string(kEmpty);
  std::string e;
  switch (kind) {
    case ValueKind::text:
      break;
    case ValueKind::integer:
      e = integer_error<std::int64_t>(text);
      break;
    case ValueKind::unsigned_integer:
      e = integer_error<std::uint64_t>(text);
      break;
    case ValueKind::real:
      e = real_error(text);
      break;
  }
  if (e.empty()) return std::nullopt;
  return e;
}

namespace {
// The value of `text`, read as value_error checked it, or an error naming `where`.
template <typename T>
T parse_decimal(const std::string& text, const std::string& where, ValueKind kind) {
  const auto e = value_error(text, kind);
  SG_CHECK(!e, where, ": ", e.value_or(""));
  T v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}
}  // namespace

std::int64_t parse_integer(const std::string& text, const std::string& where) {
  return parse_decimal<std::int64_t>(text, where, ValueKind::integer);
}

std::uint64_t parse_unsigned(const std::string& text, const std::string& where) {
  return parse_decimal<std::uint64_t>(text, where, ValueKind::unsigned_integer);
}

void check_values(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* opt : sub->get_options()) {
      if (opt->get_type_size() == 0 && opt->get_expected_min() == 0) continue;  // a plain flag
      const std::string type = opt->get_type_name();
      const ValueKind kind = type.starts_with("UINT")    ? ValueKind::unsigned_integer
                             : type.starts_with("INT")   ? ValueKind::integer
                             : type.starts_with("FLOAT") ? ValueKind::real
                                                         : ValueKind::text;
      // An empty description keeps --help's type names as they are.
      const bool flag = opt->nonpositional();
      opt->check(CLI::Validator(
          [kind, flag](std::string& text) {
            if (text.empty() && flag)
              return std::string(kEmpty) + " (leave the flag out for its default)";
            return value_error(text, kind).value_or("");
          },
          ""));
    }
  }
}

}  // namespace sinkgraph::tools

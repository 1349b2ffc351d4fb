// Saved graphs: a compiled function's post-pass graphs and guards on disk.
//
// Note [Saved graphs]
// Tracing and the passes cost the first call of every process. A compiled
// function can write what they produced (CompiledFunction::save) and a later
// process read it back (load), so its first call goes straight to capture:
//   - The file is JSON. Per guard set: the post-pass graph in the IR's text
//     form (which round-trips, docs/ir.md), the argument guards, and one
//     binding per graph input: an argument index, or a param's name.
//   - Params are written by name only, never their data. A loaded graph finds
//     each one again through TraceOptions::parameters (the model's
//     named_parameters()) and guards it on that tensor as tracing would. So a
//     graph is savable only when every param it reads is a listed tensor: a
//     weight a pass computed (frozen_parameter's folded params, max-autotune's
//     merged projections without code generation) has no name, and save()
//     refuses it, naming the input.
//   - A file belongs to one function: the graph name, the options that shape
//     the post-pass graph, the pass pipeline and sinkgraph's version must all
//     match, or load() refuses it naming what differs. The file cannot see the
//     function's code; whoever names the file (a path, or
//     TraceOptions::cache_key) vouches for that.
//   - The file is untrusted input: everything is checked before anything
//     changes. Each graph parses and verifies; bindings cover the arguments
//     exactly as tracing orders them (arguments first, then params); each
//     tensor input's dtype, rank and static dims agree with its guard, and
//     each param's with the model's tensor. A call can then never bind a
//     value the graph does not expect.
//   - Writes go through a temporary file and a rename (files.h), so a reader
//     never sees half a file.
// With TraceOptions::cache_key, the file lives in the compile cache folder
// (src/codegen/compile_cache.cpp, which also checks the folder is private),
// named by a hash of the key, the graph name, the graph-shaping options, the
// passes and the version. It is read before the first call and rewritten
// after each new trace; a file that cannot be used warns once and the
// function traces as if it were absent.
//
// A loaded graph is a candidate, not one of the function's graphs: it is
// checked when read, but built (and, in max-autotune, its code compiled or
// fetched) only when a call's guards match it and no graph of this process
// does, and only then does it count against recompile_limit. A cache shared
// by many runs collects guard sets no single run needs (generate sizes its
// KV cache by prompt plus steps, so every --steps is a guard set); counted
// up front, a file of recompile_limit graphs once left no room for the
// process's own, and a run with a new size decoded eagerly. The file is
// written with this process's graphs first, then the candidates it did not
// use, recompile_limit in all: the guard sets of the latest runs stay.
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../codegen/compile_cache.h"
#include "../core/log.h"
#include "sinkgraph/compiler.h"
#include "sinkgraph/error.h"
#include "sinkgraph/files.h"
#include "sinkgraph/version.h"

namespace sinkgraph {
namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "sinkgraph.saved_graphs";
constexpr int kFormatVersion = 1;
constexpr std::uint64_t kMaxFileBytes = 256ULL << 20;

// The options that change the post-pass graph. The rest act at capture or at
// run time (pools, limits, cloning, memory planning, folders) and may differ.
const std::vector<std::string>& graph_shaping_options() {
  static const std::vector<std::string> names = {"mode",
                                                 "force_eager",
                                                 "frozen_parameter",
                                                 "inplace_pass",
                                                 "input_inplace_pass",
                                                 "pattern_fusion_pass",
                                                 "remove_noop_ops",
                                                 "remove_cat_ops",
                                                 "codegen"};
  return names;
}

json shaping_options(const CompilerConfig& config) {
  json out = json::object();
  for (const std::string& name : graph_shaping_options()) out[name] = config.get(name);
  return out;
}

const char* alias_name(ArgGuard::Alias alias) {
  switch (alias) {
    case ArgGuard::Alias::none:
      return "none";
    case ArgGuard::Alias::same:
      return "same";
    case ArgGuard::Alias::disjoint:
      return "disjoint";
  }
  return "none";
}

json arg_json(const ArgGuard& g) {
  switch (g.kind) {
    case ArgGuard::Kind::tensor:
      return {{"kind", "tensor"},
              {"dtype", dtype_name(g.dtype)},
              {"device", device_type_name(g.device)},
              {"dims", g.dims},
              {"contiguous", g.contiguous},
              {"strides", g.strides},
              {"alias", alias_name(g.alias)},
              {"alias_of", g.alias_of}};
    case ArgGuard::Kind::sym:
      return {{"kind", "sym"}};
    case ArgGuard::Kind::integer:
      return {{"kind", "integer"}, {"value", g.value}};
  }
  return {};
}

// One argument guard from the file; `where` prefixes every message.
ArgGuard parse_arg(const json& j, std::size_t index, const std::string& where) {
  ArgGuard g;
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "sym") {
    g.kind = ArgGuard::Kind::sym;
    return g;
  }
  if (kind == "integer") {
    g.kind = ArgGuard::Kind::integer;
    g.value = j.at("value").get<std::int64_t>();
    return g;
  }
  SG_CHECK(kind == "tensor", where, ": kind '", kind, "' is not tensor, sym or integer");
  g.kind = ArgGuard::Kind::tensor;
  const std::string dtype = j.at("dtype").get<std::string>();
  const std::optional<DType> dt = parse_dtype(dtype);
  SG_CHECK(dt.has_value(), where, ": unknown dtype '", dtype, "'");
  g.dtype = *dt;
  const std::string device = j.at("device").get<std::string>();
  bool found = false;
  for (int d = 0; d < kNumDeviceTypes; ++d) {
    if (device == device_type_name(static_cast<DeviceType>(d))) {
      g.device = static_cast<DeviceType>(d);
      found = true;
    }
  }
  SG_CHECK(found, where, ": unknown device type '", device, "'");
  g.dims = j.at("dims").get<std::vector<std::int64_t>>();
  SG_CHECK(g.dims.size() <= static_cast<std::size_t>(kMaxDims), where, ": rank ", g.dims.size(),
           " is beyond ", kMaxDims);
  for (const std::int64_t d : g.dims) SG_CHECK(d >= -1, where, ": dimension ", d, " is invalid");
  g.contiguous = j.at("contiguous").get<bool>();
  g.strides = j.at("strides").get<std::vector<std::int64_t>>();
  SG_CHECK(g.strides.empty() || g.strides.size() == g.dims.size(), where, ": ", g.strides.size(),
           " strides for rank ", g.dims.size());
  const std::string alias = j.at("alias").get<std::string>();
  if (alias == "same") {
    g.alias = ArgGuard::Alias::same;
  } else if (alias == "disjoint") {
    g.alias = ArgGuard::Alias::disjoint;
  } else {
    SG_CHECK(alias == "none", where, ": alias '", alias, "' is not none, same or disjoint");
  }
  g.alias_of = j.at("alias_of").get<int>();
  if (g.alias == ArgGuard::Alias::none) {
    SG_CHECK(g.alias_of == -1, where, ": alias_of ", g.alias_of, " without an alias");
  } else {
    SG_CHECK(g.alias_of >= 0 && static_cast<std::size_t>(g.alias_of) < index, where, ": alias_of ",
             g.alias_of, " must name an earlier argument");
  }
  return g;
}

// Tracing gives these arguments a graph input, in this order
// (src/trace/tracer.cpp): tensors that are not a repeat of an earlier
// argument, and SymInts.
std::vector<int> bound_args(const std::vector<ArgGuard>& args) {
  std::vector<int> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ArgGuard& g = args[i];
    if (g.kind == ArgGuard::Kind::sym ||
        (g.kind == ArgGuard::Kind::tensor && g.alias != ArgGuard::Alias::same)) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

std::string dims_text(std::span<const std::int64_t> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}

std::string meta_text(const TensorMeta& meta) {
  std::string out = std::string(dtype_name(meta.dtype)) + "[";
  for (int d = 0; d < meta.shape.size(); ++d) out += (d ? "," : "") + meta.shape[d].str();
  return out + "]";
}

// The input's static shape, or nullopt when a dimension is symbolic.
std::optional<std::vector<std::int64_t>> static_shape(const ir::Value& v) {
  std::vector<std::int64_t> out;
  for (const SymInt& d : v.meta.shape.span()) {
    if (d.is_symbolic()) return std::nullopt;
    out.push_back(d.value());
  }
  return out;
}

// A tensor argument's graph input must be what its guard admits.
void check_arg_input(const ir::Value& in, const ArgGuard& g, const std::string& where) {
  if (g.kind == ArgGuard::Kind::sym) {
    SG_CHECK(in.is_sym, where, ": %", in.name, " is bound to a SymInt argument but is a tensor");
    return;
  }
  SG_CHECK(!in.is_sym && in.kind != ir::InputKind::sym, where, ": %", in.name,
           " is bound to a tensor argument but is a sym input");
  SG_CHECK(in.meta.dtype == g.dtype, where, ": %", in.name, " is ", dtype_name(in.meta.dtype),
           " in the graph but ", dtype_name(g.dtype), " in its guard");
  SG_CHECK(in.meta.device == g.device, where, ": %", in.name, " is on ",
           device_type_name(in.meta.device), " in the graph but ", device_type_name(g.device),
           " in its guard");
  SG_CHECK(static_cast<std::size_t>(in.meta.shape.size()) == g.dims.size(), where, ": %", in.name,
           " has rank ", in.meta.shape.size(), " in the graph but ", g.dims.size(),
           " in its guard");
  for (std::size_t d = 0; d < g.dims.size(); ++d) {
    const SymInt& dim = in.meta.shape[static_cast<int>(d)];
    const bool ok =
        g.dims[d] < 0 ? dim.is_symbolic() : !dim.is_symbolic() && dim.value() == g.dims[d];
    SG_CHECK(ok, where, ": %", in.name, " dimension ", d, " is ", dim.str(), " in the graph but ",
             g.dims[d] < 0 ? std::string("dynamic") : std::to_string(g.dims[d]), " in its guard");
  }
}

// The saved file's name for TraceOptions::cache_key (Note [Saved graphs]).
std::string saved_name(const TraceOptions& options, const CompilerConfig& config) {
  std::string text = options.cache_key + "\n" + options.graph_name + "\n" +
                     shaping_options(config).dump() + "\n" + version() + "\n" +
                     std::to_string(kFormatVersion);
  for (const std::string& pass : GraphCompiler(config).pipeline()) text += "\n" + pass;
  return codegen::hash_hex(text) + ".graphs.json";
}

}  // namespace

void CompiledFunction::save(const std::string& path) const {
  std::lock_guard lock(mutex_);
  save_locked(path);
}

std::size_t CompiledFunction::load(const std::string& path) {
  std::lock_guard lock(mutex_);
  return load_locked(path);
}

void CompiledFunction::save_locked(const std::string& path) const {
  const CompilerConfig& config = backend_->config();
  // This process's graphs first, then saved ones it has not used, up to
  // recompile_limit: the file keeps the latest run's guard sets first.
  std::vector<const Entry*> kept;
  for (const auto* list : {&entries_, &saved_}) {
    for (const auto& e : *list) {
      if (static_cast<std::int64_t>(kept.size()) < config.recompile_limit) kept.push_back(e.get());
    }
  }
  json graphs = json::array();
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const TracedGraph& t = kept[i]->traced;
    json inputs = json::array();
    for (std::size_t k = 0; k < t.bindings.size(); ++k) {
      const InputBinding& b = t.bindings[k];
      if (b.source == InputBinding::Source::arg) {
        inputs.push_back({{"arg", b.index}});
        continue;
      }
      const auto named = std::find_if(t.guards.params.begin(), t.guards.params.end(),
                                      [&](const ParamGuard& p) { return p.param == b.index; });
      SG_CHECK(named != t.guards.params.end(), "save: graph ", i, " of @", options_.graph_name,
               " reads %", t.graph->inputs()[k]->name,
               ", a tensor the model does not list by name (TraceOptions::parameters) or one a "
               "pass computed (frozen_parameter's folded weights, merged projections); saved "
               "graphs name every param, so this function cannot be saved");
      inputs.push_back({{"param", named->name}});
    }
    json args = json::array();
    for (const ArgGuard& g : t.guards.args) args.push_back(arg_json(g));
    graphs.push_back({{"reason", kept[i]->reason},
                      {"args", std::move(args)},
                      {"inputs", std::move(inputs)},
                      {"ir", ir::print(*t.graph)}});
  }
  const json file = {{"format", kFormat},
                     {"format_version", kFormatVersion},
                     {"sinkgraph", version()},
                     {"graph_name", options_.graph_name},
                     {"options", shaping_options(config)},
                     {"passes", GraphCompiler(config).pipeline()},
                     {"graphs", std::move(graphs)}};
  write_file_atomically(path, file.dump(1));
}

std::size_t CompiledFunction::load_locked(const std::string& path) {
  SG_CHECK(entries_.empty(), "load: @", options_.graph_name, " already has ", entries_.size(),
           " graph(s); load saved graphs into a compiled function before its first call");
  const CompilerConfig& config = backend_->config();
  const std::string text = read_text_file(path, kMaxFileBytes, "saved graphs");
  std::vector<std::unique_ptr<Entry>> loaded;
  try {
    const json file = json::parse(text);
    SG_CHECK(file.is_object() && file.value("format", "") == kFormat, path,
             ": not a sinkgraph saved-graphs file");
    const int format_version = file.at("format_version").get<int>();
    SG_CHECK(format_version == kFormatVersion, path, ": format version ", format_version,
             "; this sinkgraph reads ", kFormatVersion);
    const std::string saved_version = file.at("sinkgraph").get<std::string>();
    SG_CHECK(saved_version == version(), path, ": saved by sinkgraph ", saved_version, "; this is ",
             version(), " (its operators may differ: trace again)");
    const std::string graph_name = file.at("graph_name").get<std::string>();
    SG_CHECK(graph_name == options_.graph_name, path, ": saved for @", graph_name, ", not @",
             options_.graph_name);
    const json& options = file.at("options");
    for (const std::string& name : graph_shaping_options()) {
      const std::string saved = options.at(name).get<std::string>();
      SG_CHECK(saved == config.get(name), path, ": saved with ", name, "=", saved,
               "; this function's backend has ", name, "=", config.get(name));
    }
    const auto passes = file.at("passes").get<std::vector<std::string>>();
    SG_CHECK(passes == GraphCompiler(config).pipeline(), path,
             ": saved after other passes than this backend runs");

    const NamedTensors handles = options_.parameters ? options_.parameters() : NamedTensors{};
    const json& graphs = file.at("graphs");
    SG_CHECK(graphs.is_array(), path, ": 'graphs' is not a list");
    SG_CHECK(static_cast<std::int64_t>(graphs.size()) <= config.recompile_limit, path, ": ",
             graphs.size(), " graphs, beyond recompile_limit (", config.recompile_limit, ")");
    for (std::size_t i = 0; i < graphs.size(); ++i) {
      const json& g = graphs[i];
      const std::string where = path + ": graph " + std::to_string(i);
      auto e = std::make_unique<Entry>();
      TracedGraph& t = e->traced;
      t.graph = ir::parse(g.at("ir").get<std::string>(), where);
      ir::verify(*t.graph, where);
      SG_CHECK(t.graph->name == options_.graph_name, where, " is @", t.graph->name, ", not @",
               options_.graph_name);
      const json& args = g.at("args");
      SG_CHECK(args.is_array(), where, ": 'args' is not a list");
      for (std::size_t a = 0; a < args.size(); ++a) {
        t.guards.args.push_back(parse_arg(args[a], a, where + " argument " + std::to_string(a)));
        const ArgGuard& guard = t.guards.args.back();
        if (guard.alias != ArgGuard::Alias::none) {
          SG_CHECK(t.guards.args[static_cast<std::size_t>(guard.alias_of)].kind ==
                       ArgGuard::Kind::tensor,
                   where, " argument ", a, ": aliases an argument that is not a tensor");
        }
      }
      const std::vector<int> expected = bound_args(t.guards.args);
      const json& inputs = g.at("inputs");
      const auto& graph_inputs = t.graph->inputs();
      SG_CHECK(inputs.is_array() && inputs.size() == graph_inputs.size(), where, ": ",
               inputs.size(), " input bindings for ", graph_inputs.size(), " graph inputs");
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        const ir::Value& in = *graph_inputs[k];
        if (k < expected.size()) {
          const int arg = inputs[k].at("arg").get<int>();
          SG_CHECK(arg == expected[k], where, ": input %", in.name, " is bound to argument ", arg,
                   " where tracing binds argument ", expected[k]);
          check_arg_input(in, t.guards.args[static_cast<std::size_t>(arg)], where);
          t.bindings.push_back({InputBinding::Source::arg, arg});
          continue;
        }
        const std::string name = inputs[k].at("param").get<std::string>();
        SG_CHECK(in.kind == ir::InputKind::param, where, ": input %", in.name,
                 " is bound to parameter '", name, "' but is not a param input");
        const auto h = std::find_if(handles.begin(), handles.end(),
                                    [&](const auto& p) { return p.first == name; });
        SG_CHECK(h != handles.end() && h->second != nullptr && h->second->defined() &&
                     !h->second->is_traced(),
                 where, ": the model has no parameter '", name, "' (TraceOptions::parameters)");
        const Tensor& p = *h->second;
        const std::optional<std::vector<std::int64_t>> shape = static_shape(in);
        SG_CHECK(shape && p.dtype() == in.meta.dtype &&
                     std::equal(shape->begin(), shape->end(), p.shape().begin(), p.shape().end()),
                 where, ": parameter '", name, "' is ", dtype_name(p.dtype()), dims_text(p.shape()),
                 " in the model but ", meta_text(in.meta), " in the graph");
        ParamGuard pg;
        pg.name = name;
        pg.param = static_cast<int>(t.params.size());
        pg.handle = h->second;
        pg.storage = p.storage().get();
        pg.offset = p.offset();
        pg.dtype = p.dtype();
        pg.shape.assign(p.shape().begin(), p.shape().end());
        pg.strides.assign(p.strides().begin(), p.strides().end());
        t.guards.params.push_back(std::move(pg));
        t.bindings.push_back({InputBinding::Source::param, static_cast<int>(t.params.size())});
        t.params.push_back(p);
      }
      e->reason = g.at("reason").get<std::string>();
      e->loaded_from = path;
      loaded.push_back(std::move(e));
    }
  } catch (const json::exception& ex) {
    throw Error(path + ": not a valid saved-graphs file: " + ex.what());
  }
  // Checked in full: only now does anything change. Built when a call takes
  // one (take_saved_graph_locked).
  const std::size_t n = loaded.size();
  for (auto& e : loaded) saved_.push_back(std::move(e));
  return n;
}

CompiledFunction::Entry* CompiledFunction::take_saved_graph_locked(std::span<const Arg> args) {
  const auto match = std::find_if(saved_.begin(), saved_.end(), [&](const auto& e) {
    return e->traced.guards.check(args, nullptr);
  });
  if (match == saved_.end()) return nullptr;
  std::unique_ptr<Entry> e = std::move(*match);
  saved_.erase(match);
  e->compiled = GraphCompiler(backend_->config()).build(e->traced);
  log_.push_back("graph " + std::to_string(entries_.size()) + " loaded from " + e->loaded_from);
  detail::info("function @" + options_.graph_name + ": " + log_.back());
  entries_.push_back(std::move(e));
  return entries_.back().get();
}

void CompiledFunction::use_saved_graphs_locked() {
  if (saved_checked_) return;
  saved_checked_ = true;
  if (options_.cache_key.empty()) return;
  const CompilerConfig& config = backend_->config();
  const std::string dir = codegen::cache_dir(config.cache_dir);
  if (const std::string problem = codegen::prepare_dir(dir); !problem.empty()) {
    detail::warn("saved graphs for @" + options_.graph_name + " are off: " + problem);
    return;
  }
  saved_path_ = dir + "/" + saved_name(options_, config);
  std::error_code ec;
  if (!std::filesystem::exists(saved_path_, ec)) return;
  try {
    const std::size_t n = load_locked(saved_path_);
    detail::info("function @" + options_.graph_name + ": loaded " + std::to_string(n) +
                 " graph(s) from " + saved_path_);
  } catch (const Error& e) {
    detail::warn(std::string("ignoring saved graphs (they will be written again): ") + e.what());
  }
}

void CompiledFunction::update_saved_graphs_locked() {
  if (saved_path_.empty()) return;
  try {
    save_locked(saved_path_);
  } catch (const Error& e) {
    detail::warn(std::string("saved graphs for @") + options_.graph_name + " are off: " + e.what());
    saved_path_.clear();
  }
}

}  // namespace sinkgraph

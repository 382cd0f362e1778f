#include "flywheel/replay/service/config.h"

#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "flywheel/replay/checkpoint.h"
#include "flywheel/replay/service/insert_log.h"

namespace flywheel::replay {
namespace {

constexpr std::string_view kExample = R"(# flywheel replay server configuration (docs/replay.md, "Server configuration").
# Run: flywheel replay serve --config tables.toml [--port 9000]

host = "127.0.0.1"            # loopback only
port = 9000                   # 0 picks a free port; --port overrides
max_message_mb = 64
checkpoint_dir = "replay-checkpoints"   # omit for no checkpoints
checkpoint_interval_s = 600             # 0: only on request (and at shutdown)
checkpoint_keep_last = 3
restore = true                # serve the newest checkpoint in checkpoint_dir on start
insert_log = false            # true: log inserts so acknowledged items survive kill -9
insert_log_sync = "none"      # none | interval (fdatasync every insert_log_sync_ms) | always

# Prioritized experience replay, 4 samples per insert once 1000 items are in.
[[table]]
name = "replay"
sampler = { kind = "prioritized", priority_exponent = 0.6 }
remover = "fifo"
max_size = 1_000_000
max_times_sampled = 0         # 0 = unlimited
rate_limiter = { kind = "sample_to_insert_ratio", samples_per_insert = 4.0, min_size_to_sample = 1000, error_buffer = 100.0 }
signature = { obs = "float32[4]", action = "int64", reward = "float32" }

# An on-policy queue: every item sampled exactly once, in order.
[[table]]
name = "queue"
preset = "queue"              # fifo sampler and remover, max_times_sampled 1, Queue(max_size) limiter
max_size = 10_000
)";

Result<std::unique_ptr<ItemSelector>> SelectorFromToml(const toml::Value& table, std::string_view key,
                                                       std::string_view default_kind, uint64_t default_seed) {
  const toml::Value* v = table.Find(key);
  std::string kind(default_kind);
  uint64_t seed = default_seed;
  double exponent = -1;
  const toml::Value* where = v != nullptr ? v : &table;
  if (v != nullptr && v->is_string()) {
    kind = v->as_string();
  } else if (v != nullptr && v->is_table()) {
    FW_RETURN_IF_ERROR(toml::CheckKeys(*v, {"kind", "priority_exponent", "seed"}));
    FW_ASSIGN_OR_RETURN(kind, toml::GetString(*v, "kind"));
    FW_ASSIGN_OR_RETURN(int64_t s, toml::GetInt(*v, "seed", static_cast<int64_t>(default_seed)));
    seed = static_cast<uint64_t>(s);
    FW_ASSIGN_OR_RETURN(exponent, toml::GetDouble(*v, "priority_exponent", -1.0));
    if (v->Find("priority_exponent") != nullptr && kind != "prioritized") {
      return v->Find("priority_exponent")->Error("priority_exponent is only for kind = \"prioritized\"");
    }
  } else if (v != nullptr) {
    return v->Error(absl::StrCat(AsAbsl(key), ": expected a selector name or {kind = ...}, got ",
                                 AsAbsl(toml::TypeName(v->type()))));
  }
  if (kind == "uniform") return NewUniformSelector(seed);
  if (kind == "fifo") return NewFifoSelector();
  if (kind == "lifo") return NewLifoSelector();
  if (kind == "min_heap") return NewMinHeapSelector();
  if (kind == "max_heap") return NewMaxHeapSelector();
  if (kind == "prioritized") {
    if (!(exponent >= 0) || exponent == std::numeric_limits<double>::infinity()) {
      return where->Error(absl::StrCat(AsAbsl(key),
                                       ": prioritized needs priority_exponent, a finite number >= 0 "
                                       "(e.g. {kind = \"prioritized\", priority_exponent = 0.6})"));
    }
    return NewPrioritizedSelector(exponent, seed);
  }
  return where->Error(absl::StrCat(AsAbsl(key), ": unknown selector \"", kind,
                                   "\" (uniform, prioritized, fifo, lifo, min_heap, max_heap)"));
}

Result<RateLimiterOptions> LimiterFromToml(const toml::Value& table, int64_t max_size) {
  const toml::Value* v = table.Find("rate_limiter");
  if (v == nullptr) return RateLimiterOptions::MinSize(1);
  if (!v->is_table()) {
    return v->Error(absl::StrCat("rate_limiter: expected {kind = ...}, got ", AsAbsl(toml::TypeName(v->type()))));
  }
  FW_ASSIGN_OR_RETURN(std::string kind, toml::GetString(*v, "kind"));
  RateLimiterOptions o;
  if (kind == "min_size") {
    FW_RETURN_IF_ERROR(toml::CheckKeys(*v, {"kind", "min_size"}));
    FW_ASSIGN_OR_RETURN(int64_t n, toml::GetInt(*v, "min_size", 1));
    o = RateLimiterOptions::MinSize(n);
  } else if (kind == "sample_to_insert_ratio") {
    FW_RETURN_IF_ERROR(
        toml::CheckKeys(*v, {"kind", "samples_per_insert", "min_size_to_sample", "error_buffer"}));
    FW_ASSIGN_OR_RETURN(double spi, toml::GetDouble(*v, "samples_per_insert"));
    FW_ASSIGN_OR_RETURN(int64_t min_size, toml::GetInt(*v, "min_size_to_sample"));
    FW_ASSIGN_OR_RETURN(double buffer, toml::GetDouble(*v, "error_buffer"));
    o = RateLimiterOptions::SampleToInsertRatio(spi, min_size, buffer);
  } else if (kind == "queue" || kind == "stack") {
    FW_RETURN_IF_ERROR(toml::CheckKeys(*v, {"kind", "size"}));
    FW_ASSIGN_OR_RETURN(int64_t n, toml::GetInt(*v, "size", max_size));
    o = kind == "queue" ? RateLimiterOptions::Queue(n) : RateLimiterOptions::Stack(n);
  } else if (kind == "custom") {
    FW_RETURN_IF_ERROR(
        toml::CheckKeys(*v, {"kind", "samples_per_insert", "min_size_to_sample", "min_diff", "max_diff"}));
    FW_ASSIGN_OR_RETURN(o.samples_per_insert, toml::GetDouble(*v, "samples_per_insert"));
    FW_ASSIGN_OR_RETURN(o.min_size_to_sample, toml::GetInt(*v, "min_size_to_sample"));
    FW_ASSIGN_OR_RETURN(o.min_diff, toml::GetDouble(*v, "min_diff"));
    FW_ASSIGN_OR_RETURN(o.max_diff, toml::GetDouble(*v, "max_diff"));
  } else {
    return v->Find("kind")->Error(absl::StrCat("rate_limiter: unknown kind \"", kind,
                                               "\" (min_size, sample_to_insert_ratio, queue, stack, custom)"));
  }
  Status valid = o.Validate();
  if (!valid.ok()) return v->Error(absl::StrCat("rate_limiter: ", valid.message()));
  return o;
}

Result<std::optional<Signature>> SignatureFromToml(const toml::Value& table) {
  const toml::Value* v = table.Find("signature");
  if (v == nullptr) return std::optional<Signature>();
  if (!v->is_table()) {
    return v->Error(absl::StrCat("signature: expected {column = \"type\", ...}, got ",
                                 AsAbsl(toml::TypeName(v->type()))));
  }
  Signature s;
  for (const auto& [name, type] : v->as_table()) {
    if (!type.is_string()) return type.Error(absl::StrCat("signature column '", name, "': expected a type string"));
    auto t = format::DataType::Parse(type.as_string());
    if (!t.ok()) return type.Error(absl::StrCat("signature column '", name, "': ", t.status().message()));
    s.columns.emplace_back(name, *std::move(t));
  }
  return std::optional<Signature>(std::move(s));
}

Result<std::shared_ptr<ReplayTable>> TableFromToml(const toml::Value& t, uint64_t seed) {
  if (!t.is_table()) return t.Error("[[table]] entries must be tables");
  FW_RETURN_IF_ERROR(toml::CheckKeys(t, {"name", "preset", "sampler", "remover", "max_size", "max_times_sampled",
                                         "rate_limiter", "signature", "watchdog_s"}));
  ReplayTableOptions o;
  FW_ASSIGN_OR_RETURN(o.name, toml::GetString(t, "name"));
  if (o.name.empty()) return t.Find("name")->Error("name must not be empty");
  FW_ASSIGN_OR_RETURN(o.max_size, toml::GetInt(t, "max_size", o.max_size));
  FW_ASSIGN_OR_RETURN(std::string preset, toml::GetString(t, "preset", ""));
  std::string_view sampler = "uniform", remover = "fifo";
  int64_t max_times_sampled = 0;
  if (preset == "queue" || preset == "stack") {
    for (const char* k : {"sampler", "remover", "max_times_sampled", "rate_limiter"}) {
      if (t.Find(k) != nullptr) {
        return t.Find(k)->Error(absl::StrCat("preset \"", preset, "\" sets ", k, "; remove one of them"));
      }
    }
    sampler = remover = preset == "queue" ? "fifo" : "lifo";
    max_times_sampled = 1;
    o.rate_limiter = preset == "queue" ? RateLimiterOptions::Queue(o.max_size) : RateLimiterOptions::Stack(o.max_size);
  } else if (!preset.empty()) {
    return t.Find("preset")->Error(absl::StrCat("unknown preset \"", preset, "\" (queue, stack)"));
  } else {
    FW_ASSIGN_OR_RETURN(o.rate_limiter, LimiterFromToml(t, o.max_size));
  }
  FW_ASSIGN_OR_RETURN(o.sampler, SelectorFromToml(t, "sampler", sampler, seed));
  FW_ASSIGN_OR_RETURN(o.remover, SelectorFromToml(t, "remover", remover, seed));
  FW_ASSIGN_OR_RETURN(int64_t mts, toml::GetInt(t, "max_times_sampled", max_times_sampled));
  if (mts < 0 || mts > std::numeric_limits<int32_t>::max()) {
    return t.Find("max_times_sampled")->Error("max_times_sampled must be in [0, 2^31-1]");
  }
  o.max_times_sampled = static_cast<int32_t>(mts);
  FW_ASSIGN_OR_RETURN(o.signature, SignatureFromToml(t));
  FW_ASSIGN_OR_RETURN(double watchdog, toml::GetDouble(t, "watchdog_s", 10.0));
  if (!(watchdog >= 0) || watchdog > 1e9) return t.Find("watchdog_s")->Error("watchdog_s must be in [0, 1e9]");
  o.watchdog = absl::Seconds(watchdog);
  auto table = ReplayTable::Create(std::move(o));
  if (!table.ok()) return t.Error(absl::StrCat("table: ", table.status().message()));
  return std::shared_ptr<ReplayTable>(*std::move(table));
}

}  // namespace

Result<ServerOptions> ServerOptionsFromToml(const toml::Value& root) {
  FW_RETURN_IF_ERROR(toml::CheckKeys(root, {"host", "port", "max_message_mb", "checkpoint_dir",
                                            "checkpoint_interval_s", "checkpoint_keep_last", "restore", "seed",
                                            "insert_log", "insert_log_sync", "insert_log_sync_ms", "table"}));
  ServerOptions o;
  FW_ASSIGN_OR_RETURN(std::string host, toml::GetString(root, "host", "127.0.0.1"));
  FW_ASSIGN_OR_RETURN(int64_t port, toml::GetInt(root, "port", 0));
  if (port < 0 || port > 65535) return root.Find("port")->Error("port must be in [0, 65535]");
  o.address = absl::StartsWith(host, "unix:") ? host : absl::StrCat(host, ":", port);
  FW_ASSIGN_OR_RETURN(int64_t mb, toml::GetInt(root, "max_message_mb", 64));
  if (mb < 1 || mb > 2047) return root.Find("max_message_mb")->Error("max_message_mb must be in [1, 2047]");
  o.max_message_bytes = mb << 20;
  FW_ASSIGN_OR_RETURN(o.checkpoint_dir, toml::GetString(root, "checkpoint_dir", ""));
  FW_ASSIGN_OR_RETURN(double interval, toml::GetDouble(root, "checkpoint_interval_s", 0.0));
  if (!(interval >= 0) || interval > 1e9) {
    return root.Find("checkpoint_interval_s")->Error("checkpoint_interval_s must be in [0, 1e9]");
  }
  o.checkpoint_interval = absl::Seconds(interval);
  FW_ASSIGN_OR_RETURN(int64_t keep, toml::GetInt(root, "checkpoint_keep_last", 3));
  if (keep < 0 || keep > 1000000) return root.Find("checkpoint_keep_last")->Error("checkpoint_keep_last must be >= 0");
  o.checkpoint_keep_last = static_cast<int>(keep);
  FW_ASSIGN_OR_RETURN(o.restore, toml::GetBool(root, "restore", true));
  FW_ASSIGN_OR_RETURN(o.insert_log, toml::GetBool(root, "insert_log", false));
  FW_ASSIGN_OR_RETURN(o.insert_log_sync, toml::GetString(root, "insert_log_sync", "none"));
  if (!ParseInsertLogSync(o.insert_log_sync).ok()) {
    return root.Find("insert_log_sync")->Error("insert_log_sync must be none, interval or always");
  }
  FW_ASSIGN_OR_RETURN(int64_t sync_ms, toml::GetInt(root, "insert_log_sync_ms", 100));
  if (sync_ms < 1 || sync_ms > 3600000) {
    return root.Find("insert_log_sync_ms")->Error("insert_log_sync_ms must be in [1, 3600000]");
  }
  o.insert_log_sync_interval = absl::Milliseconds(sync_ms);
  FW_ASSIGN_OR_RETURN(int64_t seed, toml::GetInt(root, "seed", 0));
  o.restore_seed = static_cast<uint64_t>(seed);
  const toml::Value* tables = root.Find("table");
  if (tables == nullptr) return root.Error("no tables: add at least one [[table]] with a name");
  if (!tables->is_array()) return tables->Error("table: expected [[table]] entries");
  for (const toml::Value& t : tables->as_array()) {
    FW_ASSIGN_OR_RETURN(auto table, TableFromToml(t, static_cast<uint64_t>(seed)));
    for (const auto& other : o.tables) {
      if (other->name() == table->name()) {
        return t.Error(absl::StrCat("table name '", table->name(), "' appears twice"));
      }
    }
    o.tables.push_back(std::move(table));
  }
  if (o.checkpoint_interval > absl::ZeroDuration() && o.checkpoint_dir.empty()) {
    return root.Find("checkpoint_interval_s")->Error("checkpoint_interval_s needs checkpoint_dir");
  }
  return o;
}

Result<ServerOptions> LoadServerConfig(const std::string& path) {
  FW_ASSIGN_OR_RETURN(toml::Value root, toml::ParseFile(path));
  return ServerOptionsFromToml(root);
}

std::string_view ExampleServerConfig() { return kExample; }

}  // namespace flywheel::replay

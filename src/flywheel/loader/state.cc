#include "flywheel/loader/state.h"

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flywheel::loader {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kFormatName = "flywheel.loader_state";

Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("loader state: field '", AsAbsl(field), "' ", AsAbsl(what)));
}

std::string TypeName(const Json& j) { return j.type_name(); }

// Every key of `obj` is one of `keys`, and every one of `keys` is present.
Status ExactKeys(const Json& obj, std::string_view where,
                 std::initializer_list<std::string_view> keys) {
  if (!obj.is_object()) {
    return FieldError(where.empty() ? "(top level)" : where,
                      absl::StrCat("must be an object, got ", TypeName(obj)));
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (auto k : keys) known |= it.key() == k;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader state: unknown field '",
                       where.empty() ? "" : absl::StrCat(AsAbsl(where), "."), it.key(), "'"));
    }
  }
  for (auto k : keys) {
    if (!obj.contains(k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader state: missing field '",
                       where.empty() ? "" : absl::StrCat(AsAbsl(where), "."), AsAbsl(k), "'"));
    }
  }
  return absl::OkStatus();
}

std::string Path(std::string_view where, std::string_view key) {
  return where.empty() ? std::string(key) : absl::StrCat(AsAbsl(where), ".", AsAbsl(key));
}

Result<int64_t> GetInt(const Json& j, const std::string& field, int64_t min) {
  int64_t v = 0;
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return FieldError(field, "is too large");
    v = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<int64_t>();
  } else {
    return FieldError(field, absl::StrCat("must be an integer, got ", TypeName(j)));
  }
  if (v < min) return FieldError(field, absl::StrCat("must be >= ", min, ", got ", v));
  return v;
}

Result<uint64_t> GetUint(const Json& j, const std::string& field) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return FieldError(field, absl::StrCat("must be >= 0, got ", v));
    return static_cast<uint64_t>(v);
  }
  return FieldError(field, absl::StrCat("must be an unsigned integer, got ", TypeName(j)));
}

Result<std::string> GetString(const Json& j, const std::string& field) {
  if (!j.is_string()) return FieldError(field, absl::StrCat("must be a string, got ", TypeName(j)));
  return j.get<std::string>();
}

Result<bool> GetBool(const Json& j, const std::string& field) {
  if (!j.is_boolean())
    return FieldError(field, absl::StrCat("must be a boolean, got ", TypeName(j)));
  return j.get<bool>();
}

Result<const Json*> GetArray(const Json& j, const std::string& field) {
  if (!j.is_array()) return FieldError(field, absl::StrCat("must be an array, got ", TypeName(j)));
  return &j;
}

Result<LoaderState> Parse(const Json& j) {
  LoaderState s;
  FW_RETURN_IF_ERROR(ExactKeys(
      j, "", {"format", "version", "seed", "epoch", "consumed", "order", "tables", "mixture"}));
  FW_ASSIGN_OR_RETURN(std::string format, GetString(j["format"], "format"));
  if (format != kFormatName) {
    return FieldError("format",
                      absl::StrCat("is \"", format, "\", expected \"", AsAbsl(kFormatName), "\""));
  }
  FW_ASSIGN_OR_RETURN(int64_t version, GetInt(j["version"], "version", 1));
  if (version != kLoaderStateVersion) {
    return FieldError("version", absl::StrCat("is ", version, "; this build reads version ",
                                              kLoaderStateVersion));
  }
  s.format_version = static_cast<int>(version);
  FW_ASSIGN_OR_RETURN(s.seed, GetUint(j["seed"], "seed"));
  FW_ASSIGN_OR_RETURN(s.epoch, GetInt(j["epoch"], "epoch", 0));
  FW_ASSIGN_OR_RETURN(s.consumed, GetInt(j["consumed"], "consumed", 0));

  const Json& order = j["order"];
  FW_RETURN_IF_ERROR(ExactKeys(order, "order", {"shuffle", "mode", "window_blocks"}));
  FW_ASSIGN_OR_RETURN(s.shuffle, GetBool(order["shuffle"], "order.shuffle"));
  FW_ASSIGN_OR_RETURN(std::string mode, GetString(order["mode"], "order.mode"));
  auto parsed_mode = ParseShuffleMode(mode);
  if (!parsed_mode.ok())
    return FieldError("order.mode", absl::StrCat("is invalid: ", parsed_mode.status().message()));
  s.shuffle_mode = *parsed_mode;
  FW_ASSIGN_OR_RETURN(s.window_blocks, GetInt(order["window_blocks"], "order.window_blocks", 0));

  FW_ASSIGN_OR_RETURN(const Json* tables, GetArray(j["tables"], "tables"));
  for (size_t i = 0; i < tables->size(); ++i) {
    const std::string where = absl::StrCat("tables[", i, "]");
    const Json& t = (*tables)[i];
    FW_RETURN_IF_ERROR(ExactKeys(t, where, {"uri", "version", "rows", "block_rows"}));
    TableState ts;
    FW_ASSIGN_OR_RETURN(ts.uri, GetString(t["uri"], Path(where, "uri")));
    FW_ASSIGN_OR_RETURN(ts.version, GetInt(t["version"], Path(where, "version"), 0));
    FW_ASSIGN_OR_RETURN(ts.rows, GetInt(t["rows"], Path(where, "rows"), 0));
    FW_ASSIGN_OR_RETURN(ts.block_rows, GetInt(t["block_rows"], Path(where, "block_rows"), 0));
    s.tables.push_back(std::move(ts));
  }

  const Json& mix = j["mixture"];
  if (!mix.is_null()) {
    FW_RETURN_IF_ERROR(ExactKeys(mix, "mixture", {"weights", "drawn"}));
    MixtureState m;
    FW_ASSIGN_OR_RETURN(const Json* weights, GetArray(mix["weights"], "mixture.weights"));
    for (size_t i = 0; i < weights->size(); ++i) {
      const Json& w = (*weights)[i];
      const std::string field = absl::StrCat("mixture.weights[", i, "]");
      if (!w.is_number())
        return FieldError(field, absl::StrCat("must be a number, got ", TypeName(w)));
      m.weights.push_back(w.get<double>());
    }
    FW_ASSIGN_OR_RETURN(const Json* drawn, GetArray(mix["drawn"], "mixture.drawn"));
    for (size_t i = 0; i < drawn->size(); ++i) {
      FW_ASSIGN_OR_RETURN(int64_t d,
                          GetInt((*drawn)[i], absl::StrCat("mixture.drawn[", i, "]"), 0));
      m.drawn.push_back(d);
    }
    s.mixture = std::move(m);
  }
  FW_RETURN_IF_ERROR(s.Validate());
  return s;
}

}  // namespace

Status LoaderState::Validate() const {
  if (format_version != kLoaderStateVersion) {
    return FieldError("version", absl::StrCat("is ", format_version, "; this build reads version ",
                                              kLoaderStateVersion));
  }
  if (epoch < 0) return FieldError("epoch", absl::StrCat("must be >= 0, got ", epoch));
  if (consumed < 0) return FieldError("consumed", absl::StrCat("must be >= 0, got ", consumed));
  if (tables.empty()) return FieldError("tables", "must name at least one table");
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto& t = tables[i];
    const std::string where = absl::StrCat("tables[", i, "]");
    if (t.version < 0) return FieldError(Path(where, "version"), "must be >= 0");
    if (t.rows < 0) return FieldError(Path(where, "rows"), "must be >= 0");
    if (t.block_rows < 0) return FieldError(Path(where, "block_rows"), "must be >= 0");
    const bool block = shuffle && shuffle_mode == ShuffleMode::kBlock;
    if (block && t.block_rows < 1)
      return FieldError(Path(where, "block_rows"), "must be >= 1 in block shuffle mode");
  }
  if (shuffle && shuffle_mode == ShuffleMode::kBlock && window_blocks < 1) {
    return FieldError("order.window_blocks", "must be >= 1 in block shuffle mode");
  }
  if (window_blocks < 0) return FieldError("order.window_blocks", "must be >= 0");
  if (tables.size() == 1) {
    if (mixture) return FieldError("mixture", "must be null for a single table");
    if (consumed > tables[0].rows) {
      return FieldError("consumed", absl::StrCat("is ", consumed, ", beyond the epoch of ",
                                                 tables[0].rows, " rows"));
    }
  } else {
    if (!mixture)
      return FieldError("mixture",
                        absl::StrCat("is null but ", tables.size(), " tables are listed"));
    if (mixture->weights.size() != tables.size()) {
      return FieldError("mixture.weights", absl::StrCat("has ", mixture->weights.size(),
                                                        " entries for ", tables.size(), " tables"));
    }
    if (mixture->drawn.size() != tables.size()) {
      return FieldError("mixture.drawn", absl::StrCat("has ", mixture->drawn.size(),
                                                      " entries for ", tables.size(), " tables"));
    }
    for (size_t i = 0; i < tables.size(); ++i) {
      const double w = mixture->weights[i];
      if (!std::isfinite(w) || w <= 0) {
        return FieldError(absl::StrCat("mixture.weights[", i, "]"),
                          absl::StrCat("must be finite and > 0, got ", w));
      }
      if (mixture->drawn[i] < 0)
        return FieldError(absl::StrCat("mixture.drawn[", i, "]"), "must be >= 0");
      if (tables[i].rows == 0) {
        return FieldError(absl::StrCat("tables[", i, "].rows"), "must be > 0 in a mixture");
      }
    }
  }
  return absl::OkStatus();
}

std::string LoaderState::ToJson() const {
  OrderedJson j;
  j["format"] = kFormatName;
  j["version"] = format_version;
  j["seed"] = seed;
  j["epoch"] = epoch;
  j["consumed"] = consumed;
  OrderedJson order;
  order["shuffle"] = shuffle;
  order["mode"] = ShuffleModeName(shuffle_mode);
  order["window_blocks"] = window_blocks;
  j["order"] = std::move(order);
  OrderedJson ts = OrderedJson::array();
  for (const auto& t : tables) {
    OrderedJson o;
    o["uri"] = t.uri;
    o["version"] = t.version;
    o["rows"] = t.rows;
    o["block_rows"] = t.block_rows;
    ts.push_back(std::move(o));
  }
  j["tables"] = std::move(ts);
  if (mixture) {
    OrderedJson m;
    m["weights"] = mixture->weights;
    m["drawn"] = mixture->drawn;
    j["mixture"] = std::move(m);
  } else {
    j["mixture"] = nullptr;
  }
  // A uri that is not UTF-8 is written with replacement characters; it then
  // fails CheckResumable against its table rather than throwing here.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<LoaderState> LoaderState::FromJson(std::string_view json) {
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("loader state: not valid JSON");
  return Parse(j);
}

Status CheckResumable(const LoaderState& saved, const LoaderState& current) {
  auto differs = [](std::string_view field, const auto& a, const auto& b) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader state: field '", AsAbsl(field), "' is ", a, " but this loader's is ",
                     b, " (the state belongs to another loader configuration)"));
  };
  if (saved.seed != current.seed) return differs("seed", saved.seed, current.seed);
  if (saved.shuffle != current.shuffle) {
    return differs("order.shuffle", saved.shuffle ? "true" : "false",
                   current.shuffle ? "true" : "false");
  }
  if (saved.shuffle) {
    if (saved.shuffle_mode != current.shuffle_mode) {
      return differs("order.mode", std::string(ShuffleModeName(saved.shuffle_mode)),
                     std::string(ShuffleModeName(current.shuffle_mode)));
    }
    if (saved.window_blocks != current.window_blocks) {
      return differs("order.window_blocks", saved.window_blocks, current.window_blocks);
    }
  }
  if (saved.tables.size() != current.tables.size()) {
    return differs("tables", absl::StrCat(saved.tables.size(), " tables"),
                   absl::StrCat(current.tables.size(), " tables"));
  }
  for (size_t i = 0; i < saved.tables.size(); ++i) {
    const auto& a = saved.tables[i];
    const auto& b = current.tables[i];
    const std::string where = absl::StrCat("tables[", i, "]");
    if (a.uri != b.uri)
      return differs(Path(where, "uri"), absl::StrCat("\"", a.uri, "\""),
                     absl::StrCat("\"", b.uri, "\""));
    if (a.version != b.version) return differs(Path(where, "version"), a.version, b.version);
    if (a.rows != b.rows) return differs(Path(where, "rows"), a.rows, b.rows);
    if (a.block_rows != b.block_rows)
      return differs(Path(where, "block_rows"), a.block_rows, b.block_rows);
  }
  if (saved.mixture.has_value() != current.mixture.has_value()) {
    return differs("mixture", saved.mixture ? "set" : "null", current.mixture ? "set" : "null");
  }
  if (saved.mixture && saved.mixture->weights != current.mixture->weights) {
    return differs("mixture.weights", absl::StrJoin(saved.mixture->weights, ","),
                   absl::StrJoin(current.mixture->weights, ","));
  }
  return absl::OkStatus();
}

}  // namespace flywheel::loader

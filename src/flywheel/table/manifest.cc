// Implements docs/format/table.md, "Manifest files".
#include "flywheel/table/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/base/checksum.h"

namespace flywheel::table {
namespace {

using nlohmann::json;
constexpr std::string_view kMagic = "flywheel-manifest";

// Reads an integer of type T, throwing json errors (caught by Decode) for
// non-integers and out-of-range values; nlohmann's own get<T>() on a float
// out of T's range is undefined behaviour (found by table_fuzz).
template <typename T>
T Int(const json& j) {
  if (!j.is_number_integer()) throw json::type_error::create(302, "expected an integer", &j);
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      throw json::out_of_range::create(406, "integer out of range", &j);
    }
    return static_cast<T>(u);
  }
  const int64_t v = j.get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    throw json::out_of_range::create(406, "integer out of range", &j);
  }
  return static_cast<T>(v);
}

json FieldToJson(const format::Field& f) {
  json j = {{"id", f.id}, {"name", f.name}, {"type", f.type.ToString()}, {"nullable", f.nullable}};
  if (!f.default_json.empty()) j["default"] = json::parse(f.default_json);
  return j;
}

json SchemaJson(const format::Schema& s) {
  json fields = json::array();
  for (const auto& f : s.fields) fields.push_back(FieldToJson(f));
  return json{{"fields", fields}};
}

Result<format::Schema> SchemaFrom(const json& j) {
  format::Schema s;
  if (!j.is_object() || !j.contains("fields") || !j["fields"].is_array()) {
    return absl::InvalidArgumentError("schema must be an object with a 'fields' array");
  }
  for (const auto& jf : j["fields"]) {
    format::Field f;
    f.name = jf.at("name").get<std::string>();
    FW_ASSIGN_OR_RETURN_CTX(f.type, format::DataType::Parse(jf.at("type").get<std::string>()),
                            "field '", f.name, "'");
    f.nullable = jf.contains("nullable") ? jf["nullable"].get<bool>() : false;
    f.id = jf.contains("id") ? Int<int32_t>(jf["id"]) : -1;
    if (jf.contains("default") && !jf["default"].is_null()) f.default_json = jf["default"].dump();
    s.fields.push_back(std::move(f));
  }
  FW_RETURN_IF_ERROR(s.Validate());
  return s;
}

}  // namespace

int64_t Manifest::num_rows() const {
  int64_t n = 0;
  for (const auto& f : fragments) n += f.live_rows();
  return n;
}

std::string Manifest::Encode() const {
  json frags = json::array();
  for (const auto& f : fragments) {
    json files = json::array();
    for (const auto& df : f.files) {
      files.push_back({{"path", df.path}, {"field_ids", df.field_ids}, {"size", df.size_bytes}});
    }
    json jf = {{"id", f.id}, {"num_rows", f.num_rows}, {"files", files}};
    if (!f.deletion.path.empty()) {
      jf["deletion"] = {{"path", f.deletion.path}, {"count", f.deletion.count}};
    }
    frags.push_back(std::move(jf));
  }
  json j = {
      {"format", "flywheel-table"},
      {"format_version", kTableFormatVersion},
      {"version", version},
      {"timestamp_ms", timestamp_ms},
      {"operation",
       {{"type", operation.type},
        {"writer", operation.writer},
        {"properties", operation.properties},
        {"details", operation.details}}},
      {"schema", SchemaJson(schema)},
      {"next_field_id", next_field_id},
      {"next_fragment_id", next_fragment_id},
      {"fragments", frags},
      {"config", config},
  };
  // Inputs are validated as UTF-8 where they enter (schema, properties);
  // `replace` only keeps a missed case from throwing.
  const std::string body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  char header[96];
  std::snprintf(header, sizeof header, "%s %d %016" PRIx64 " %zu\n", kMagic.data(),
                kTableFormatVersion, Checksum64(body), body.size());
  return std::string(header) + body;
}

Result<Manifest> Manifest::Decode(std::string_view data, std::string_view what) {
  auto fail = [&](auto&&... msg) {
    return absl::DataLossError(absl::StrCat("manifest ", AsAbsl(what), ": ", msg...));
  };
  const size_t nl = data.find('\n');
  if (nl == std::string_view::npos || nl > 90) return fail("missing header line");
  const std::string header(data.substr(0, nl));
  char magic[32] = {0};
  int fmt = 0;
  uint64_t checksum = 0;
  size_t len = 0;
  if (std::sscanf(header.c_str(), "%31s %d %" SCNx64 " %zu", magic, &fmt, &checksum, &len) != 4 ||
      kMagic != magic) {
    return fail("bad header line");
  }
  if (fmt > kTableFormatVersion || fmt < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("manifest ", AsAbsl(what), ": table format version ", fmt,
                     " is not supported by this flywheel (knows 1..", kTableFormatVersion, ")"));
  }
  const std::string_view body = data.substr(nl + 1);
  if (body.size() != len) return fail("body is ", body.size(), " bytes, header says ", len);
  if (Checksum64(body) != checksum) return fail("checksum mismatch");
  Manifest m;
  try {
    const json j = json::parse(body);
    m.version = Int<int64_t>(j.at("version"));
    m.timestamp_ms = Int<int64_t>(j.at("timestamp_ms"));
    const json& op = j.at("operation");
    m.operation.type = op.at("type").get<std::string>();
    m.operation.writer = op.value("writer", "");
    m.operation.properties = op.value("properties", std::map<std::string, std::string>{});
    m.operation.details = op.value("details", std::map<std::string, std::string>{});
    FW_ASSIGN_OR_RETURN_CTX(m.schema, SchemaFrom(j.at("schema")), "manifest ", AsAbsl(what));
    m.next_field_id = Int<int32_t>(j.at("next_field_id"));
    m.next_fragment_id = Int<int64_t>(j.at("next_fragment_id"));
    m.config = j.value("config", std::map<std::string, std::string>{});
    for (const auto& jf : j.at("fragments")) {
      Fragment f;
      f.id = Int<int64_t>(jf.at("id"));
      f.num_rows = Int<int64_t>(jf.at("num_rows"));
      for (const auto& jd : jf.at("files")) {
        DataFile df;
        df.path = jd.at("path").get<std::string>();
        for (const auto& id : jd.at("field_ids")) df.field_ids.push_back(Int<int32_t>(id));
        df.size_bytes = jd.contains("size") ? Int<uint64_t>(jd["size"]) : 0;
        f.files.push_back(std::move(df));
      }
      if (jf.contains("deletion")) {
        f.deletion.path = jf["deletion"].at("path").get<std::string>();
        f.deletion.count = Int<int64_t>(jf["deletion"].at("count"));
      }
      if (f.num_rows < 0 || f.deletion.count < 0 || f.deletion.count > f.num_rows) {
        return fail("fragment ", f.id, " has inconsistent row counts");
      }
      if (f.deletion.path.empty() != (f.deletion.count == 0)) {
        return fail("fragment ", f.id, " has a deletion entry with ",
                    f.deletion.path.empty() ? "a count but no file" : "a file but no rows");
      }
      m.fragments.push_back(std::move(f));
    }
  } catch (const json::exception& e) {
    return fail("invalid JSON: ", e.what());
  }
  return m;
}

std::string SchemaToJson(const format::Schema& schema) {
  return SchemaJson(schema).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<format::Schema> SchemaFromJson(std::string_view text) {
  try {
    return SchemaFrom(json::parse(text));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("schema JSON: ", e.what()));
  }
}

}  // namespace flywheel::table

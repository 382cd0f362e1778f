#include "flywheel/interop/export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/interop/parquet/convert.h"

namespace flywheel::interop {
namespace {

// Whether a column stored as `have` can be written as logical type `want`:
// dates and times from int32, times and timestamps from int64, decimals from
// float64 (the tag may be stale after a schema change; then it is ignored).
bool Restorable(const parquet::ValueType& want, parquet::ValueKind have) {
  using parquet::ValueKind;
  switch (want.kind) {
    case ValueKind::kDate32:
    case ValueKind::kTime32: return have == ValueKind::kInt32;
    case ValueKind::kTime64:
    case ValueKind::kTimestamp: return have == ValueKind::kInt64;
    case ValueKind::kDecimal: return have == ValueKind::kFloat64;
    default: return false;
  }
}

// Turns a column's array into logical type `want` (REQUIRES: Restorable):
// dates, times and timestamps keep their bytes; decimals (float64 in the
// table) become their unscaled integers again.
Status ToLogical(const parquet::ValueType& want, const std::string& name, parquet::Array* a) {
  if (want.kind == parquet::ValueKind::kDecimal) {
    const int w = want.width;
    std::vector<uint8_t> out(static_cast<size_t>(a->length) * w, 0);
    const double scale = std::pow(10.0, want.scale);
    for (int64_t i = 0; i < a->length; ++i) {
      if (!a->IsValid(i)) continue;
      double v;
      std::memcpy(&v, a->values.data() + i * 8, 8);
      const double u = std::nearbyint(v * scale);
      if (!std::isfinite(u) || std::fabs(u) >= 9.2e18) {
        return absl::InvalidArgumentError(absl::StrCat("column ", name, " row ", i, ": ", v, " does not fit DECIMAL(",
                                                       want.precision, ",", want.scale, ")"));
      }
      const int64_t unscaled = static_cast<int64_t>(u);
      if (w == 4) {
        const int32_t x = static_cast<int32_t>(unscaled);
        std::memcpy(out.data() + i * 4, &x, 4);
      } else {
        std::memcpy(out.data() + i * w, &unscaled, 8);
        if (w == 16) std::memset(out.data() + i * w + 8, unscaled < 0 ? 0xff : 0, 8);
      }
    }
    a->values = std::move(out);
  }
  a->type = want;
  return absl::OkStatus();
}

}  // namespace

Result<int64_t> ExportParquet(const table::Table& table, const std::string& path, const ExportOptions& options) {
  if (options.row_group_rows < 1) return absl::InvalidArgumentError("export: row_group_rows must be >= 1");
  std::map<std::string, parquet::ValueType> logical;
  if (auto it = table.manifest().config.find("logical_types"); it != table.manifest().config.end()) {
    nlohmann::json tags = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (tags.is_object()) {
      for (const auto& [col, tag] : tags.items()) {
        if (!tag.is_string()) continue;
        auto t = parquet::ParseLogicalTypeTag(tag.get<std::string>());
        if (t.ok()) logical[col] = *t;
      }
    }
  }
  format::Schema schema;
  if (options.columns.empty()) {
    schema = table.schema();
  } else {
    for (const std::string& c : options.columns) {
      const int i = table.schema().FieldIndex(c);
      if (i < 0) {
        return absl::NotFoundError(absl::StrCat("table ", table.uri(), " has no column '", c, "' (columns: ",
                                                table.schema().ToString(), ")"));
      }
      schema.fields.push_back(table.schema().fields[i]);
    }
  }
  FW_ASSIGN_OR_RETURN(std::vector<parquet::Field> fields, parquet::FieldsFromTable(schema));
  // Per column, the logical type it is written as (none: its storage type).
  std::vector<std::optional<parquet::ValueType>> restore(fields.size());
  for (size_t c = 0; c < fields.size(); ++c) {
    auto it = logical.find(fields[c].name);
    if (it != logical.end() && Restorable(it->second, fields[c].type.kind)) {
      restore[c] = it->second;
      fields[c].type = it->second;
    }
  }
  parquet::ParquetWriterOptions wo = options.writer;
  wo.key_value_metadata["flywheel.table"] = table.uri();
  wo.key_value_metadata["flywheel.version"] = std::to_string(table.version());
  FW_ASSIGN_OR_RETURN(auto writer, parquet::ParquetWriter::Open(path, fields, wo));
  auto fail = [&](Status s) {
    writer.reset();
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return s;
  };
  std::vector<std::string> names;
  for (const auto& f : schema.fields) names.push_back(f.name);
  auto it = table.Scan(table::ScanOptions{names, options.row_group_rows});
  if (!it.ok()) return fail(it.status());
  int64_t rows = 0;
  while (true) {
    auto b = (*it)->Next();
    if (!b.ok()) return fail(b.status());
    if (!b->has_value()) break;
    auto arrays = parquet::ArraysFromTable(**b);
    if (!arrays.ok()) return fail(arrays.status());
    for (size_t c = 0; c < arrays->size(); ++c) {
      if (!restore[c]) continue;
      Status s = ToLogical(*restore[c], fields[c].name, &(*arrays)[c]);
      if (!s.ok()) return fail(s);
    }
    Status s = writer->WriteRowGroup(*arrays);
    if (!s.ok()) return fail(s);
    rows += (**b).num_rows;
    if (options.progress) options.progress(rows);
  }
  Status s = writer->Close();
  if (!s.ok()) return fail(s);
  return rows;
}

}  // namespace flywheel::interop

#include "flywheel/interop/export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/interop/parquet/convert.h"

namespace flywheel::interop {
namespace {

// Restores a logical type on a column written with its storage type: dates,
// times and timestamps keep their bytes; decimals are float64 in the table
// and become their unscaled integers again.
Status Restore(const parquet::ValueType& want, parquet::Field* f, parquet::Array* a) {
  using parquet::ValueKind;
  const ValueKind have = f->type.kind;
  const bool int32_like = have == ValueKind::kInt32;
  const bool int64_like = have == ValueKind::kInt64;
  switch (want.kind) {
    case ValueKind::kDate32:
    case ValueKind::kTime32:
      if (!int32_like) return absl::OkStatus();
      break;
    case ValueKind::kTime64:
    case ValueKind::kTimestamp:
      if (!int64_like) return absl::OkStatus();
      break;
    case ValueKind::kDecimal: {
      if (have != ValueKind::kFloat64) return absl::OkStatus();
      const int w = want.width;
      std::vector<uint8_t> out(static_cast<size_t>(a->length) * w, 0);
      const double scale = std::pow(10.0, want.scale);
      for (int64_t i = 0; i < a->length; ++i) {
        if (!a->IsValid(i)) continue;
        double v;
        std::memcpy(&v, a->values.data() + i * 8, 8);
        const double u = std::nearbyint(v * scale);
        if (!std::isfinite(u) || std::fabs(u) >= 9.2e18) {
          return absl::InvalidArgumentError(
              absl::StrCat("column ", f->name, " row ", i, ": ", v, " does not fit DECIMAL(", want.precision, ",",
                           want.scale, ")"));
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
      break;
    }
    default:
      return absl::OkStatus();
  }
  f->type = want;
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
  for (auto& f : fields) {
    if (auto it = logical.find(f.name); it != logical.end() && f.type.kind != parquet::ValueKind::kList) {
      parquet::Array none;
      none.type = f.type;
      FW_RETURN_IF_ERROR(Restore(it->second, &f, &none));  // decides the field type only
    }
  }
  parquet::WriterOptions wo = options.writer;
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
      auto lt = logical.find(schema.fields[c].name);
      if (lt == logical.end() || (*arrays)[c].type.kind == parquet::ValueKind::kList) continue;
      parquet::Field f = fields[c];
      f.type = (*arrays)[c].type;  // the storage type, restored below
      Status s = Restore(lt->second, &f, &(*arrays)[c]);
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

#include "flywheel/cli/json_rows.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/format/internal/json_column.h"
#include "flywheel/format/json_column.h"

namespace flywheel::cli {

using format::Column;
using nlohmann::json;

Result<format::RecordBatch> ReadJsonLines(std::istream& in, const std::string& source,
                                          const format::Schema& schema) {
  const size_t nf = schema.fields.size();
  std::vector<format::JsonColumnBuilder> builders;
  builders.reserve(nf);
  for (const format::Field& f : schema.fields) builders.emplace_back(f);
  std::string line;
  int64_t lineno = 0, rows = 0;
  while (std::getline(in, line)) {
    lineno++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", lineno, ": invalid JSON: ", e.what()));
    }
    if (!obj.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", lineno, ": expected a JSON object"));
    }
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (schema.FieldIndex(it.key()) < 0) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", lineno, ": field '", it.key(),
                                                       "' is not in the schema (", schema.ToString(), ")"));
      }
    }
    for (size_t f = 0; f < nf; ++f) {
      const format::Field& field = schema.fields[f];
      const auto it = obj.find(field.name);
      const json* v = it == obj.end() ? nullptr : &*it;
      if ((v == nullptr || v->is_null()) && !field.nullable) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", lineno, ": field '", field.name, "' is missing and not nullable"));
      }
      FW_RETURN_IF_ERROR_CTX(internal_format::AppendJson(builders[f], v), source, ":", lineno, ": field '",
                             field.name, "'");
    }
    rows++;
  }
  format::RecordBatch batch;
  batch.schema = schema;
  batch.num_rows = rows;
  for (auto& b : builders) batch.columns.push_back(b.Finish());
  return batch;
}

std::string RowToJson(const format::RecordBatch& batch, int64_t row) {
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  for (size_t f = 0; f < batch.columns.size(); ++f) {
    obj[batch.schema.fields[f].name] = internal_format::ValueJson(batch.columns[f], row);
  }
  return obj.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string CellToText(const Column& c, int64_t row, size_t max_width) {
  const auto j = internal_format::ValueJson(c, row);
  std::string s = j.is_string() ? j.template get<std::string>() : j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > max_width) s = s.substr(0, max_width - 3) + "...";
  return s;
}

}  // namespace flywheel::cli

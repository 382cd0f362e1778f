// The nlohmann::json side of json_column.h, for readers that have parsed a
// document already (the CLI's JSON lines, JSONL ingest): no text round trip.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/json_column.h"

namespace flywheel::internal_format {

using format::Buffer;
using format::Column;
using format::DataType;
using format::Field;
using format::JsonColumnBuilder;

// Appends `v` (nullptr: absent, read as null) as one row; errors name the
// path inside the value, prefixed by `where`.
Status AppendJson(JsonColumnBuilder& b, const nlohmann::json* v, const std::string& where = "");
Status AppendJson(JsonColumnBuilder& b, const nlohmann::ordered_json* v, const std::string& where = "");
// Merges `v` into the inferrer; errors name the path inside the value.
Status AddJson(format::JsonTypeInferrer& inf, const nlohmann::ordered_json& v);
// Row `row` of `c` as a JSON value; struct keys in field order.
nlohmann::ordered_json ValueJson(const Column& c, int64_t row);

}  // namespace flywheel::internal_format

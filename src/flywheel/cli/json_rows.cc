#include "flywheel/cli/json_rows.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"

namespace flywheel::cli {

using format::Column;
using format::TypeId;
using nlohmann::json;

namespace {

// Appends one scalar element of type `id` from JSON `v` to `out`.
Status PutScalar(TypeId id, const json& v, std::string* out) {
  auto put = [&](auto x) { out->append(reinterpret_cast<const char*>(&x), sizeof x); };
  if (id == TypeId::kBool) {
    if (!v.is_boolean() && !v.is_number()) return absl::InvalidArgumentError("expected a boolean");
    put(static_cast<uint8_t>(v.is_boolean() ? v.get<bool>() : v.get<double>() != 0));
    return absl::OkStatus();
  }
  if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat("expected a number, got ", v.dump()));
  const bool integral = v.is_number_integer();
  auto int_in = [&](int64_t lo, uint64_t hi) -> Status {
    if (!integral) return absl::InvalidArgumentError(absl::StrCat("expected an integer, got ", v.dump()));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > hi : (v.get<int64_t>() < lo || (v.get<int64_t>() >= 0 && static_cast<uint64_t>(v.get<int64_t>()) > hi))) {
      return absl::InvalidArgumentError(absl::StrCat(v.dump(), " is out of range for ", AsAbsl(format::TypeIdName(id))));
    }
    return absl::OkStatus();
  };
  switch (id) {
    case TypeId::kInt8: FW_RETURN_IF_ERROR(int_in(INT8_MIN, INT8_MAX)); put(static_cast<int8_t>(v.get<int64_t>())); break;
    case TypeId::kInt16: FW_RETURN_IF_ERROR(int_in(INT16_MIN, INT16_MAX)); put(static_cast<int16_t>(v.get<int64_t>())); break;
    case TypeId::kInt32: FW_RETURN_IF_ERROR(int_in(INT32_MIN, INT32_MAX)); put(static_cast<int32_t>(v.get<int64_t>())); break;
    case TypeId::kInt64: FW_RETURN_IF_ERROR(int_in(INT64_MIN, INT64_MAX)); put(v.get<int64_t>()); break;
    case TypeId::kUInt8: FW_RETURN_IF_ERROR(int_in(0, UINT8_MAX)); put(static_cast<uint8_t>(v.get<uint64_t>())); break;
    case TypeId::kUInt16: FW_RETURN_IF_ERROR(int_in(0, UINT16_MAX)); put(static_cast<uint16_t>(v.get<uint64_t>())); break;
    case TypeId::kUInt32: FW_RETURN_IF_ERROR(int_in(0, UINT32_MAX)); put(static_cast<uint32_t>(v.get<uint64_t>())); break;
    case TypeId::kUInt64: FW_RETURN_IF_ERROR(int_in(0, UINT64_MAX)); put(v.get<uint64_t>()); break;
    case TypeId::kFloat32: put(v.get<float>()); break;
    case TypeId::kFloat64: put(v.get<double>()); break;
    case TypeId::kFloat16: {
      // Round-to-nearest conversion of a float to IEEE half.
      const float f = v.get<float>();
      uint32_t x;
      std::memcpy(&x, &f, 4);
      const uint32_t sign = (x >> 16) & 0x8000;
      int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
      uint32_t mant = x & 0x7fffff;
      uint16_t h;
      if (((x >> 23) & 0xff) == 0xff) h = static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
      else if (exp >= 31) h = static_cast<uint16_t>(sign | 0x7c00);
      else if (exp <= 0) {
        if (exp < -10) h = static_cast<uint16_t>(sign);
        else {
          mant |= 0x800000;
          const uint32_t shift = static_cast<uint32_t>(14 - exp);
          uint32_t hm = mant >> shift;
          if ((mant >> (shift - 1)) & 1) hm++;
          h = static_cast<uint16_t>(sign | hm);
        }
      } else {
        uint32_t hv = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
        if (mant & 0x1000) hv++;
        h = static_cast<uint16_t>(hv);
      }
      put(h);
      break;
    }
    default: return absl::InvalidArgumentError("not a scalar type");
  }
  return absl::OkStatus();
}

// Flattens a (nested) JSON array of exactly `n` scalars.
Status PutTensor(TypeId id, const json& v, int64_t n, std::string* out) {
  int64_t count = 0;
  std::function<Status(const json&)> walk = [&](const json& x) -> Status {
    if (x.is_array()) {
      for (const auto& e : x) FW_RETURN_IF_ERROR(walk(e));
      return absl::OkStatus();
    }
    count++;
    return PutScalar(id, x, out);
  };
  FW_RETURN_IF_ERROR(walk(v));
  if (count != n) return absl::InvalidArgumentError(absl::StrCat("expected ", n, " elements, got ", count));
  return absl::OkStatus();
}

}  // namespace

Result<format::RecordBatch> ReadJsonLines(std::istream& in, const std::string& source,
                                          const format::Schema& schema) {
  const size_t nf = schema.fields.size();
  std::vector<std::string> values(nf);
  std::vector<std::vector<int64_t>> offsets(nf, std::vector<int64_t>{0});
  std::vector<std::vector<bool>> valid(nf);
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
      const bool is_null = it == obj.end() || it->is_null();
      auto where = [&] { return absl::StrCat(source, ":", lineno, ": field '", field.name, "'"); };
      if (is_null && !field.nullable) {
        return absl::InvalidArgumentError(absl::StrCat(where(), " is missing and not nullable"));
      }
      valid[f].push_back(!is_null);
      const format::DataType& t = field.type;
      if (t.is_fixed_width()) {
        if (is_null) {
          values[f].append(t.fixed_width(), '\0');
          continue;
        }
        Status s = t.shape.empty() ? PutScalar(t.id, *it, &values[f]) : PutTensor(t.id, *it, t.num_elements(), &values[f]);
        FW_RETURN_IF_ERROR_CTX(s, where());
      } else if (t.id == TypeId::kList) {
        if (!is_null) {
          if (!it->is_array()) return absl::InvalidArgumentError(absl::StrCat(where(), ": expected an array"));
          for (const auto& e : *it) FW_RETURN_IF_ERROR_CTX(PutScalar(t.elem, e, &values[f]), where());
        }
        offsets[f].push_back(static_cast<int64_t>(values[f].size() / format::ScalarSize(t.elem)));
      } else {
        if (!is_null) {
          if (!it->is_string()) return absl::InvalidArgumentError(absl::StrCat(where(), ": expected a string"));
          values[f] += it->get<std::string>();
        }
        offsets[f].push_back(static_cast<int64_t>(values[f].size()));
      }
    }
    rows++;
  }
  format::RecordBatch batch;
  batch.schema = schema;
  batch.num_rows = rows;
  for (size_t f = 0; f < nf; ++f) {
    Column c;
    c.type = schema.fields[f].type;
    c.length = rows;
    c.values = format::Buffer::FromString(std::move(values[f]));
    if (c.type.is_variable_length()) c.offsets = format::Buffer::FromVector(std::move(offsets[f]));
    format::SetValidity(c, valid[f]);
    batch.columns.push_back(std::move(c));
  }
  return batch;
}

namespace {

json ScalarJson(TypeId id, const uint8_t* p) {
  auto get = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
  switch (id) {
    case TypeId::kBool: return get(uint8_t{}) != 0;
    case TypeId::kInt8: return get(int8_t{});
    case TypeId::kInt16: return get(int16_t{});
    case TypeId::kInt32: return get(int32_t{});
    case TypeId::kInt64: return get(int64_t{});
    case TypeId::kUInt8: return get(uint8_t{});
    case TypeId::kUInt16: return get(uint16_t{});
    case TypeId::kUInt32: return get(uint32_t{});
    case TypeId::kUInt64: return get(uint64_t{});
    case TypeId::kFloat16: return HalfToDouble(get(uint16_t{}));
    case TypeId::kFloat32: {
      // Shortest decimal that reads back as the same float, so 0.1f prints as 0.1.
      const float f = get(float{});
      if (!std::isfinite(f)) return static_cast<double>(f);
      char buf[32];
      for (int prec = 6; prec <= 9; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(f));
        if (std::strtof(buf, nullptr) == f) break;
      }
      return std::strtod(buf, nullptr);
    }
    case TypeId::kFloat64: return get(double{});
    default: return nullptr;
  }
}

json CellJson(const Column& c, int64_t row) {
  if (!c.IsValid(row)) return nullptr;
  const format::DataType& t = c.type;
  if (t.is_fixed_width()) {
    const size_t es = format::ScalarSize(t.id);
    const uint8_t* p = c.FixedRow(row);
    if (t.shape.empty()) return ScalarJson(t.id, p);
    json arr = json::array();
    for (int64_t i = 0; i < t.num_elements(); ++i) arr.push_back(ScalarJson(t.id, p + i * es));
    return arr;
  }
  if (t.id == TypeId::kList) {
    const size_t es = format::ScalarSize(t.elem);
    const int64_t* o = c.offsets_data();
    json arr = json::array();
    for (int64_t i = o[row]; i < o[row + 1]; ++i) arr.push_back(ScalarJson(t.elem, c.values.data + i * es));
    return arr;
  }
  const auto bytes = c.GetBytes(row);
  if (t.id == TypeId::kString) return std::string(bytes);
  // Binary: hex, which always round-trips as text.
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char ch : bytes) {
    hex += kHex[ch >> 4];
    hex += kHex[ch & 15];
  }
  return json{{"hex", hex}};
}

}  // namespace

std::string RowToJson(const format::RecordBatch& batch, int64_t row) {
  json obj = json::object();
  for (size_t f = 0; f < batch.columns.size(); ++f) {
    obj[batch.schema.fields[f].name] = CellJson(batch.columns[f], row);
  }
  return obj.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string CellToText(const Column& c, int64_t row, size_t max_width) {
  const json j = CellJson(c, row);
  std::string s = j.is_string() ? j.get<std::string>() : j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > max_width) s = s.substr(0, max_width - 3) + "...";
  return s;
}

}  // namespace flywheel::cli

// Implements json_column.h (docs/format/types.md, "JSON").
#include "flywheel/format/json_column.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"
#include "flywheel/format/internal/json_column.h"

namespace flywheel::format {

using nlohmann::json;

namespace {

// Appends one scalar element of type `id` from JSON `v` to `out`.
template <typename J>
Status PutScalar(TypeId id, const J& v, std::string* out) {
  auto put = [&](auto x) { out->append(reinterpret_cast<const char*>(&x), sizeof x); };
  if (id == TypeId::kBool) {
    if (!v.is_boolean() && !v.is_number()) return absl::InvalidArgumentError("expected a boolean");
    put(static_cast<uint8_t>(v.is_boolean() ? v.template get<bool>() : v.template get<double>() != 0));
    return absl::OkStatus();
  }
  if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat("expected a number, got ", v.dump()));
  const bool integral = v.is_number_integer();
  auto int_in = [&](int64_t lo, uint64_t hi) -> Status {
    if (!integral) return absl::InvalidArgumentError(absl::StrCat("expected an integer, got ", v.dump()));
    if (v.is_number_unsigned() ? v.template get<uint64_t>() > hi : (v.template get<int64_t>() < lo || (v.template get<int64_t>() >= 0 && static_cast<uint64_t>(v.template get<int64_t>()) > hi))) {
      return absl::InvalidArgumentError(absl::StrCat(v.dump(), " is out of range for ", AsAbsl(TypeIdName(id))));
    }
    return absl::OkStatus();
  };
  switch (id) {
    case TypeId::kInt8: FW_RETURN_IF_ERROR(int_in(INT8_MIN, INT8_MAX)); put(static_cast<int8_t>(v.template get<int64_t>())); break;
    case TypeId::kInt16: FW_RETURN_IF_ERROR(int_in(INT16_MIN, INT16_MAX)); put(static_cast<int16_t>(v.template get<int64_t>())); break;
    case TypeId::kInt32: FW_RETURN_IF_ERROR(int_in(INT32_MIN, INT32_MAX)); put(static_cast<int32_t>(v.template get<int64_t>())); break;
    case TypeId::kInt64: FW_RETURN_IF_ERROR(int_in(INT64_MIN, INT64_MAX)); put(v.template get<int64_t>()); break;
    case TypeId::kUInt8: FW_RETURN_IF_ERROR(int_in(0, UINT8_MAX)); put(static_cast<uint8_t>(v.template get<uint64_t>())); break;
    case TypeId::kUInt16: FW_RETURN_IF_ERROR(int_in(0, UINT16_MAX)); put(static_cast<uint16_t>(v.template get<uint64_t>())); break;
    case TypeId::kUInt32: FW_RETURN_IF_ERROR(int_in(0, UINT32_MAX)); put(static_cast<uint32_t>(v.template get<uint64_t>())); break;
    case TypeId::kUInt64: FW_RETURN_IF_ERROR(int_in(0, UINT64_MAX)); put(v.template get<uint64_t>()); break;
    case TypeId::kFloat32: put(v.template get<float>()); break;
    case TypeId::kFloat64: put(v.template get<double>()); break;
    case TypeId::kFloat16: {
      // Round-to-nearest conversion of a float to IEEE half.
      const float f = v.template get<float>();
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
template <typename J>
Status PutTensor(TypeId id, const J& v, int64_t n, std::string* out) {
  int64_t count = 0;
  std::function<Status(const J&)> walk = [&](const J& x) -> Status {
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

// Used by internal_format::ValueJson below.
nlohmann::ordered_json ScalarJson(TypeId id, const uint8_t* p);
nlohmann::ordered_json ScalarJson(TypeId id, const uint8_t* p) {
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


namespace {

template <typename J>
std::string Shown(const J& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// One node of the type tree, accumulating its buffers.
struct JsonColumnBuilder::Impl {
  DataType type;
  bool nullable = false;
  std::string values;
  std::vector<int64_t> offsets{0};
  std::vector<bool> valid;
  int64_t length = 0;
  std::vector<Impl> children;

  Impl(DataType t, bool n) : type(std::move(t)), nullable(n) {
    for (const Field& f : type.children) children.emplace_back(f.type, f.nullable);
  }

  Status Fail(const std::string& path, std::string_view what) const {
    if (path.empty()) return absl::InvalidArgumentError(AsAbsl(what));
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", AsAbsl(what)));
  }

  // Ends a row of a type with offsets: the child (or values) length so far.
  void EndOffsets() {
    if (type.is_nested()) offsets.push_back(children[0].length);
    else if (type.id == TypeId::kList) offsets.push_back(static_cast<int64_t>(values.size() / ScalarSize(type.elem)));
    else offsets.push_back(static_cast<int64_t>(values.size()));
  }

  // A null row, or the default value where nulls are not allowed (under a
  // null parent struct).
  void Placeholder(bool as_null) {
    valid.push_back(!as_null);
    length++;
    if (type.id == TypeId::kStruct) {
      for (Impl& c : children) c.Placeholder(c.nullable);
    } else if (type.is_fixed_width()) {
      values.append(type.fixed_width(), '\0');
    } else {
      EndOffsets();
    }
  }

  // J: nlohmann::json or nlohmann::ordered_json (which keeps a map's
  // entries in the order the document gives them).
  template <typename J>
  Status Append(const J* v, const std::string& path) {
    if (v == nullptr || v->is_null()) {
      if (!nullable) return Fail(path, "is null but the type does not allow null (add '?' to allow it)");
      Placeholder(true);
      return absl::OkStatus();
    }
    if (type.id == TypeId::kStruct) {
      if (!v->is_object()) return Fail(path, absl::StrCat("expected an object for ", type.ToString(), ", got ", Shown(*v)));
      for (auto it = v->begin(); it != v->end(); ++it) {
        bool known = false;
        for (const Field& f : type.children) known = known || f.name == it.key();
        if (!known) return Fail(path, absl::StrCat("key '", it.key(), "' is not a field of ", type.ToString()));
      }
      for (size_t i = 0; i < children.size(); ++i) {
        const std::string& name = type.children[i].name;
        const auto it = v->find(name);
        FW_RETURN_IF_ERROR(children[i].Append(it == v->end() ? nullptr : &*it,
                                              path.empty() ? name : absl::StrCat(path, ".", name)));
      }
    } else if (type.id == TypeId::kMap) {
      const bool string_keys = type.children[0].type.id == TypeId::kString;
      if (v->is_object() && string_keys) {
        for (auto it = v->begin(); it != v->end(); ++it) {
          const J key = it.key();
          FW_RETURN_IF_ERROR(children[0].Append(&key, absl::StrCat(path, "[key]")));
          FW_RETURN_IF_ERROR(children[1].Append(&it.value(), absl::StrCat(path, "[\"", it.key(), "\"]")));
        }
      } else if (v->is_array()) {
        size_t i = 0;
        for (const J& pair : *v) {
          const std::string at = absl::StrCat(path, "[", i++, "]");
          if (!pair.is_array() || pair.size() != 2) return Fail(at, "expected a [key, value] pair");
          if (pair[0].is_null()) return Fail(at, "map keys cannot be null");
          FW_RETURN_IF_ERROR(children[0].Append(&pair[0], at + "[key]"));
          FW_RETURN_IF_ERROR(children[1].Append(&pair[1], at + "[value]"));
        }
      } else {
        return Fail(path, absl::StrCat("expected ", string_keys ? "an object or " : "",
                                       "an array of [key, value] pairs for ", type.ToString(), ", got ", Shown(*v)));
      }
      EndOffsets();
    } else if (type.id == TypeId::kList) {
      if (!v->is_array()) return Fail(path, absl::StrCat("expected an array for ", type.ToString(), ", got ", Shown(*v)));
      if (type.is_nested()) {
        size_t i = 0;
        for (const J& e : *v) FW_RETURN_IF_ERROR(children[0].Append(&e, absl::StrCat(path, "[", i++, "]")));
      } else {
        size_t i = 0;
        for (const J& e : *v) {
          if (e.is_null()) return Fail(absl::StrCat(path, "[", i, "]"), "is null but list elements of " + type.ToString() + " are not nullable");
          FW_RETURN_IF_ERROR_CTX(PutScalar(type.elem, e, &values), path, "[", i, "]");
          ++i;
        }
      }
      EndOffsets();
    } else if (type.is_fixed_width()) {
      Status s = type.shape.empty() ? PutScalar(type.id, *v, &values) : PutTensor(type.id, *v, type.num_elements(), &values);
      if (!s.ok()) return Fail(path, std::string(s.message()));
    } else if (type.id == TypeId::kString) {
      if (!v->is_string()) return Fail(path, absl::StrCat("expected a string, got ", Shown(*v)));
      values += v->template get_ref<const std::string&>();
      EndOffsets();
    } else {  // binary
      if (v->is_string()) {
        values += v->template get_ref<const std::string&>();
      } else if (v->is_object() && v->size() == 1 && v->contains("hex") && v->at("hex").is_string()) {
        const std::string& h = v->at("hex").template get_ref<const std::string&>();
        if (h.size() % 2 != 0) return Fail(path, "hex text has an odd number of digits");
        for (size_t i = 0; i < h.size(); i += 2) {
          const int hi = HexDigit(h[i]), lo = HexDigit(h[i + 1]);
          if (hi < 0 || lo < 0) return Fail(path, "hex text has a non-hex digit");
          values.push_back(static_cast<char>(hi * 16 + lo));
        }
      } else {
        return Fail(path, absl::StrCat("expected {\"hex\": ...} or a string for binary, got ", Shown(*v)));
      }
      EndOffsets();
    }
    valid.push_back(true);
    length++;
    return absl::OkStatus();
  }

  Column Build() {
    Column c;
    c.type = type;
    c.length = length;
    if (type.id == TypeId::kStruct) {
      // no buffers
    } else if (type.is_fixed_width()) {
      c.values = Buffer::FromString(std::move(values));
    } else {
      if (!type.is_nested()) c.values = Buffer::FromString(std::move(values));
      c.offsets = Buffer::FromVector(std::move(offsets));
    }
    for (Impl& ch : children) c.children.push_back(ch.Build());
    SetValidity(c, valid);
    *this = Impl(type, nullable);
    return c;
  }
};

JsonColumnBuilder::JsonColumnBuilder(Field field)
    : impl_(std::make_unique<Impl>(std::move(field.type), field.nullable)) {}
JsonColumnBuilder::~JsonColumnBuilder() = default;
JsonColumnBuilder::JsonColumnBuilder(JsonColumnBuilder&&) noexcept = default;
JsonColumnBuilder& JsonColumnBuilder::operator=(JsonColumnBuilder&&) noexcept = default;

Status JsonColumnBuilder::AppendText(std::string_view text) {
  nlohmann::ordered_json v;
  try {
    v = nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  return impl_->Append(&v, "");
}

Status JsonColumnBuilder::AppendNull() {
  impl_->Placeholder(impl_->nullable);
  return absl::OkStatus();
}

int64_t JsonColumnBuilder::length() const { return impl_->length; }

Column JsonColumnBuilder::Finish() { return impl_->Build(); }

}  // namespace flywheel::format

namespace flywheel::internal_format {

using format::DataType;
using format::ScalarSize;
using format::TypeId;
using format::ScalarJson;
using nlohmann::json;

Status AppendJson(JsonColumnBuilder& b, const json* v, const std::string& where) {
  return b.impl()->Append(v, where);
}

Status AppendJson(JsonColumnBuilder& b, const nlohmann::ordered_json* v, const std::string& where) {
  return b.impl()->Append(v, where);
}

nlohmann::ordered_json ValueJson(const Column& c, int64_t row) {
  using json = nlohmann::ordered_json;
  if (!c.IsValid(row)) return nullptr;
  const DataType& t = c.type;
  if (t.id == TypeId::kStruct) {
    json obj = json::object();
    for (size_t i = 0; i < c.children.size(); ++i) obj[t.children[i].name] = ValueJson(c.children[i], row);
    return obj;
  }
  if (t.is_nested()) {
    const int64_t* o = c.offsets_data();
    if (t.id == TypeId::kList) {
      json arr = json::array();
      for (int64_t i = o[row]; i < o[row + 1]; ++i) arr.push_back(ValueJson(c.children[0], i));
      return arr;
    }
    if (t.children[0].type.id == TypeId::kString) {
      json obj = json::object();
      for (int64_t i = o[row]; i < o[row + 1]; ++i) {
        obj[std::string(c.children[0].GetBytes(i))] = ValueJson(c.children[1], i);
      }
      return obj;
    }
    json arr = json::array();
    for (int64_t i = o[row]; i < o[row + 1]; ++i) {
      arr.push_back(json::array({ValueJson(c.children[0], i), ValueJson(c.children[1], i)}));
    }
    return arr;
  }
  if (t.is_fixed_width()) {
    const size_t es = ScalarSize(t.id);
    const uint8_t* p = c.FixedRow(row);
    if (t.shape.empty()) return ScalarJson(t.id, p);
    json arr = json::array();
    for (int64_t i = 0; i < t.num_elements(); ++i) arr.push_back(ScalarJson(t.id, p + i * es));
    return arr;
  }
  if (t.id == TypeId::kList) {
    const size_t es = ScalarSize(t.elem);
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

}  // namespace flywheel::internal_format

namespace flywheel::format {

struct JsonTypeInferrer::Shape {
  enum Kind { kUnknown, kBool, kInt, kUInt, kFloat, kString, kList, kStruct };
  Kind kind = kUnknown;
  bool nullable = false;
  // kStruct: field names and shapes, first-seen order (two vectors: a
  // vector of an incomplete type is allowed, a pair of one is not).
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<Shape> item;                            // kList: one element shape

  static const char* Name(Kind k) {
    static const char* kNames[] = {"null", "a boolean", "an integer", "an integer", "a number",
                                   "a string", "an array", "an object"};
    return kNames[k];
  }

  // Merges `v` (at `path`) into this shape.
  Status Add(const nlohmann::ordered_json& v, const std::string& path) {
    if (v.is_null()) {
      nullable = true;
      return absl::OkStatus();
    }
    Kind k = v.is_boolean() ? kBool
             : v.is_number_unsigned() ? (v.template get<uint64_t>() > uint64_t{INT64_MAX} ? kUInt : kInt)
             : v.is_number_integer() ? kInt
             : v.is_number() ? kFloat
             : v.is_string() ? kString
             : v.is_array() ? kList
                            : kStruct;
    if (kind == kUnknown) {
      kind = k;
      if (k == kList) item.emplace_back();
    } else if (kind != k) {
      const bool numbers = (kind == kInt || kind == kUInt || kind == kFloat) && (k == kInt || k == kUInt || k == kFloat);
      if (!numbers) {
        return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "value" : path, ": ", Name(k),
                                                       " where earlier rows have ", Name(kind)));
      }
      kind = (kind == kFloat || k == kFloat || (kind == kUInt) != (k == kUInt)) ? kFloat : kind;
    }
    if (k == kList) {
      size_t i = 0;
      for (const auto& e : v) FW_RETURN_IF_ERROR(item[0].Add(e, absl::StrCat(path, "[", i++, "]")));
    } else if (k == kStruct) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        size_t k = 0;
        while (k < names.size() && names[k] != it.key()) ++k;
        if (k == names.size()) {
          names.push_back(it.key());
          shapes.emplace_back();
          shapes.back().nullable = seen > 0;  // earlier objects lacked it
        }
        FW_RETURN_IF_ERROR(shapes[k].Add(it.value(), path.empty() ? it.key() : absl::StrCat(path, ".", it.key())));
      }
      for (size_t k = 0; k < names.size(); ++k) {
        if (!v.contains(names[k])) shapes[k].nullable = true;
      }
      seen++;
    }
    return absl::OkStatus();
  }

  DataType Type() const {
    switch (kind) {
      case kBool: return DataType::Scalar(TypeId::kBool);
      case kInt: return DataType::Scalar(TypeId::kInt64);
      case kUInt: return DataType::Scalar(TypeId::kUInt64);
      case kFloat: return DataType::Scalar(TypeId::kFloat64);
      case kList: return DataType::ListOf(item[0].Type(), item[0].nullable || item[0].kind == kUnknown);
      case kStruct: {
        std::vector<Field> out;
        for (size_t k = 0; k < names.size(); ++k) {
          out.push_back(Field{names[k], shapes[k].Type(), shapes[k].nullable || shapes[k].kind == kUnknown});
        }
        if (out.empty()) return DataType::String();  // only empty objects: kept as JSON text
        return DataType::Struct(std::move(out));
      }
      default: return DataType::String();
    }
  }

  int64_t seen = 0;  // objects merged (kStruct)
};

JsonTypeInferrer::JsonTypeInferrer() : shape_(std::make_unique<Shape>()) {}
JsonTypeInferrer::~JsonTypeInferrer() = default;

Status JsonTypeInferrer::AddText(std::string_view text) {
  nlohmann::ordered_json v;
  try {
    v = nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  return shape_->Add(v, "");
}

DataType JsonTypeInferrer::type() const { return shape_->Type(); }
bool JsonTypeInferrer::nullable() const { return shape_->nullable || shape_->kind == Shape::kUnknown; }

std::string ValueToJson(const Column& c, int64_t row) {
  return internal_format::ValueJson(c, row).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flywheel::format

namespace flywheel::internal_format {

Status AddJson(format::JsonTypeInferrer& inf, const nlohmann::ordered_json& v) { return inf.shape()->Add(v, ""); }

}  // namespace flywheel::internal_format

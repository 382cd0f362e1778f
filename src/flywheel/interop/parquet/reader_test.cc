#include "flywheel/interop/parquet/reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/io/file_system.h"

namespace flywheel::interop::parquet {
namespace {

using nlohmann::json;

const std::string kDir = FLYWHEEL_PARQUET_TESTDATA;

std::string Base64(const uint8_t* p, size_t n) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < n) v |= uint32_t{p[i + 1]} << 8;
    if (i + 2 < n) v |= p[i + 2];
    out += a[(v >> 18) & 63];
    out += a[(v >> 12) & 63];
    out += i + 1 < n ? a[(v >> 6) & 63] : '=';
    out += i + 2 < n ? a[v & 63] : '=';
  }
  return out;
}

// Days since 1970-01-01 to a proleptic Gregorian date.
void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

std::string Date(int64_t days) {
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lld-%02u-%02u", static_cast<long long>(y), m, d);
  return buf;
}

std::string Timestamp(int64_t v, TimeUnit unit) {
  const int64_t per_s = unit == TimeUnit::kMillis   ? 1000
                        : unit == TimeUnit::kMicros ? 1000000
                                                    : 1000000000;
  int64_t s = v / per_s, frac = v % per_s;
  if (frac < 0) {
    frac += per_s;
    --s;
  }
  int64_t days = s / 86400, sod = s % 86400;
  if (sod < 0) {
    sod += 86400;
    --days;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%sT%02lld:%02lld:%02lld", Date(days).c_str(),
                static_cast<long long>(sod / 3600), static_cast<long long>(sod / 60 % 60),
                static_cast<long long>(sod % 60));
  std::string out = buf;
  if (frac != 0) {
    const int digits = unit == TimeUnit::kMillis ? 3 : unit == TimeUnit::kMicros ? 6 : 9;
    std::string f = std::to_string(frac);
    f = std::string(static_cast<size_t>(digits) - f.size(), '0') + f;
    while (!f.empty() && f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

std::string Decimal(const uint8_t* p, int width, int scale) {
  __int128 v = 0;
  std::memcpy(&v, p, static_cast<size_t>(width));
  if (width < 16 && (p[width - 1] & 0x80)) v |= ~static_cast<__int128>(0) << (8 * width);
  const bool neg = v < 0;
  unsigned __int128 u =
      neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  } while (u != 0);
  while (static_cast<int>(digits.size()) <= scale) digits.insert(digits.begin(), '0');
  if (scale > 0) digits.insert(digits.end() - scale, '.');
  return (neg ? "-" : "") + digits;
}

json Int(int64_t v) {
  if (v > 9007199254740991LL || v < -9007199254740991LL) return std::to_string(v);
  return v;
}
json UInt(uint64_t v) {
  if (v > 9007199254740991ULL) return std::to_string(v);
  return v;
}
json Float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// One value of `a` in the canonical form of testdata/parquet/README.md.
json ToJson(const Array& a, int64_t i) {
  if (!a.IsValid(i)) return nullptr;
  const uint8_t* p = a.values.data();
  auto fixed = [&](auto x) {
    std::memcpy(&x, p + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (a.type.kind) {
    case ValueKind::kNull:
      return nullptr;
    case ValueKind::kBool:
      return p[i] != 0;
    case ValueKind::kInt8:
      return Int(fixed(int8_t{}));
    case ValueKind::kInt16:
      return Int(fixed(int16_t{}));
    case ValueKind::kInt32:
      return Int(fixed(int32_t{}));
    case ValueKind::kInt64:
      return Int(fixed(int64_t{}));
    case ValueKind::kUInt8:
      return UInt(fixed(uint8_t{}));
    case ValueKind::kUInt16:
      return UInt(fixed(uint16_t{}));
    case ValueKind::kUInt32:
      return UInt(fixed(uint32_t{}));
    case ValueKind::kUInt64:
      return UInt(fixed(uint64_t{}));
    case ValueKind::kFloat32:
      return Float(fixed(float{}));
    case ValueKind::kFloat64:
      return Float(fixed(double{}));
    case ValueKind::kDate32:
      return Date(fixed(int32_t{}));
    case ValueKind::kTimestamp:
      return Timestamp(fixed(int64_t{}), a.type.unit);
    case ValueKind::kDecimal:
      return Decimal(p + i * a.type.width, a.type.width, a.type.scale);
    case ValueKind::kString:
      return std::string(reinterpret_cast<const char*>(p) + a.offsets[i],
                         static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
    case ValueKind::kBinary:
      return Base64(p + a.offsets[i], static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
    case ValueKind::kFixedBinary:
      return Base64(p + i * a.type.width, static_cast<size_t>(a.type.width));
    case ValueKind::kList: {
      json out = json::array();
      for (int64_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k)
        out.push_back(ToJson(a.children[0], k));
      return out;
    }
    default:
      return "unhandled type";
  }
}

json StructToJson(const Field& f, const Array& a, int64_t i) {
  if (!a.IsValid(i)) return nullptr;
  json o = json::object();
  for (size_t c = 0; c < f.children.size(); ++c) {
    const Field& cf = f.children[c];
    // Lists of structs do not occur in the reference files; lists of
    // scalars and lists of lists do.
    o[cf.name] = cf.type.kind == ValueKind::kStruct ? StructToJson(cf, a.children[c], i)
                                                    : ToJson(a.children[c], i);
  }
  return o;
}

json Value(const Field& f, const Array& a, int64_t i) {
  return f.type.kind == ValueKind::kStruct ? StructToJson(f, a, i) : ToJson(a, i);
}

// DuckDB's name for our logical type (the reference files' "schema").
std::string DuckName(const Field& f) {
  const ValueType& t = f.type;
  switch (t.kind) {
    case ValueKind::kBool:
      return "BOOLEAN";
    case ValueKind::kInt8:
      return "TINYINT";
    case ValueKind::kInt16:
      return "SMALLINT";
    case ValueKind::kInt32:
      return "INTEGER";
    case ValueKind::kInt64:
      return "BIGINT";
    case ValueKind::kUInt8:
      return "UTINYINT";
    case ValueKind::kUInt16:
      return "USMALLINT";
    case ValueKind::kUInt32:
      return "UINTEGER";
    case ValueKind::kUInt64:
      return "UBIGINT";
    case ValueKind::kFloat32:
      return "FLOAT";
    case ValueKind::kFloat64:
      return "DOUBLE";
    case ValueKind::kString:
      return "VARCHAR";
    case ValueKind::kBinary:
      return "BLOB";
    case ValueKind::kDate32:
      return "DATE";
    case ValueKind::kTimestamp:
      return "TIMESTAMP";
    case ValueKind::kDecimal:
      return "DECIMAL(" + std::to_string(t.precision) + "," + std::to_string(t.scale) + ")";
    case ValueKind::kList:
      return DuckName(f.children[0]) + "[]";
    case ValueKind::kStruct: {
      std::string s = "STRUCT(";
      for (size_t c = 0; c < f.children.size(); ++c) {
        if (c) s += ", ";
        s += "\"" + f.children[c].name + "\" " + DuckName(f.children[c]);
      }
      return s + ")";
    }
    default:
      return ValueTypeName(t);
  }
}

std::vector<std::string> ReferenceFiles() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    if (e.path().extension() == ".parquet") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

json LoadExpected(const std::string& name) {
  std::ifstream in(kDir + "/" + name + ".expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TEST(ParquetReaderTest, EveryReferenceFileReadsBackExactly) {
  const auto names = ReferenceFiles();
  ASSERT_GE(names.size(), 8u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const json want = LoadExpected(name);
    auto r = ParquetReader::Open(kDir + "/" + name + ".parquet");
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& reader = **r;
    EXPECT_EQ(reader.num_rows(), want["num_rows"].get<int64_t>());
    EXPECT_EQ(reader.num_row_groups(), want["row_groups"].get<int>());
    const auto& fields = reader.fields();
    ASSERT_EQ(fields.size(), want["schema"].size());
    for (size_t c = 0; c < fields.size(); ++c) {
      EXPECT_EQ(fields[c].name, want["schema"][c]["name"].get<std::string>());
      EXPECT_EQ(DuckName(fields[c]), want["schema"][c]["type"].get<std::string>())
          << fields[c].name;
    }
    auto cols = reader.ReadAll(ReadOptions{});
    ASSERT_TRUE(cols.ok()) << cols.status();
    const json& rows = want["rows"];
    int mismatches = 0;
    for (size_t c = 0; c < fields.size(); ++c) {
      ASSERT_EQ((*cols)[c].length, static_cast<int64_t>(rows.size())) << fields[c].name;
      for (size_t i = 0; i < rows.size() && mismatches < 5; ++i) {
        const json got = Value(fields[c], (*cols)[c], static_cast<int64_t>(i));
        const json& exp = rows[i][fields[c].name];
        if (got != exp) {
          ++mismatches;
          ADD_FAILURE() << name << " row " << i << " column " << fields[c].name << ": got "
                        << got.dump() << ", want " << exp.dump();
        }
      }
    }
  }
}

TEST(ParquetReaderTest, ProjectionReadsOnlyTheNamedColumnsInTheirOrder) {
  auto r = ParquetReader::Open(kDir + "/flat_snappy.parquet");
  ASSERT_TRUE(r.ok()) << r.status();
  const json want = LoadExpected("flat_snappy");
  ReadOptions o;
  o.columns = {"txt", "id"};
  auto cols = (*r)->ReadAll(o);
  ASSERT_TRUE(cols.ok()) << cols.status();
  ASSERT_EQ(cols->size(), 2u);
  EXPECT_EQ((*cols)[0].type.kind, ValueKind::kString);
  EXPECT_EQ((*cols)[1].type.kind, ValueKind::kInt32);
  for (int64_t i : {0, 1, 1499, 2999}) {
    EXPECT_EQ(ToJson((*cols)[0], i), want["rows"][i]["txt"]);
    EXPECT_EQ(ToJson((*cols)[1], i), want["rows"][i]["id"]);
  }
  o.columns = {"nope"};
  auto bad = (*r)->ReadAll(o);
  EXPECT_TRUE(absl::IsNotFound(bad.status())) << bad.status();
  EXPECT_NE(std::string(bad.status().message()).find("'nope'"), std::string::npos);
}

TEST(ParquetReaderTest, RowGroupsReadAloneMatchTheirSliceOfTheWhole) {
  auto r = ParquetReader::Open(kDir + "/arrowrs_default.parquet");
  ASSERT_TRUE(r.ok()) << r.status();
  const json want = LoadExpected("arrowrs_default");
  int64_t row = 0;
  for (int g = 0; g < (*r)->num_row_groups(); ++g) {
    auto cols = (*r)->ReadRowGroup(g, {"name", "big"});
    ASSERT_TRUE(cols.ok()) << cols.status();
    for (int64_t i = 0; i < (*cols)[0].length; ++i, ++row) {
      ASSERT_EQ(ToJson((*cols)[0], i), want["rows"][row]["name"]) << row;
      ASSERT_EQ(ToJson((*cols)[1], i), want["rows"][row]["big"]) << row;
    }
  }
  EXPECT_EQ(row, 3000);
  EXPECT_TRUE(absl::IsOutOfRange((*r)->ReadRowGroup(99, {}).status()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status OpenAndReadAll(std::string bytes) {
  FW_ASSIGN_OR_RETURN(
      auto r,
      ParquetReader::Open(io::NewMemoryFile("mem.parquet", std::move(bytes)), "mem.parquet"));
  ReadOptions o;
  o.threads = 1;
  return r->ReadAll(o).status();
}

TEST(ParquetReaderTest, DamagedFilesGiveErrorsNamingTheProblem) {
  const std::string good = ReadBytes(kDir + "/flat_snappy.parquet");
  ASSERT_TRUE(OpenAndReadAll(good).ok());
  // Not Parquet at all, truncated, wrong magic.
  Status s = OpenAndReadAll("hello");
  EXPECT_NE(std::string(s.message()).find("not a Parquet file"), std::string::npos) << s;
  std::string bad = good;
  bad[bad.size() - 1] = 'X';
  s = OpenAndReadAll(bad);
  EXPECT_NE(std::string(s.message()).find("magic"), std::string::npos) << s;
  s = OpenAndReadAll(good.substr(0, good.size() / 2));
  EXPECT_FALSE(s.ok());
  // A footer length beyond the file.
  bad = good;
  const uint32_t huge = 0x7fffffff;
  std::memcpy(bad.data() + bad.size() - 8, &huge, 4);
  s = OpenAndReadAll(bad);
  EXPECT_NE(std::string(s.message()).find("footer length"), std::string::npos) << s;
  // Bytes flipped in the data pages: an error (or, rarely, different
  // values), never a crash. Every error names the file.
  std::mt19937 rng(1);
  int errors = 0;
  for (int i = 0; i < 300; ++i) {
    bad = good;
    const size_t at = 4 + rng() % (good.size() / 2);
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    s = OpenAndReadAll(bad);
    if (!s.ok()) {
      ++errors;
      EXPECT_NE(std::string(s.message()).find("mem.parquet"), std::string::npos) << s;
    }
  }
  // Snappy has no checksum: many flips in compressed data decode to other
  // values; flips in headers, lengths and levels must be caught.
  EXPECT_GT(errors, 30);
}

TEST(ParquetReaderTest, AppendArrayJoinsRowGroupsLikeReadAll) {
  auto r = ParquetReader::Open(kDir + "/flat_snappy.parquet");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE((*r)->num_row_groups(), 2);
  auto g0 = (*r)->ReadRowGroup(0, {"txt", "i64"});
  auto g1 = (*r)->ReadRowGroup(1, {"txt", "i64"});
  auto all = (*r)->ReadAll(ReadOptions{{"txt", "i64"}});
  ASSERT_TRUE(g0.ok() && g1.ok() && all.ok());
  for (size_t c = 0; c < 2; ++c) {
    Array joined = std::move((*g0)[c]);
    ASSERT_TRUE(AppendArray(&joined, std::move((*g1)[c])).ok());
    ASSERT_EQ(joined.length, (*all)[c].length);
    for (int64_t i = 0; i < joined.length; ++i) ASSERT_EQ(ToJson(joined, i), ToJson((*all)[c], i)) << i;
  }
  Array a = std::move((*g0)[0]);
  Array ints;
  ints.type = ValueType{ValueKind::kInt64};
  EXPECT_FALSE(AppendArray(&a, std::move(ints)).ok());
}

TEST(ParquetReaderTest, SchemaDescribesNestedFields) {
  auto r = ParquetReader::Open(kDir + "/images_snappy.parquet");
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> got;
  for (const Field& f : (*r)->fields()) got.push_back(f.name + ": " + FieldTypeName(f));
  EXPECT_EQ(got, (std::vector<std::string>{
                     "idx: int32", "image: struct<bytes: binary, path: string>", "label: int32",
                     "meta: struct<w: int32, tags: list<string>>"}));
}

}  // namespace
}  // namespace flywheel::interop::parquet

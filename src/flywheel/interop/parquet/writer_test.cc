#include "flywheel/interop/parquet/writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "flywheel/base/half.h"
#include "flywheel/format/column.h"
#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/encoding.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::interop::parquet {
namespace {

using nlohmann::json;

const std::string kTestData = FLYWHEEL_PARQUET_TESTDATA;
const std::string kSourceDir = FLYWHEEL_SOURCE_DIR;

// ---------------------------------------------------------------------------
// Schema builders.

ValueType VT(ValueKind kind) {
  ValueType t;
  t.kind = kind;
  return t;
}
ValueType FixedVT(int width) {
  ValueType t = VT(ValueKind::kFixedBinary);
  t.width = width;
  return t;
}
ValueType DecimalVT(int width, int precision, int scale) {
  ValueType t = VT(ValueKind::kDecimal);
  t.width = width;
  t.precision = precision;
  t.scale = scale;
  return t;
}
ValueType TimeVT(ValueKind kind, TimeUnit unit, bool utc) {
  ValueType t = VT(kind);
  t.unit = unit;
  t.adjusted_to_utc = utc;
  return t;
}
Field F(std::string name, ValueType type, bool nullable = true) {
  Field f;
  f.name = std::move(name);
  f.type = type;
  f.nullable = nullable;
  return f;
}
Field ListF(std::string name, Field elem, bool nullable = true) {
  Field f = F(std::move(name), VT(ValueKind::kList), nullable);
  f.children.push_back(std::move(elem));
  return f;
}
Field StructF(std::string name, std::vector<Field> children, bool nullable = true) {
  Field f = F(std::move(name), VT(ValueKind::kStruct), nullable);
  f.children = std::move(children);
  return f;
}

// Every field, its nullability and type parameters, as text (the reader
// must give back exactly the fields written).
std::string Describe(const Field& f) {
  std::string s = f.name + (f.nullable ? "?" : "") + ": " + ValueTypeName(f.type);
  if ((f.type.kind == ValueKind::kTime32 || f.type.kind == ValueKind::kTime64) &&
      f.type.adjusted_to_utc) {
    s += " UTC";
  }
  if (f.type.kind == ValueKind::kDecimal) s += " w" + std::to_string(f.type.width);
  if (!f.children.empty()) {
    s += "<";
    for (size_t c = 0; c < f.children.size(); ++c) s += (c ? ", " : "") + Describe(f.children[c]);
    s += ">";
  }
  return s;
}
std::vector<std::string> Describe(const std::vector<Field>& fields) {
  std::vector<std::string> out;
  for (const Field& f : fields) out.push_back(Describe(f));
  return out;
}

// ---------------------------------------------------------------------------
// Canonical values (testdata/parquet/README.md; TIME as "HH:MM:SS[.f]",
// FLOAT16 as its double value, fixed binary as base64).

std::string Base64(const uint8_t* p, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = p[i], b1 = i + 1 < n ? p[i + 1] : 0, b2 = i + 2 < n ? p[i + 2] : 0;
    const uint32_t v = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::string DateText(int64_t days) {
  // Howard Hinnant's civil-from-days.
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const int64_t doe = days - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  char buf[40];
  if (y < 0) {
    std::snprintf(buf, sizeof buf, "-%04lld-%02lld-%02lld", static_cast<long long>(-y),
                  static_cast<long long>(m), static_cast<long long>(d));
  } else {
    std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lld", static_cast<long long>(y),
                  static_cast<long long>(m), static_cast<long long>(d));
  }
  return buf;
}

int64_t PerSecond(TimeUnit unit) {
  return unit == TimeUnit::kMillis ? 1000 : unit == TimeUnit::kMicros ? 1000000 : 1000000000;
}
int Digits(TimeUnit unit) {
  return unit == TimeUnit::kMillis ? 3 : unit == TimeUnit::kMicros ? 6 : 9;
}

std::string ClockText(int64_t second_of_day, int64_t frac, TimeUnit unit) {
  char buf[32];
  std::snprintf(
      buf, sizeof buf, "%02lld:%02lld:%02lld", static_cast<long long>(second_of_day / 3600),
      static_cast<long long>(second_of_day / 60 % 60), static_cast<long long>(second_of_day % 60));
  std::string out = buf;
  if (frac != 0) {
    std::string f = std::to_string(frac);
    f = std::string(static_cast<size_t>(Digits(unit)) - f.size(), '0') + f;
    while (f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

std::string TimestampText(int64_t v, TimeUnit unit) {
  const int64_t per = PerSecond(unit);
  int64_t s = v / per, frac = v % per;
  if (frac < 0) {
    frac += per;
    --s;
  }
  int64_t days = s / 86400, sod = s % 86400;
  if (sod < 0) {
    sod += 86400;
    --days;
  }
  return DateText(days) + "T" + ClockText(sod, frac, unit);
}

std::string DecimalText(const uint8_t* p, int width, int scale) {
  __int128 v = 0;
  std::memcpy(&v, p, static_cast<size_t>(width));
  if (width < 16 && (p[width - 1] & 0x80)) v |= ~static_cast<__int128>(0) << (8 * width);
  const bool negative = v < 0;
  unsigned __int128 u =
      negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  } while (u != 0);
  while (static_cast<int>(digits.size()) <= scale) digits.insert(digits.begin(), '0');
  if (scale > 0) digits.insert(digits.end() - scale, '.');
  return (negative ? "-" : "") + digits;
}


json IntJson(int64_t v) {
  if (v > 9007199254740991LL || v < -9007199254740991LL) return std::to_string(v);
  return v;
}
json UIntJson(uint64_t v) {
  if (v > 9007199254740991ULL) return std::to_string(v);
  return v;
}
json FloatJson(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

json Canon(const Field& f, const Array& a, int64_t i) {
  if (f.type.kind == ValueKind::kNull || !a.IsValid(i)) return nullptr;
  const uint8_t* p = a.values.data();
  auto load = [&](auto x) {
    std::memcpy(&x, p + i * sizeof(x), sizeof(x));
    return x;
  };
  switch (f.type.kind) {
    case ValueKind::kNull:
      return nullptr;
    case ValueKind::kBool:
      return p[i] != 0;
    case ValueKind::kInt8:
      return IntJson(load(int8_t{}));
    case ValueKind::kInt16:
      return IntJson(load(int16_t{}));
    case ValueKind::kInt32:
      return IntJson(load(int32_t{}));
    case ValueKind::kInt64:
      return IntJson(load(int64_t{}));
    case ValueKind::kUInt8:
      return UIntJson(load(uint8_t{}));
    case ValueKind::kUInt16:
      return UIntJson(load(uint16_t{}));
    case ValueKind::kUInt32:
      return UIntJson(load(uint32_t{}));
    case ValueKind::kUInt64:
      return UIntJson(load(uint64_t{}));
    case ValueKind::kFloat16:
      return FloatJson(HalfToDouble(load(uint16_t{})));
    case ValueKind::kFloat32:
      return FloatJson(load(float{}));
    case ValueKind::kFloat64:
      return FloatJson(load(double{}));
    case ValueKind::kDate32:
      return DateText(load(int32_t{}));
    case ValueKind::kTime32: {
      const int32_t v = load(int32_t{});
      return ClockText(v / 1000, v % 1000, TimeUnit::kMillis);
    }
    case ValueKind::kTime64: {
      const int64_t v = load(int64_t{});
      const int64_t per = PerSecond(f.type.unit);
      return ClockText(v / per, v % per, f.type.unit);
    }
    case ValueKind::kTimestamp:
      return TimestampText(load(int64_t{}), f.type.unit);
    case ValueKind::kDecimal:
      return DecimalText(p + i * f.type.width, f.type.width, f.type.scale);
    case ValueKind::kString:
      return std::string(reinterpret_cast<const char*>(p) + a.offsets[i],
                         static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
    case ValueKind::kBinary:
      return Base64(p + a.offsets[i], static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
    case ValueKind::kFixedBinary:
      return Base64(p + i * f.type.width, static_cast<size_t>(f.type.width));
    case ValueKind::kList: {
      json out = json::array();
      for (int64_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k)
        out.push_back(Canon(f.children[0], a.children[0], k));
      return out;
    }
    case ValueKind::kStruct: {
      json out = json::object();
      for (size_t c = 0; c < f.children.size(); ++c)
        out[f.children[c].name] = Canon(f.children[c], a.children[c], i);
      return out;
    }
  }
  return "unhandled";
}

// Appends the rows of one batch of columns.
void AppendRows(const std::vector<Field>& fields, const std::vector<Array>& cols,
                std::vector<json>* rows) {
  const int64_t n = cols.empty() ? 0 : cols[0].length;
  for (int64_t i = 0; i < n; ++i) {
    json row = json::object();
    for (size_t c = 0; c < fields.size(); ++c) row[fields[c].name] = Canon(fields[c], cols[c], i);
    rows->push_back(std::move(row));
  }
}

void ExpectSameRows(const std::vector<json>& got, const std::vector<json>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < want.size() && mismatches < 5; ++i) {
    if (got[i] != want[i]) {
      ++mismatches;
      ADD_FAILURE() << what << ": row " << i << "\n  got  " << got[i].dump() << "\n  want "
                    << want[i].dump();
    }
  }
}

// ---------------------------------------------------------------------------
// Random arrays for any field: nulls wherever the field allows them, values
// drawn partly from small pools (so dictionaries have repeats), partly at
// random, with the awkward ones (NaN, -0, empty strings and lists).

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  Array Make(const Field& f, int64_t n) {
    Array a;
    a.type = f.type;
    a.length = n;
    std::vector<bool> valid(static_cast<size_t>(n), f.type.kind != ValueKind::kNull);
    if (f.nullable && f.type.kind != ValueKind::kNull) {
      for (int64_t i = 0; i < n; ++i) valid[i] = !Chance(0.15);
    }
    for (int64_t i = 0; i < n; ++i) a.null_count += valid[i] ? 0 : 1;
    if (a.null_count > 0) {
      a.validity.assign(static_cast<size_t>((n + 7) / 8), 0);
      for (int64_t i = 0; i < n; ++i) {
        if (valid[i]) a.validity[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
      }
    }
    switch (f.type.kind) {
      case ValueKind::kNull:
        break;
      case ValueKind::kList: {
        a.offsets.push_back(0);
        for (int64_t i = 0; i < n; ++i) {
          // Null lists may still span elements (Arrow allows it): skipped.
          const int64_t len =
              valid[i] ? (Chance(0.15) ? 0 : 1 + U() % 4) : (Chance(0.7) ? 0 : 1 + U() % 2);
          a.offsets.push_back(a.offsets.back() + len);
        }
        a.children.push_back(Make(f.children[0], a.offsets.back()));
        break;
      }
      case ValueKind::kStruct:
        for (const Field& c : f.children) a.children.push_back(Make(c, n));
        break;
      case ValueKind::kString:
      case ValueKind::kBinary: {
        static const char* kWords[] = {"",  "a",  "héllo",    "日本語", "😀 emoji",
                                       "b", "zz", "flywheel", "ÿ",      "\x01"};
        a.offsets.push_back(0);
        for (int64_t i = 0; i < n; ++i) {
          std::string s;
          if (f.type.kind == ValueKind::kString) {
            s = Chance(0.6) ? std::string(kWords[U() % 10])
                            : std::string(kWords[U() % 10]) + std::to_string(U() % 100000);
          } else {
            const size_t len = Chance(0.5) ? U() % 3 : U() % 40;
            for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>(U()));
          }
          a.values.insert(a.values.end(), s.begin(), s.end());
          a.offsets.push_back(static_cast<int64_t>(a.values.size()));
        }
        break;
      }
      default: {
        const size_t w = Width(f.type);
        a.values.resize(static_cast<size_t>(n) * w);
        for (int64_t i = 0; i < n; ++i) Value(f.type, a.values.data() + i * w);
      }
    }
    return a;
  }

  uint64_t U() { return rng_(); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  static size_t Width(const ValueType& t) {
    switch (t.kind) {
      case ValueKind::kBool:
      case ValueKind::kInt8:
      case ValueKind::kUInt8:
        return 1;
      case ValueKind::kInt16:
      case ValueKind::kUInt16:
      case ValueKind::kFloat16:
        return 2;
      case ValueKind::kInt32:
      case ValueKind::kUInt32:
      case ValueKind::kFloat32:
      case ValueKind::kDate32:
      case ValueKind::kTime32:
        return 4;
      case ValueKind::kFixedBinary:
      case ValueKind::kDecimal:
        return static_cast<size_t>(t.width);
      default:
        return 8;
    }
  }

 private:
  // A value in [-bound, bound].
  int64_t Signed(int64_t bound) {
    return static_cast<int64_t>(U() % (2 * static_cast<uint64_t>(bound) + 1)) - bound;
  }

  void Value(const ValueType& t, uint8_t* p) {
    const size_t w = Width(t);
    switch (t.kind) {
      case ValueKind::kBool:
        p[0] = static_cast<uint8_t>(U() & 1);
        return;
      case ValueKind::kInt8:
      case ValueKind::kInt16:
      case ValueKind::kInt32:
      case ValueKind::kInt64:
      case ValueKind::kUInt8:
      case ValueKind::kUInt16:
      case ValueKind::kUInt32:
      case ValueKind::kUInt64: {
        const uint64_t v = Chance(0.5) ? static_cast<uint64_t>(Signed(8)) : U();
        std::memcpy(p, &v, w);
        return;
      }
      case ValueKind::kFloat16: {
        static const uint16_t kPool[] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7c00,
                                         0xfc00, 0x7e00, 0x0001, 0x7bff};
        const uint16_t v = Chance(0.5) ? kPool[U() % 9] : static_cast<uint16_t>(U());
        std::memcpy(p, &v, 2);
        return;
      }
      case ValueKind::kFloat32:
      case ValueKind::kFloat64: {
        static const double kSpecial[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 1e-300, -1.5};
        double v = Chance(0.1)   ? kSpecial[U() % 7]
                   : Chance(0.5) ? static_cast<double>(Signed(10)) * 0.25
                                 : std::normal_distribution<double>(0, 1e6)(rng_);
        if (t.kind == ValueKind::kFloat32) {
          const float x = static_cast<float>(v);
          std::memcpy(p, &x, 4);
        } else {
          std::memcpy(p, &v, 8);
        }
        return;
      }
      case ValueKind::kFixedBinary:
        for (size_t k = 0; k < w; ++k) p[k] = static_cast<uint8_t>(Chance(0.5) ? k : U());
        return;
      case ValueKind::kDate32: {
        const int32_t v = static_cast<int32_t>(Signed(100000));
        std::memcpy(p, &v, 4);
        return;
      }
      case ValueKind::kTime32: {
        const int32_t v = static_cast<int32_t>(U() % 86400000);
        std::memcpy(p, &v, 4);
        return;
      }
      case ValueKind::kTime64: {
        const int64_t v =
            static_cast<int64_t>(U() % (86400 * static_cast<uint64_t>(PerSecond(t.unit))));
        std::memcpy(p, &v, 8);
        return;
      }
      case ValueKind::kTimestamp: {
        // About ±120 years around 1970 in every unit.
        const int64_t v = Signed(int64_t{3786912000} * PerSecond(t.unit));
        std::memcpy(p, &v, 8);
        return;
      }
      case ValueKind::kDecimal: {
        __int128 bound = 1;
        for (int k = 0; k < t.precision; ++k) bound *= 10;
        bound -= 1;
        const unsigned __int128 r = (static_cast<unsigned __int128>(U()) << 64) | U();
        __int128 v =
            Chance(0.3)
                ? Signed(1000)
                : static_cast<__int128>(r % static_cast<unsigned __int128>(2 * bound + 1)) - bound;
        std::memcpy(p, &v, w);  // little-endian: the low `w` bytes
        return;
      }
      default:
        return;
    }
  }

  std::mt19937_64 rng_;
};

// ---------------------------------------------------------------------------
// Files.

Status WriteFile(const std::string& path, const std::vector<Field>& fields,
                 const std::vector<std::vector<Array>>& groups, const ParquetWriterOptions& options) {
  FW_ASSIGN_OR_RETURN(auto w, ParquetWriter::Open(path, fields, options));
  for (const auto& g : groups) FW_RETURN_IF_ERROR(w->WriteRowGroup(g));
  return w->Close();
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `groups`, reads the file back with our reader and checks it gives
// the same fields and rows.
void ExpectRoundTrip(const std::string& path, const std::vector<Field>& fields,
                     const std::vector<std::vector<Array>>& groups, const ParquetWriterOptions& options) {
  SCOPED_TRACE(path);
  Status s = WriteFile(path, fields, groups, options);
  ASSERT_TRUE(s.ok()) << s;
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Describe((*r)->fields()), Describe(fields));
  std::vector<json> want;
  int nonempty = 0;
  for (const auto& g : groups) {
    AppendRows(fields, g, &want);
    nonempty += g[0].length > 0 ? 1 : 0;
  }
  EXPECT_EQ((*r)->num_row_groups(), nonempty);
  EXPECT_EQ((*r)->num_rows(), static_cast<int64_t>(want.size()));
  ReadOptions ro;
  ro.threads = 1;
  auto cols = (*r)->ReadAll(ro);
  ASSERT_TRUE(cols.ok()) << cols.status();
  std::vector<json> got;
  AppendRows((*r)->fields(), *cols, &got);
  ExpectSameRows(got, want, path);
}

// Every value kind, nullable and not, nested three ways.
std::vector<Field> RichSchema() {
  using K = ValueKind;
  return {
      F("nothing", VT(K::kNull)),
      F("flag", VT(K::kBool)),
      F("i8", VT(K::kInt8)),
      F("i16", VT(K::kInt16), false),
      F("i32", VT(K::kInt32)),
      F("i64", VT(K::kInt64)),
      F("u8", VT(K::kUInt8)),
      F("u16", VT(K::kUInt16), false),
      F("u32", VT(K::kUInt32)),
      F("u64", VT(K::kUInt64)),
      F("f16", VT(K::kFloat16)),
      F("f32", VT(K::kFloat32)),
      F("f64", VT(K::kFloat64), false),
      F("text", VT(K::kString)),
      F("raw", VT(K::kBinary)),
      F("fixed", FixedVT(5)),
      F("day", VT(K::kDate32)),
      F("t_ms", TimeVT(K::kTime32, TimeUnit::kMillis, false)),
      F("t_us", TimeVT(K::kTime64, TimeUnit::kMicros, true)),
      F("t_ns", TimeVT(K::kTime64, TimeUnit::kNanos, false)),
      F("ts_ms", TimeVT(K::kTimestamp, TimeUnit::kMillis, true)),
      F("ts_us", TimeVT(K::kTimestamp, TimeUnit::kMicros, false)),
      F("ts_ns", TimeVT(K::kTimestamp, TimeUnit::kNanos, false)),
      F("dec4", DecimalVT(4, 9, 2)),
      F("dec8", DecimalVT(8, 18, 4), false),
      F("dec16", DecimalVT(16, 38, 10)),
      ListF("nested", ListF("element", F("element", VT(K::kInt32)))),
      ListF("pairs", StructF("element", {F("a", VT(K::kInt32), false), F("b", VT(K::kString))}),
            false),
      StructF("meta", {F("x", VT(K::kInt64)), ListF("tags", F("element", VT(K::kString))),
                       StructF("inner", {F("y", VT(K::kFloat64), false)})}),
      ListF("ids", F("element", VT(K::kInt64), false), false),
  };
}

std::vector<Array> MakeColumns(Gen& gen, const std::vector<Field>& fields, int64_t rows) {
  std::vector<Array> cols;
  for (const Field& f : fields) cols.push_back(gen.Make(f, rows));
  return cols;
}

const CompressionCodec kCodecs[] = {CompressionCodec::kUncompressed, CompressionCodec::kSnappy,
                                    CompressionCodec::kGzip,         CompressionCodec::kBrotli,
                                    CompressionCodec::kZstd,         CompressionCodec::kLz4Raw};

TEST(ParquetWriterTest, EveryKindRoundTripsThroughOurReaderWithEveryCodec) {
  io::TempDir tmp("fw_parquet_writer");
  const auto fields = RichSchema();
  Gen gen(42);
  // An empty row group is skipped, a one-row group is kept.
  const std::vector<std::vector<Array>> groups = {
      MakeColumns(gen, fields, 700), MakeColumns(gen, fields, 0), MakeColumns(gen, fields, 1),
      MakeColumns(gen, fields, 450)};
  for (CompressionCodec codec : kCodecs) {
    ParquetWriterOptions o;
    o.codec = codec;
    o.page_bytes = 300;        // many pages per chunk
    o.dictionary_bytes = 200;  // dictionaries overflow part way
    ExpectRoundTrip(tmp.Sub(std::string(CodecName(codec)) + ".parquet"), fields, groups, o);
  }
  ParquetWriterOptions plain;  // big pages, no dictionary, no statistics
  plain.dictionary_bytes = 0;
  plain.statistics = false;
  ExpectRoundTrip(tmp.Sub("plain.parquet"), fields, groups, plain);
  ExpectRoundTrip(tmp.Sub("defaults.parquet"), fields, groups, ParquetWriterOptions{});
}

TEST(ParquetWriterTest, MostlyNullAndAllNullColumnsRoundTrip) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {F("s", VT(ValueKind::kString)),
                                     ListF("l", F("element", VT(ValueKind::kInt32)))};
  std::vector<Array> cols;
  Array s;  // every value null
  s.type = VT(ValueKind::kString);
  s.length = 20;
  s.null_count = 20;
  s.validity.assign(3, 0);
  s.offsets.assign(21, 0);
  cols.push_back(s);
  Array l;  // [], null, [null], [], ... ; child all null
  l.type = VT(ValueKind::kList);
  l.length = 20;
  l.validity.assign(3, 0);
  l.offsets.push_back(0);
  for (int i = 0; i < 20; ++i) {
    if (i % 3 != 1) l.validity[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    l.null_count += i % 3 == 1 ? 1 : 0;
    l.offsets.push_back(l.offsets.back() + (i % 3 == 2 ? 1 : 0));
  }
  Array e;
  e.type = VT(ValueKind::kInt32);
  e.length = l.offsets.back();
  e.null_count = e.length;
  e.validity.assign(static_cast<size_t>((e.length + 7) / 8), 0);
  e.values.assign(static_cast<size_t>(e.length) * 4, 0);
  l.children.push_back(e);
  cols.push_back(l);
  ExpectRoundTrip(tmp.Sub("nulls.parquet"), fields, {cols}, ParquetWriterOptions{});
}

// Re-writing every reference file (from DuckDB and arrow-rs) gives back what
// it held, row group by row group.
TEST(ParquetWriterTest, ReferenceFilesRewriteExactly) {
  io::TempDir tmp("fw_parquet_writer");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kTestData)) {
    if (entry.path().extension() != ".parquet") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    auto r = ParquetReader::Open(entry.path().string());
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<Field>& fields = (*r)->fields();
    std::vector<std::vector<Array>> groups;
    for (int g = 0; g < (*r)->num_row_groups(); ++g) {
      auto cols = (*r)->ReadRowGroup(g, {});
      ASSERT_TRUE(cols.ok()) << cols.status();
      groups.push_back(std::move(*cols));
    }
    ParquetWriterOptions o;
    o.page_bytes = 4096;
    ExpectRoundTrip(tmp.Sub(name + ".parquet"), fields, groups, o);
    // And the original rows, as DuckDB read them from the original file.
    std::ifstream in(kTestData + "/" + name + ".expected.json");
    const json expected = json::parse(in);
    auto back = ParquetReader::Open(tmp.Sub(name + ".parquet"));
    ASSERT_TRUE(back.ok()) << back.status();
    auto cols = (*back)->ReadAll(ReadOptions{});
    ASSERT_TRUE(cols.ok()) << cols.status();
    std::vector<json> got;
    AppendRows((*back)->fields(), *cols, &got);
    ExpectSameRows(got, expected["rows"].get<std::vector<json>>(), name + " vs expected.json");
  }
  EXPECT_GE(files, 8);
}

// ---------------------------------------------------------------------------
// Layout: pages, dictionaries, statistics.

struct PageInfo {
  PageHeader header;
  std::string body;  // as stored
};

std::vector<PageInfo> ReadPages(const std::string& file, const ColumnMetaData& m) {
  std::vector<PageInfo> pages;
  const int64_t start = m.dictionary_page_offset.value_or(m.data_page_offset);
  size_t pos = static_cast<size_t>(start);
  const size_t end = pos + static_cast<size_t>(m.total_compressed_size);
  while (pos < end) {
    size_t used = 0;
    auto h = ParsePageHeader(reinterpret_cast<const uint8_t*>(file.data()) + pos, end - pos, &used);
    if (!h.ok()) {
      ADD_FAILURE() << h.status();
      break;
    }
    pos += used;
    pages.push_back({*h, file.substr(pos, static_cast<size_t>(h->compressed_page_size))});
    pos += static_cast<size_t>(h->compressed_page_size);
  }
  EXPECT_EQ(pos, end);
  return pages;
}

TEST(ParquetWriterTest, PagesStartAtRowsAndDictionaryFallsBackToPlain) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {ListF("l", F("element", VT(ValueKind::kInt64))),
                                     F("s", VT(ValueKind::kString), false)};
  Gen gen(7);
  auto cols = MakeColumns(gen, fields, 2000);
  // A string column whose first 300 values repeat and the rest are unique.
  Array& s = cols[1];
  s.offsets = {0};
  s.values.clear();
  for (int i = 0; i < 2000; ++i) {
    const std::string v = i < 300 ? "v" + std::to_string(i % 10) : "unique-" + std::to_string(i);
    s.values.insert(s.values.end(), v.begin(), v.end());
    s.offsets.push_back(static_cast<int64_t>(s.values.size()));
  }
  ParquetWriterOptions o;
  o.codec = CompressionCodec::kUncompressed;
  o.page_bytes = 512;
  o.dictionary_bytes = 1000;
  const std::string path = tmp.Sub("layout.parquet");
  ExpectRoundTrip(path, fields, {cols}, o);
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string file = ReadBytes(path);
  const RowGroup& g = (*r)->metadata().row_groups.at(0);
  ASSERT_EQ(g.columns.size(), 2u);

  // The list column: many pages, each starting a row (repetition level 0),
  // their entries adding up to the chunk's.
  const ColumnMetaData& lm = *g.columns[0].meta_data;
  EXPECT_EQ(lm.path_in_schema, (std::vector<std::string>{"l", "list", "element"}));
  const auto lpages = ReadPages(file, lm);
  int64_t entries = 0;
  int data_pages = 0;
  for (const PageInfo& p : lpages) {
    if (p.header.type != PageType::kDataPage) continue;
    ++data_pages;
    const int32_t n = p.header.data_page_header->num_values;
    entries += n;
    uint32_t len;
    std::memcpy(&len, p.body.data(), 4);
    std::vector<uint32_t> rep(static_cast<size_t>(n));
    ASSERT_TRUE(DecodeRleBitPacked(reinterpret_cast<const uint8_t*>(p.body.data()) + 4, len, 1, n,
                                   rep.data())
                    .ok());
    EXPECT_EQ(rep[0], 0u) << "page " << data_pages << " starts inside a row";
  }
  EXPECT_GT(data_pages, 10);
  EXPECT_EQ(entries, lm.num_values);

  // The string column: a dictionary page, dictionary-encoded pages until it
  // overflowed, then PLAIN pages; the chunk lists both.
  const ColumnMetaData& sm = *g.columns[1].meta_data;
  ASSERT_TRUE(sm.dictionary_page_offset.has_value());
  const auto spages = ReadPages(file, sm);
  ASSERT_GT(spages.size(), 3u);
  EXPECT_EQ(spages[0].header.type, PageType::kDictionaryPage);
  std::vector<Encoding> seq;
  for (size_t i = 1; i < spages.size(); ++i) {
    ASSERT_EQ(spages[i].header.type, PageType::kDataPage);
    const Encoding e = spages[i].header.data_page_header->encoding;
    if (seq.empty() || seq.back() != e) seq.push_back(e);
  }
  EXPECT_EQ(seq, (std::vector<Encoding>{Encoding::kRleDictionary, Encoding::kPlain}));
  EXPECT_NE(std::find(sm.encodings.begin(), sm.encodings.end(), Encoding::kRleDictionary),
            sm.encodings.end());
  EXPECT_NE(std::find(sm.encodings.begin(), sm.encodings.end(), Encoding::kPlain),
            sm.encodings.end());
  EXPECT_EQ(sm.num_values, 2000);
  // Dictionary: "v0".."v9" plus the unique values that fit in 1000 bytes.
  const int32_t dict_values = spages[0].header.dictionary_page_header->num_values;
  EXPECT_GE(dict_values, 10);
  EXPECT_LT(dict_values, 100);
  EXPECT_EQ(sm.total_compressed_size, sm.total_uncompressed_size);  // uncompressed codec
}

TEST(ParquetWriterTest, SchemaCarriesLogicalAndConvertedTypes) {
  io::TempDir tmp("fw_parquet_writer");
  const auto fields = RichSchema();
  const std::string path = tmp.Sub("schema.parquet");
  ASSERT_TRUE(WriteFile(path, fields, {}, ParquetWriterOptions{}).ok());
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const FileMetaData& m = (*r)->metadata();
  EXPECT_EQ(m.version, 2);
  EXPECT_EQ(m.num_rows, 0);
  EXPECT_EQ(m.created_by, "flywheel 0.1.0");
  std::map<std::string, const SchemaElement*> by_name;
  for (const SchemaElement& e : m.schema) by_name[e.name] = &e;
  EXPECT_EQ(m.schema[0].name, "schema");
  EXPECT_FALSE(m.schema[0].repetition.has_value());
  auto el = [&](const std::string& n) { return *by_name.at(n); };
  EXPECT_EQ(el("nothing").logical_type.kind, LogicalType::Kind::kUnknown);
  EXPECT_EQ(el("nothing").type, PhysicalType::kInt32);
  EXPECT_EQ(el("i8").converted_type, ConvertedType::kInt8);
  EXPECT_EQ(el("i8").logical_type.bit_width, 8);
  EXPECT_EQ(el("u64").converted_type, ConvertedType::kUint64);
  EXPECT_FALSE(el("u64").logical_type.is_signed);
  EXPECT_EQ(el("u64").type, PhysicalType::kInt64);
  EXPECT_EQ(el("u32").type, PhysicalType::kInt32);
  EXPECT_EQ(el("f16").type, PhysicalType::kFixedLenByteArray);
  EXPECT_EQ(el("f16").type_length, 2);
  EXPECT_EQ(el("f16").logical_type.kind, LogicalType::Kind::kFloat16);
  EXPECT_EQ(el("text").converted_type, ConvertedType::kUtf8);
  EXPECT_EQ(el("text").logical_type.kind, LogicalType::Kind::kString);
  EXPECT_FALSE(el("raw").converted_type.has_value());
  EXPECT_EQ(el("fixed").type_length, 5);
  EXPECT_EQ(el("day").converted_type, ConvertedType::kDate);
  EXPECT_FALSE(el("t_ms").converted_type.has_value());  // not UTC: no legacy TIME_MILLIS
  EXPECT_EQ(el("t_us").converted_type, ConvertedType::kTimeMicros);
  EXPECT_EQ(el("ts_ms").converted_type, ConvertedType::kTimestampMillis);
  EXPECT_TRUE(el("ts_ms").logical_type.adjusted_to_utc);
  EXPECT_FALSE(el("ts_us").converted_type.has_value());
  EXPECT_EQ(el("ts_ns").type, PhysicalType::kInt64);
  EXPECT_EQ(el("ts_ns").logical_type.unit, TimeUnit::kNanos);
  EXPECT_EQ(el("dec4").type, PhysicalType::kInt32);
  EXPECT_EQ(el("dec8").type, PhysicalType::kInt64);
  EXPECT_EQ(el("dec8").repetition, Repetition::kRequired);
  EXPECT_EQ(el("dec16").type, PhysicalType::kFixedLenByteArray);
  EXPECT_EQ(el("dec16").type_length, 16);
  EXPECT_EQ(el("dec16").precision, 38);
  EXPECT_EQ(el("dec16").scale, 10);
  EXPECT_EQ(el("dec16").converted_type, ConvertedType::kDecimal);
  EXPECT_EQ(el("dec16").logical_type.decimal_precision, 38);
  // pairs: required group (LIST) { repeated group list { optional group element { a, b } } }
  size_t at = 0;
  while (m.schema[at].name != "pairs") ++at;
  EXPECT_EQ(m.schema[at].repetition, Repetition::kRequired);
  EXPECT_EQ(m.schema[at].converted_type, ConvertedType::kList);
  EXPECT_EQ(m.schema[at].logical_type.kind, LogicalType::Kind::kList);
  EXPECT_EQ(m.schema[at + 1].name, "list");
  EXPECT_EQ(m.schema[at + 1].repetition, Repetition::kRepeated);
  EXPECT_EQ(m.schema[at + 2].name, "element");
  EXPECT_EQ(m.schema[at + 2].repetition, Repetition::kOptional);
  EXPECT_EQ(m.schema[at + 2].num_children, 2);
}

Statistics StatsOf(const FileMetaData& m, int column) {
  return m.row_groups.at(0).columns.at(static_cast<size_t>(column)).meta_data->statistics.value();
}

template <typename T>
T Decode(const std::optional<std::string>& s) {
  T v{};
  EXPECT_TRUE(s.has_value());
  if (s && s->size() == sizeof(T)) std::memcpy(&v, s->data(), sizeof(T));
  return v;
}

// Builds a fixed-width column from values, with nulls where `valid` is false.
template <typename T>
Array FixedArray(ValueType type, const std::vector<T>& values,
                 const std::vector<bool>& valid = {}) {
  Array a;
  a.type = type;
  a.length = static_cast<int64_t>(values.size());
  a.values.resize(values.size() * sizeof(T));
  std::memcpy(a.values.data(), values.data(), a.values.size());
  if (!valid.empty()) {
    a.validity.assign((values.size() + 7) / 8, 0);
    for (size_t i = 0; i < valid.size(); ++i) {
      if (valid[i]) a.validity[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
      a.null_count += valid[i] ? 0 : 1;
    }
  }
  return a;
}

Array StringArray(const std::vector<std::string>& values, ValueKind kind = ValueKind::kString) {
  Array a;
  a.type = VT(kind);
  a.length = static_cast<int64_t>(values.size());
  a.offsets = {0};
  for (const std::string& v : values) {
    a.values.insert(a.values.end(), v.begin(), v.end());
    a.offsets.push_back(static_cast<int64_t>(a.values.size()));
  }
  return a;
}

TEST(ParquetWriterTest, StatisticsFollowEachTypesOrder) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {
      F("i32", VT(ValueKind::kInt32)),        F("u64", VT(ValueKind::kUInt64)),
      F("f64", VT(ValueKind::kFloat64)),      F("zero", VT(ValueKind::kFloat32)),
      F("text", VT(ValueKind::kString)),      F("long", VT(ValueKind::kString)),
      F("dec16", DecimalVT(16, 20, 2)),       F("u8", VT(ValueKind::kUInt8)),
      F("empty", VT(ValueKind::kInt64)),      F("nan", VT(ValueKind::kFloat64)),
      F("some_nan", VT(ValueKind::kFloat64)),
  };
  const double nan = std::nan("");
  std::vector<Array> cols = {
      FixedArray<int32_t>(VT(ValueKind::kInt32), {7, -3, 0, 5}, {true, true, false, false}),
      FixedArray<uint64_t>(VT(ValueKind::kUInt64), {5, (uint64_t{1} << 63) + 7, 9, 0},
                           {true, true, true, false}),
      FixedArray<double>(VT(ValueKind::kFloat64), {0.5, 2.5, -1.0, 1.0}),
      FixedArray<float>(VT(ValueKind::kFloat32), {0.0f, 0.0f, -0.0f, 0.0f}),
      StringArray({"b", "a", "é", "ab"}),
      StringArray({"short", std::string(65, 'x'), "a", "b"}),
      FixedArray<__int128>(DecimalVT(16, 20, 2), {-5, 3, -700, 12}),
      FixedArray<uint8_t>(VT(ValueKind::kUInt8), {200, 3, 255, 128}),
      FixedArray<int64_t>(VT(ValueKind::kInt64), {1, 2, 3, 4}, {false, false, false, false}),
      FixedArray<double>(VT(ValueKind::kFloat64), {nan, nan, nan, nan}),
      FixedArray<double>(VT(ValueKind::kFloat64), {1.0, nan, -1.0, 2.0}),
  };
  const std::string path = tmp.Sub("stats.parquet");
  ASSERT_TRUE(WriteFile(path, fields, {cols}, ParquetWriterOptions{}).ok());
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const FileMetaData& m = (*r)->metadata();

  Statistics s = StatsOf(m, 0);  // signed: the deprecated fields too
  EXPECT_EQ(Decode<int32_t>(s.min_value), -3);
  EXPECT_EQ(Decode<int32_t>(s.max_value), 7);
  EXPECT_EQ(s.min, s.min_value);
  EXPECT_EQ(s.max, s.max_value);
  EXPECT_EQ(s.null_count, 2);

  s = StatsOf(m, 1);  // unsigned: only min_value/max_value
  EXPECT_EQ(Decode<uint64_t>(s.min_value), 5u);
  EXPECT_EQ(Decode<uint64_t>(s.max_value), (uint64_t{1} << 63) + 7);
  EXPECT_FALSE(s.min.has_value());
  EXPECT_FALSE(s.max.has_value());
  EXPECT_EQ(s.null_count, 1);

  s = StatsOf(m, 2);  // floats numerically
  EXPECT_EQ(Decode<double>(s.min_value), -1.0);
  EXPECT_EQ(Decode<double>(s.max_value), 2.5);
  EXPECT_EQ(s.null_count, 0);

  s = StatsOf(m, 3);  // zero bounds: -0 for the minimum, +0 for the maximum
  EXPECT_TRUE(std::signbit(Decode<float>(s.min_value)));
  EXPECT_FALSE(std::signbit(Decode<float>(s.max_value)));

  s = StatsOf(m, 4);  // bytes compare unsigned: "é" (0xc3 ...) is the largest
  EXPECT_EQ(s.min_value, "a");
  EXPECT_EQ(s.max_value, "é");
  EXPECT_FALSE(s.min.has_value());

  s = StatsOf(m, 5);  // a value over 64 bytes: no bounds, still the null count
  EXPECT_FALSE(s.min_value.has_value());
  EXPECT_FALSE(s.max_value.has_value());
  EXPECT_EQ(s.null_count, 0);

  s = StatsOf(m, 6);  // FLBA decimal: big-endian two's complement, signed order
  ASSERT_TRUE(s.min_value.has_value());
  std::string want_min(16, '\xff');
  const int16_t minus700 = -700;
  want_min[14] = static_cast<char>((minus700 >> 8) & 0xff);
  want_min[15] = static_cast<char>(minus700 & 0xff);
  EXPECT_EQ(*s.min_value, want_min);
  std::string want_max(16, '\0');
  want_max[15] = 12;
  EXPECT_EQ(*s.max_value, want_max);

  s = StatsOf(m, 7);  // UINT_8 in INT32: 255 is the maximum
  EXPECT_EQ(Decode<int32_t>(s.min_value), 3);
  EXPECT_EQ(Decode<int32_t>(s.max_value), 255);

  s = StatsOf(m, 8);  // all null
  EXPECT_FALSE(s.min_value.has_value());
  EXPECT_EQ(s.null_count, 4);

  s = StatsOf(m, 9);  // all NaN: no bounds
  EXPECT_FALSE(s.min_value.has_value());
  EXPECT_EQ(s.null_count, 0);

  s = StatsOf(m, 10);  // one NaN: no bounds either (DuckDBFiltersKeepNaNRows)
  EXPECT_FALSE(s.min_value.has_value());
  EXPECT_FALSE(s.max_value.has_value());
  EXPECT_FALSE(s.min.has_value());
  EXPECT_EQ(s.null_count, 0);

  ParquetWriterOptions off;
  off.statistics = false;
  const std::string path2 = tmp.Sub("nostats.parquet");
  ASSERT_TRUE(WriteFile(path2, fields, {cols}, off).ok());
  auto r2 = ParquetReader::Open(path2);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_FALSE((*r2)->metadata().row_groups[0].columns[0].meta_data->statistics.has_value());
}

// The reader's one normalisation (writer.h): decimals of precision <= 18
// stored in bytes come back 8 bytes wide, with the same values.
TEST(ParquetWriterTest, SixteenByteDecimalOfSmallPrecisionReadsBackEightBytesWide) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {F("d", DecimalVT(16, 10, 3))};
  const std::string path = tmp.Sub("dec.parquet");
  ASSERT_TRUE(WriteFile(path, fields,
                        {{FixedArray<__int128>(DecimalVT(16, 10, 3), {-1234567, 5, 9999999999})}},
                        ParquetWriterOptions{})
                  .ok());
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Describe((*r)->fields()), (std::vector<std::string>{"d?: decimal(10,3) w8"}));
  auto cols = (*r)->ReadAll(ReadOptions{});
  ASSERT_TRUE(cols.ok()) << cols.status();
  std::vector<json> got;
  AppendRows((*r)->fields(), *cols, &got);
  EXPECT_EQ(got,
            (std::vector<json>{{{"d", "-1234.567"}}, {{"d", "0.005"}}, {{"d", "9999999.999"}}}));
}

TEST(ParquetWriterTest, FooterCarriesRowGroupsAndKeyValueMetadata) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {F("x", VT(ValueKind::kInt64), false),
                                     F("y", VT(ValueKind::kString))};
  ParquetWriterOptions o;
  o.key_value_metadata = {{"origin", "test"}, {"shape", "[4]"}};
  o.created_by = "flywheel test";
  const std::string path = tmp.Sub("footer.parquet");
  std::vector<std::vector<Array>> groups;
  for (int g = 0; g < 3; ++g) {
    groups.push_back(
        {FixedArray<int64_t>(VT(ValueKind::kInt64), {g, g + 1}), StringArray({"p", "q"})});
  }
  ASSERT_TRUE(WriteFile(path, fields, groups, o).ok());
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const FileMetaData& m = (*r)->metadata();
  EXPECT_EQ(m.num_rows, 6);
  EXPECT_EQ(m.created_by, "flywheel test");
  EXPECT_EQ(m.key_value_metadata, (std::vector<KeyValue>{{"origin", "test"}, {"shape", "[4]"}}));
  ASSERT_EQ(m.row_groups.size(), 3u);
  int64_t next = 4;  // after "PAR1"
  for (size_t g = 0; g < 3; ++g) {
    const RowGroup& rg = m.row_groups[g];
    EXPECT_EQ(rg.num_rows, 2);
    EXPECT_EQ(rg.ordinal, static_cast<int16_t>(g));
    EXPECT_EQ(rg.file_offset, next);
    int64_t compressed = 0, uncompressed = 0;
    for (const ColumnChunk& c : rg.columns) {
      const ColumnMetaData& cm = *c.meta_data;
      EXPECT_EQ(c.file_offset, cm.dictionary_page_offset.value_or(cm.data_page_offset));
      EXPECT_EQ(c.file_offset, next);
      EXPECT_EQ(cm.codec, CompressionCodec::kZstd);
      EXPECT_EQ(cm.num_values, 2);
      next += cm.total_compressed_size;
      compressed += cm.total_compressed_size;
      uncompressed += cm.total_uncompressed_size;
    }
    EXPECT_EQ(rg.total_compressed_size, compressed);
    EXPECT_EQ(rg.total_byte_size, uncompressed);
  }
  // The x chunk is dictionary-encoded; levels are RLE only where there are some.
  const ColumnMetaData& x = *m.row_groups[0].columns[0].meta_data;
  EXPECT_EQ(x.encodings, (std::vector<Encoding>{Encoding::kPlain, Encoding::kRleDictionary}));
  const ColumnMetaData& y = *m.row_groups[0].columns[1].meta_data;
  EXPECT_EQ(y.encodings,
            (std::vector<Encoding>{Encoding::kPlain, Encoding::kRle, Encoding::kRleDictionary}));
  const std::string bytes = ReadBytes(path);
  EXPECT_EQ(bytes.substr(0, 4), "PAR1");
  EXPECT_EQ(bytes.substr(bytes.size() - 4), "PAR1");
}

// ---------------------------------------------------------------------------
// DuckDB reads what we write.

std::string DuckDBMissing() {
  if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is not installed";
  const std::string api = kSourceDir + "/bench/peers/node_modules/@duckdb/node-api/package.json";
  if (!std::filesystem::exists(api)) {
    return "DuckDB's node package is not installed (" + api + "; run npm install in bench/peers)";
  }
  return "";
}

#define SKIP_WITHOUT_DUCKDB()                                                        \
  do {                                                                               \
    const std::string missing = DuckDBMissing();                                     \
    if (!missing.empty()) GTEST_SKIP() << "DuckDB cross-check skipped: " << missing; \
  } while (0)

// What tests/peers/duckdb_read.mjs prints for `file`.
// `where`: a SQL condition the rows must meet (DuckDB may answer it from
// the statistics).
json ReadWithDuckDB(const std::string& file, bool metadata = false, const std::string& where = "") {
  std::string cmd = "node '" + kSourceDir + "/tests/peers/duckdb_read.mjs' '" + file + "'" +
                    (metadata ? " --metadata" : "");
  if (!where.empty()) cmd += " --where \"" + where + "\"";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return json();
  }
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) {
    ADD_FAILURE() << cmd << " failed (" << rc << "): " << out;
    return json();
  }
  return json::parse(out, nullptr, false);
}

// Writes, has DuckDB read, and compares DuckDB's rows to what was written.
// Returns DuckDB's output.
json ExpectDuckDBReads(const std::string& path, const std::vector<Field>& fields,
                       const std::vector<std::vector<Array>>& groups,
                       const ParquetWriterOptions& options) {
  Status s = WriteFile(path, fields, groups, options);
  EXPECT_TRUE(s.ok()) << s;
  const json out = ReadWithDuckDB(path, true);
  if (!out.is_object()) {
    ADD_FAILURE() << "DuckDB gave no JSON for " << path;
    return json();
  }
  std::vector<json> want;
  for (const auto& g : groups) AppendRows(fields, g, &want);
  ExpectSameRows(out["rows"].get<std::vector<json>>(), want, "DuckDB reading " + path);
  return out;
}

std::map<std::string, std::string> DuckTypes(const json& out) {
  std::map<std::string, std::string> types;
  for (const json& c : out["schema"])
    types[c["name"].get<std::string>()] = c["type"].get<std::string>();
  return types;
}

std::vector<Field> FlatSchema() {
  using K = ValueKind;
  return {
      F("flag", VT(K::kBool)),
      F("i8", VT(K::kInt8)),
      F("i16", VT(K::kInt16), false),
      F("i32", VT(K::kInt32)),
      F("i64", VT(K::kInt64)),
      F("u8", VT(K::kUInt8)),
      F("u16", VT(K::kUInt16)),
      F("u32", VT(K::kUInt32)),
      F("u64", VT(K::kUInt64)),
      F("f16", VT(K::kFloat16)),
      F("f32", VT(K::kFloat32)),
      F("f64", VT(K::kFloat64), false),
      F("text", VT(K::kString)),
      F("raw", VT(K::kBinary)),
      F("fixed", FixedVT(5)),
      F("day", VT(K::kDate32)),
      F("t_ms", TimeVT(K::kTime32, TimeUnit::kMillis, false)),
      F("t_us", TimeVT(K::kTime64, TimeUnit::kMicros, false)),
      F("ts_ms", TimeVT(K::kTimestamp, TimeUnit::kMillis, false)),
      F("ts_us", TimeVT(K::kTimestamp, TimeUnit::kMicros, false)),
      F("ts_utc", TimeVT(K::kTimestamp, TimeUnit::kMicros, true)),
      F("ts_ns", TimeVT(K::kTimestamp, TimeUnit::kNanos, false)),
      F("dec4", DecimalVT(4, 9, 2)),
      F("dec8", DecimalVT(8, 18, 4), false),
      F("dec16", DecimalVT(16, 38, 10)),
      F("nothing", VT(K::kNull)),
  };
}

TEST(ParquetWriterTest, DuckDBReadsFlatColumns) {
  SKIP_WITHOUT_DUCKDB();
  io::TempDir tmp("fw_parquet_writer");
  const auto fields = FlatSchema();
  Gen gen(3);
  const std::vector<std::vector<Array>> groups = {MakeColumns(gen, fields, 900),
                                                  MakeColumns(gen, fields, 333)};
  ParquetWriterOptions zstd;  // dictionaries that overflow, many pages
  zstd.page_bytes = 2048;
  zstd.dictionary_bytes = 512;
  const json a = ExpectDuckDBReads(tmp.Sub("flat_zstd.parquet"), fields, groups, zstd);
  ParquetWriterOptions snappy;  // PLAIN only, one page per chunk
  snappy.codec = CompressionCodec::kSnappy;
  snappy.dictionary_bytes = 0;
  const json b = ExpectDuckDBReads(tmp.Sub("flat_snappy.parquet"), fields, groups, snappy);
  ParquetWriterOptions dict;  // everything fits a dictionary
  dict.codec = CompressionCodec::kUncompressed;
  ExpectDuckDBReads(tmp.Sub("flat_dict.parquet"), fields, groups, dict);
  if (!a.is_object() || !b.is_object()) return;
  // The logical types DuckDB sees.
  const auto types = DuckTypes(a);
  EXPECT_EQ(types.at("i8"), "TINYINT");
  EXPECT_EQ(types.at("u8"), "UTINYINT");
  EXPECT_EQ(types.at("u64"), "UBIGINT");
  EXPECT_EQ(types.at("f16"), "FLOAT");
  EXPECT_EQ(types.at("text"), "VARCHAR");
  EXPECT_EQ(types.at("raw"), "BLOB");
  EXPECT_EQ(types.at("day"), "DATE");
  EXPECT_EQ(types.at("t_ms"), "TIME");
  EXPECT_EQ(types.at("ts_us"), "TIMESTAMP");
  EXPECT_EQ(types.at("ts_utc"), "TIMESTAMP WITH TIME ZONE");
  EXPECT_EQ(types.at("ts_ns"), "TIMESTAMP_NS");
  EXPECT_EQ(types.at("dec4"), "DECIMAL(9,2)");
  EXPECT_EQ(types.at("dec16"), "DECIMAL(38,10)");

  // DuckDB's view of our statistics: bounds and null counts match the data,
  // per row group, in each type's order.
  std::map<std::string, json> first_group;
  for (const json& c : a["metadata"]) {
    if (c["row_group_id"] == 0) first_group[c["path_in_schema"].get<std::string>()] = c;
  }
  const std::vector<Array>& g0 = groups[0];
  auto bounds = [&](int col, auto type_tag) {
    using T = decltype(type_tag);
    T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
    int64_t nulls = 0;
    for (int64_t i = 0; i < g0[col].length; ++i) {
      if (!g0[col].IsValid(i)) {
        ++nulls;
        continue;
      }
      T v;
      std::memcpy(&v, g0[col].values.data() + i * sizeof(T), sizeof(T));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    return std::make_tuple(std::to_string(lo), std::to_string(hi), nulls);
  };
  {
    const auto [lo, hi, nulls] = bounds(3, int32_t{});
    EXPECT_EQ(first_group["i32"]["stats_min_value"], lo);
    EXPECT_EQ(first_group["i32"]["stats_max_value"], hi);
    EXPECT_EQ(first_group["i32"]["stats_null_count"], nulls);
  }
  {
    const auto [lo, hi, nulls] = bounds(8, uint64_t{});
    EXPECT_EQ(first_group["u64"]["stats_min_value"], lo);
    EXPECT_EQ(first_group["u64"]["stats_max_value"], hi);
    EXPECT_EQ(first_group["u64"]["stats_null_count"], nulls);
  }
  // A filter DuckDB may answer from statistics gives the right count.
  EXPECT_EQ(first_group["nothing"]["stats_null_count"], 900);
  EXPECT_EQ(first_group["i16"]["stats_null_count"], 0);
  EXPECT_EQ(first_group["text"]["encodings"], "PLAIN, RLE, RLE_DICTIONARY");
}

// Regression: bounds that skipped NaN (as the format allows) made DuckDB,
// which orders NaN above every number, prune the row group for `x > 5` and
// lose the NaN row. Chunks with a NaN now have no bounds.
TEST(ParquetWriterTest, DuckDBFiltersKeepNaNRows) {
  SKIP_WITHOUT_DUCKDB();
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {F("id", VT(ValueKind::kInt32), false),
                                     F("x", VT(ValueKind::kFloat64)),
                                     F("h", VT(ValueKind::kFloat16))};
  const std::vector<Array> cols = {
      FixedArray<int32_t>(VT(ValueKind::kInt32), {0, 1, 2, 3}),
      FixedArray<double>(VT(ValueKind::kFloat64), {1.0, std::nan(""), -1.0, 2.0}),
      FixedArray<uint16_t>(VT(ValueKind::kFloat16),
                           {0x3c00, 0x7e00, 0xbc00, 0x4000}),  // 1, NaN, -1, 2
  };
  const std::string path = tmp.Sub("nan.parquet");
  ASSERT_TRUE(WriteFile(path, fields, {cols}, ParquetWriterOptions{}).ok());
  for (const char* where : {"x > 5", "h > 5"}) {
    const json out = ReadWithDuckDB(path, false, where);
    ASSERT_TRUE(out.is_object()) << where;
    ASSERT_EQ(out["rows"].size(), 1u) << where;
    EXPECT_EQ(out["rows"][0]["id"], 1) << where;
  }
  const json all = ReadWithDuckDB(path, false, "x < 1.5");
  ASSERT_TRUE(all.is_object());
  EXPECT_EQ(all["rows"].size(), 2u);
}

TEST(ParquetWriterTest, DuckDBReadsNestedColumns) {
  SKIP_WITHOUT_DUCKDB();
  io::TempDir tmp("fw_parquet_writer");
  using K = ValueKind;
  const std::vector<Field> fields = {
      F("id", VT(K::kInt64), false),
      ListF("nested", ListF("element", F("element", VT(K::kInt32)))),
      ListF("pairs", StructF("element", {F("a", VT(K::kInt32), false), F("b", VT(K::kString))}),
            false),
      StructF("meta", {F("x", VT(K::kInt64)), ListF("tags", F("element", VT(K::kString))),
                       StructF("inner", {F("y", VT(K::kFloat64), false)})}),
      ListF("ids", F("element", VT(K::kInt64), false), false),
      ListF("decs", F("element", DecimalVT(16, 30, 3))),
  };
  Gen gen(11);
  std::vector<std::vector<Array>> groups = {MakeColumns(gen, fields, 800),
                                            MakeColumns(gen, fields, 250)};
  for (auto& g : groups) {  // a running id, to read rows in order
    for (int64_t i = 0; i < g[0].length; ++i) std::memcpy(g[0].values.data() + i * 8, &i, 8);
  }
  ParquetWriterOptions o;
  o.page_bytes = 1024;
  o.dictionary_bytes = 700;
  const json out = ExpectDuckDBReads(tmp.Sub("nested_zstd.parquet"), fields, groups, o);
  o.codec = CompressionCodec::kSnappy;
  o.dictionary_bytes = 0;
  ExpectDuckDBReads(tmp.Sub("nested_snappy.parquet"), fields, groups, o);
  if (!out.is_object()) return;
  const auto types = DuckTypes(out);
  EXPECT_EQ(types.at("nested"), "INTEGER[][]");
  EXPECT_EQ(types.at("pairs"), "STRUCT(a INTEGER, b VARCHAR)[]");
  EXPECT_EQ(types.at("meta"), R"(STRUCT(x BIGINT, tags VARCHAR[], "inner" STRUCT(y DOUBLE)))");
}

TEST(ParquetWriterTest, TableBatchWithTensorAndListColumnsReadsInDuckDB) {
  io::TempDir tmp("fw_parquet_writer");
  auto schema = format::Schema::Parse(
      "id:int64, emb:float32[4], img:uint8[2,2,3]?, tokens:list<int32>?, "
      "name:string?, half:float16, ok:bool");
  ASSERT_TRUE(schema.ok()) << schema.status();
  auto fields = FieldsFromTable(*schema);
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(Describe(*fields),
            (std::vector<std::string>{"id: int64", "emb: list<element: float32>",
                                      "img?: list<element: uint8>", "tokens?: list<element: int32>",
                                      "name?: string", "half: float16", "ok: bool"}));
  const int64_t n = 5;
  format::RecordBatch batch;
  batch.schema = *schema;
  batch.num_rows = n;
  std::vector<int64_t> ids;
  std::vector<float> emb;
  std::vector<uint8_t> img;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> names;
  std::vector<uint16_t> half;
  std::vector<uint8_t> ok;
  for (int64_t i = 0; i < n; ++i) {
    ids.push_back(i * 10);
    for (int k = 0; k < 4; ++k) emb.push_back(static_cast<float>(i) + k * 0.25f);
    for (int k = 0; k < 12; ++k) img.push_back(static_cast<uint8_t>(i * 12 + k));
    tokens.push_back(std::vector<int32_t>(static_cast<size_t>(i), static_cast<int32_t>(i)));
    names.push_back(i == 2 ? "" : "név" + std::to_string(i));
    half.push_back(static_cast<uint16_t>(0x3c00 + i));  // 1 + i/1024
    ok.push_back(static_cast<uint8_t>(i % 2));
  }
  batch.columns.push_back(format::MakeFixedColumn(schema->fields[0].type, ids));
  batch.columns.push_back(format::MakeFixedColumn(schema->fields[1].type, emb));
  batch.columns.push_back(format::MakeFixedColumn(schema->fields[2].type, img));
  batch.columns.push_back(format::MakeListColumn<int32_t>(format::TypeId::kInt32, tokens));
  batch.columns.push_back(format::MakeStringColumn(names));
  batch.columns.push_back(format::MakeFixedColumn(schema->fields[5].type, half));
  batch.columns.push_back(format::MakeFixedColumn(schema->fields[6].type, ok));
  format::SetValidity(batch.columns[2], {true, false, true, true, true});
  format::SetValidity(batch.columns[3], {true, true, false, true, true});
  format::SetValidity(batch.columns[4], {true, true, true, false, true});
  auto arrays = ArraysFromTable(batch);
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  // A slice (rows 1..3: offsets not starting at zero) as a second row group.
  format::RecordBatch slice;
  slice.schema = batch.schema;
  slice.num_rows = 3;
  for (const format::Column& c : batch.columns) slice.columns.push_back(c.Slice(1, 3));
  auto sliced = ArraysFromTable(slice);
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  const std::string path = tmp.Sub("table.parquet");
  ExpectRoundTrip(path, *fields, {*arrays, *sliced}, ParquetWriterOptions{});

  const std::vector<json> want = {
      json::parse(
          R"({"id":0,"emb":[0,0.25,0.5,0.75],"img":[0,1,2,3,4,5,6,7,8,9,10,11],"tokens":[],)"
          R"("name":"név0","half":1,"ok":false})"),
      json::parse(R"({"id":10,"emb":[1,1.25,1.5,1.75],"img":null,"tokens":[1],"name":"név1",)"
                  R"("half":1.0009765625,"ok":true})"),
      json::parse(R"({"id":20,"emb":[2,2.25,2.5,2.75],"img":[24,25,26,27,28,29,30,31,32,33,34,35],)"
                  R"("tokens":null,"name":"","half":1.001953125,"ok":false})"),
  };
  std::vector<json> got;
  AppendRows(*fields, *arrays, &got);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  std::vector<json> got_slice;
  AppendRows(*fields, *sliced, &got_slice);
  EXPECT_EQ(got_slice, std::vector<json>(got.begin() + 1, got.begin() + 4));
  got.insert(got.end(), got_slice.begin(), got_slice.end());

  const std::string missing = DuckDBMissing();
  if (!missing.empty()) GTEST_SKIP() << "DuckDB cross-check skipped: " << missing;
  const json out = ReadWithDuckDB(path);
  ASSERT_TRUE(out.is_object());
  ExpectSameRows(out["rows"].get<std::vector<json>>(), got, "DuckDB reading the table batch");
  const auto types = DuckTypes(out);
  EXPECT_EQ(types.at("emb"), "FLOAT[]");
  EXPECT_EQ(types.at("img"), "UTINYINT[]");
  EXPECT_EQ(types.at("tokens"), "INTEGER[]");
}

// ---------------------------------------------------------------------------
// Errors.

std::string Message(const Status& s) { return std::string(s.message()); }

TEST(ParquetWriterTest, OpenRefusesExistingFilesAndBadOptions) {
  io::TempDir tmp("fw_parquet_writer");
  const std::vector<Field> fields = {F("x", VT(ValueKind::kInt32))};
  const std::string path = tmp.Sub("x.parquet");
  ASSERT_TRUE(WriteFile(path, fields, {}, ParquetWriterOptions{}).ok());
  auto again = ParquetWriter::Open(path, fields);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_NE(Message(again.status()).find(path), std::string::npos);

  auto bad = [&](ParquetWriterOptions o, const std::string& what) {
    auto w = ParquetWriter::Open(tmp.Sub("bad.parquet"), fields, o);
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << what << ": " << w.status();
    EXPECT_NE(Message(w.status()).find(what), std::string::npos) << w.status();
    EXPECT_FALSE(std::filesystem::exists(tmp.Sub("bad.parquet")));
  };
  ParquetWriterOptions o;
  o.codec = CompressionCodec::kLz4;
  bad(o, "LZ4");
  o.codec = CompressionCodec::kLzo;
  bad(o, "LZO");
  o = ParquetWriterOptions{};
  o.page_bytes = 0;
  bad(o, "page_bytes");
  o = ParquetWriterOptions{};
  o.dictionary_bytes = -1;
  bad(o, "dictionary_bytes");
  o = ParquetWriterOptions{};
  o.codec = CompressionCodec::kGzip;
  o.level = 12;
  bad(o, "GZIP level 12");
  EXPECT_TRUE(ParquetWriterOptions{}.Validate().ok());
}

TEST(ParquetWriterTest, OpenRefusesFieldsItCannotWrite) {
  io::TempDir tmp("fw_parquet_writer");
  auto expect_bad = [&](std::vector<Field> fields, const std::string& what) {
    auto w = ParquetWriter::Open(tmp.Sub("f.parquet"), std::move(fields));
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << what << ": " << w.status();
    EXPECT_NE(Message(w.status()).find(what), std::string::npos) << w.status();
  };
  using K = ValueKind;
  expect_bad({}, "at least one field");
  expect_bad({F("a", VT(K::kInt32)), F("a", VT(K::kInt64))}, "two top-level fields named 'a'");
  expect_bad({F("", VT(K::kInt32))}, "has no name");
  Field two = ListF("l", F("element", VT(K::kInt32)));
  two.children.push_back(F("extra", VT(K::kInt32)));
  expect_bad({two}, "column l: a list needs exactly one child");
  expect_bad({StructF("s", {})}, "column s: a struct needs at least one field");
  expect_bad({StructF("s", {F("a", VT(K::kInt32)), F("a", VT(K::kBool))})},
             "column s: two fields named 'a'");
  expect_bad({StructF("s", {F("d", DecimalVT(4, 12, 2))})},
             "column s.d: decimal(12,2) does not fit 4 bytes");
  expect_bad({F("d", DecimalVT(6, 5, 2))}, "decimal of width 6");
  expect_bad({F("n", VT(K::kNull), false)}, "column n: a null-typed field must be nullable");
  expect_bad({F("f", FixedVT(0))}, "fixed_binary of width 0");
  expect_bad({ListF("l", F("element", TimeVT(K::kTime32, TimeUnit::kMicros, false)))},
             "column l.element: time32 must be in milliseconds");
}

TEST(ParquetWriterTest, WriteRowGroupErrorsNameTheColumn) {
  io::TempDir tmp("fw_parquet_writer");
  using K = ValueKind;
  const std::vector<Field> fields = {F("a", VT(K::kInt32), false), F("s", VT(K::kString)),
                                     StructF("st", {F("req", VT(K::kInt64), false)})};
  const std::string path = tmp.Sub("e.parquet");
  auto w = ParquetWriter::Open(path, fields);
  ASSERT_TRUE(w.ok()) << w.status();
  auto good = [] {
    Array st;
    st.type = VT(K::kStruct);
    st.length = 2;
    st.children.push_back(FixedArray<int64_t>(VT(K::kInt64), {1, 2}));
    return std::vector<Array>{FixedArray<int32_t>(VT(K::kInt32), {1, 2}), StringArray({"x", "y"}),
                              st};
  };
  auto expect_bad = [&](std::vector<Array> cols, const std::string& what) {
    const Status s = (*w)->WriteRowGroup(cols);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << what << ": " << s;
    EXPECT_NE(Message(s).find(what), std::string::npos) << s;
  };
  auto cols = good();
  cols.pop_back();
  expect_bad(cols, "2 columns for 3 fields");
  cols = good();
  cols[1] = StringArray({"x"});
  expect_bad(cols, "column s has 1 rows, column a has 2");
  cols = good();
  cols[1] = FixedArray<int32_t>(VT(K::kInt32), {1, 2});
  expect_bad(cols, "column s: the array is int32, the field is string");
  cols = good();
  cols[0] = FixedArray<int32_t>(VT(K::kInt32), {1, 2}, {true, false});
  expect_bad(cols, "column a: null at slot 1 but the field is not nullable");
  cols = good();
  cols[2].children[0] = FixedArray<int64_t>(VT(K::kInt64), {1, 2}, {false, true});
  expect_bad(cols, "column st.req: null at slot 0");
  cols = good();
  cols[1] = StringArray({"ok", "\xff\xfe"});
  expect_bad(cols, "column s: the string at slot 1 is not valid UTF-8");
  cols = good();
  cols[1].offsets = {0, 5, 2};
  expect_bad(cols, "column s: offsets decrease at row 1");
  cols = good();
  cols[1].offsets = {0, 1, 99};
  expect_bad(cols, "column s: offsets point past the value bytes");
  cols = good();
  cols[0].values.resize(4);
  expect_bad(cols, "column a: 4 value bytes for 2 rows of 4");
  // None of that wrote anything: the writer still works.
  ASSERT_TRUE((*w)->WriteRowGroup(good()).ok());
  EXPECT_EQ((*w)->rows_written(), 2);
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*w)->WriteRowGroup(good())));
  EXPECT_TRUE(absl::IsFailedPrecondition((*w)->Close()));
  auto r = ParquetReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->num_rows(), 2);
}

TEST(ParquetWriterTest, AnUnclosedWriterLeavesNoValidFile) {
  io::TempDir tmp("fw_parquet_writer");
  const std::string path = tmp.Sub("unclosed.parquet");
  {
    auto w = ParquetWriter::Open(path, {F("x", VT(ValueKind::kInt32))});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->WriteRowGroup({FixedArray<int32_t>(VT(ValueKind::kInt32), {1, 2, 3})}).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  auto r = ParquetReader::Open(path);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace flywheel::interop::parquet

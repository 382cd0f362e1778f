// Files the reference writers do not produce, built byte by byte here from
// the metadata structures and encoders: the legacy list and map forms of
// parquet-format LogicalTypes.md ("Backward-compatibility rules"), INT96
// timestamps, every codec (Hadoop-framed LZ4 included), data page v2, the
// less common encodings and logical types, and each kind of damage the reader
// must turn into an error naming the file, row group, column and page
// (docs/format/parquet.md, "Reading").
#include <gtest/gtest.h>
#include <lz4.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/encoding.h"
#include "flywheel/interop/parquet/metadata.h"
#include "flywheel/interop/parquet/reader.h"
#include "flywheel/io/file_system.h"

namespace flywheel::interop::parquet {
namespace {

const std::string kSourceDir = FLYWHEEL_SOURCE_DIR;
const std::string kName = "compat.parquet";

using K = LogicalType::Kind;
using PT = PhysicalType;
using R = Repetition;

// ---------------------------------------------------------------------------
// Schema elements.

SchemaElement Root(int children) {
  SchemaElement e;
  e.name = "schema";
  e.num_children = children;
  return e;
}

SchemaElement Group(std::string name, R rep, int children, K lk = K::kNone,
                    std::optional<ConvertedType> ct = std::nullopt) {
  SchemaElement e;
  e.name = std::move(name);
  e.repetition = rep;
  e.num_children = children;
  e.logical_type.kind = lk;
  e.converted_type = ct;
  return e;
}

SchemaElement Leaf(std::string name, R rep, PT type, LogicalType lt = {},
                   std::optional<ConvertedType> ct = std::nullopt, int32_t type_length = 0) {
  SchemaElement e;
  e.name = std::move(name);
  e.repetition = rep;
  e.type = type;
  e.logical_type = lt;
  e.converted_type = ct;
  e.type_length = type_length;
  return e;
}

LogicalType Lt(K kind) {
  LogicalType t;
  t.kind = kind;
  return t;
}

LogicalType IntLt(int bits, bool is_signed) {
  LogicalType t = Lt(K::kInteger);
  t.bit_width = bits;
  t.is_signed = is_signed;
  return t;
}

LogicalType DecimalLt(int precision, int scale) {
  LogicalType t = Lt(K::kDecimal);
  t.decimal_precision = precision;
  t.decimal_scale = scale;
  return t;
}

LogicalType TimeLt(TimeUnit unit) {
  LogicalType t = Lt(K::kTime);
  t.unit = unit;
  return t;
}

// ---------------------------------------------------------------------------
// Value and level streams.

template <typename T>
std::string Plain(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string PlainBytes(const std::vector<std::string>& v) {
  ByteArrays b;
  for (const std::string& x : v) b.Append(x.data(), x.size());
  std::string s;
  EncodePlainByteArray(b, &s);
  return s;
}

std::string U32Le(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string U32Be(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (24 - 8 * i));
  return s;
}

// RLE/bit-packed levels without the v1 length prefix (data page v2).
std::string RleNoPrefix(const std::vector<uint32_t>& v, int16_t max_level) {
  std::string s;
  EncodeRleBitPacked(v.data(), static_cast<int64_t>(v.size()),
                     BitWidth(static_cast<uint64_t>(max_level)), &s);
  return s;
}

// v1 levels: 4-byte little-endian length, then the RLE/bit-packed hybrid.
std::string Levels(const std::vector<uint32_t>& v, int16_t max_level) {
  const std::string s = RleNoPrefix(v, max_level);
  return U32Le(static_cast<uint32_t>(s.size())) + s;
}

// The deprecated LZ4 codec as Hadoop frames it, in blocks of at most
// `block` input bytes: [raw size u32 BE][stored size u32 BE][LZ4 block].
std::string HadoopLz4(const std::string& raw, size_t block) {
  std::string out;
  for (size_t at = 0; at < raw.size() || (raw.empty() && at == 0); at += block) {
    const size_t n = std::min(block, raw.size() - at);
    std::string c(static_cast<size_t>(LZ4_compressBound(static_cast<int>(n))), '\0');
    const int len = LZ4_compress_default(raw.data() + at, c.data(), static_cast<int>(n),
                                         static_cast<int>(c.size()));
    c.resize(static_cast<size_t>(len));
    out += U32Be(static_cast<uint32_t>(n)) + U32Be(static_cast<uint32_t>(len)) + c;
    if (raw.empty()) break;
  }
  return out;
}

std::string BareLz4(const std::string& raw) {
  std::string c(static_cast<size_t>(LZ4_compressBound(static_cast<int>(raw.size()))), '\0');
  const int len = LZ4_compress_default(raw.data(), c.data(), static_cast<int>(raw.size()),
                                       static_cast<int>(c.size()));
  c.resize(static_cast<size_t>(len));
  return c;
}

// How a page body is compressed: the column's codec, and for LZ4 whether
// the Hadoop framing or a bare block (what some writers put under LZ4).
enum class Lz4Form { kHadoop, kBare };

std::string Pack(CompressionCodec codec, const std::string& raw, Lz4Form form = Lz4Form::kHadoop) {
  if (codec == CompressionCodec::kUncompressed) return raw;
  if (codec == CompressionCodec::kLz4)
    return form == Lz4Form::kHadoop ? HadoopLz4(raw, 97) : BareLz4(raw);
  std::string out;
  const Status st = Compress(codec, reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), &out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// ---------------------------------------------------------------------------
// Pages and files.

struct Page {
  std::string bytes;  // header + body
  bool dict = false;
};

Page RawPage(const PageHeader& h, const std::string& body) {
  return Page{SerializePageHeader(h) + body, h.type == PageType::kDictionaryPage};
}

Page DataV1(int32_t n, Encoding enc, const std::string& raw,
            CompressionCodec codec = CompressionCodec::kUncompressed,
            Lz4Form form = Lz4Form::kHadoop, Encoding level_enc = Encoding::kRle) {
  const std::string body = Pack(codec, raw, form);
  PageHeader h;
  h.type = PageType::kDataPage;
  h.uncompressed_page_size = static_cast<int32_t>(raw.size());
  h.compressed_page_size = static_cast<int32_t>(body.size());
  DataPageHeader d;
  d.num_values = n;
  d.encoding = enc;
  d.definition_level_encoding = level_enc;
  d.repetition_level_encoding = level_enc;
  h.data_page_header = d;
  return RawPage(h, body);
}

Page Dict(int32_t n, const std::string& raw,
          CompressionCodec codec = CompressionCodec::kUncompressed,
          Lz4Form form = Lz4Form::kHadoop) {
  const std::string body = Pack(codec, raw, form);
  PageHeader h;
  h.type = PageType::kDictionaryPage;
  h.uncompressed_page_size = static_cast<int32_t>(raw.size());
  h.compressed_page_size = static_cast<int32_t>(body.size());
  DictionaryPageHeader d;
  d.num_values = n;
  d.encoding = Encoding::kPlain;
  h.dictionary_page_header = d;
  return RawPage(h, body);
}

// A v2 page: levels never compressed; values compressed when is_compressed.
Page DataV2(int32_t n, int32_t nulls, int32_t rows, Encoding enc, const std::string& rep,
            const std::string& def, const std::string& values, CompressionCodec codec,
            bool is_compressed) {
  const std::string stored = is_compressed ? Pack(codec, values) : values;
  PageHeader h;
  h.type = PageType::kDataPageV2;
  h.uncompressed_page_size = static_cast<int32_t>(rep.size() + def.size() + values.size());
  h.compressed_page_size = static_cast<int32_t>(rep.size() + def.size() + stored.size());
  DataPageHeaderV2 d;
  d.num_values = n;
  d.num_nulls = nulls;
  d.num_rows = rows;
  d.encoding = enc;
  d.repetition_levels_byte_length = static_cast<int32_t>(rep.size());
  d.definition_levels_byte_length = static_cast<int32_t>(def.size());
  d.is_compressed = is_compressed;
  h.data_page_header_v2 = d;
  return RawPage(h, rep + def + stored);
}

// Dictionary indices: bit width byte, then the RLE/bit-packed hybrid.
std::string DictIndices(const std::vector<uint32_t>& idx, int bit_width) {
  std::string s(1, static_cast<char>(bit_width));
  EncodeRleBitPacked(idx.data(), static_cast<int64_t>(idx.size()), bit_width, &s);
  return s;
}

struct Chunk {
  std::vector<std::string> path;
  PT type = PT::kInt32;
  int64_t num_values = 0;
  std::vector<Page> pages;
  CompressionCodec codec = CompressionCodec::kUncompressed;
};

// "PAR1", every row group's chunks (pages back to back), the footer.
// `edit` may damage the metadata before it is serialized.
std::string Assemble(const std::vector<SchemaElement>& schema,
                     const std::vector<std::vector<Chunk>>& groups,
                     const std::vector<int64_t>& rows,
                     const std::function<void(FileMetaData&)>& edit = {}) {
  std::string file = "PAR1";
  FileMetaData m;
  m.schema = schema;
  m.created_by = "flywheel reader_compat_test";
  for (size_t g = 0; g < groups.size(); ++g) {
    RowGroup rg;
    rg.num_rows = rows[g];
    m.num_rows += rows[g];
    for (const Chunk& c : groups[g]) {
      ColumnMetaData cm;
      cm.type = c.type;
      cm.path_in_schema = c.path;
      cm.codec = c.codec;
      cm.num_values = c.num_values;
      cm.encodings = {Encoding::kPlain, Encoding::kRle};
      const int64_t start = static_cast<int64_t>(file.size());
      cm.data_page_offset = start;
      for (const Page& p : c.pages) {
        if (p.dict && static_cast<int64_t>(file.size()) == start) {
          cm.dictionary_page_offset = start;
          cm.data_page_offset = start + static_cast<int64_t>(p.bytes.size());
        }
        file += p.bytes;
      }
      cm.total_compressed_size = static_cast<int64_t>(file.size()) - start;
      cm.total_uncompressed_size = cm.total_compressed_size;
      rg.total_byte_size += cm.total_compressed_size;
      ColumnChunk cc;
      cc.file_offset = start;
      cc.meta_data = cm;
      rg.columns.push_back(cc);
    }
    m.row_groups.push_back(rg);
  }
  if (edit) edit(m);
  const std::string footer = SerializeFileMetaData(m);
  return file + footer + U32Le(static_cast<uint32_t>(footer.size())) + "PAR1";
}

Result<std::unique_ptr<ParquetReader>> OpenBytes(const std::string& file) {
  return ParquetReader::Open(io::NewMemoryFile(kName, file), kName);
}

Result<std::vector<Array>> ReadBytes(const std::string& file) {
  FW_ASSIGN_OR_RETURN(auto r, OpenBytes(file));
  ReadOptions o;
  o.threads = 1;
  return r->ReadAll(o);
}

// ---------------------------------------------------------------------------
// Rendering values as text, so expectations read like the data.

std::string Int128String(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  unsigned __int128 u =
      neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string s;
  while (u > 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return neg ? "-" + s : s;
}

template <typename T>
T Load(const Array& a, int64_t i) {
  T v;
  std::memcpy(&v, a.values.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

std::string Hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string Render(const Array& a, int64_t i) {
  if (a.type.kind == ValueKind::kNull || !a.IsValid(i)) return "null";
  switch (a.type.kind) {
    case ValueKind::kBool:
      return a.values[i] ? "true" : "false";
    case ValueKind::kInt8:
      return std::to_string(Load<int8_t>(a, i));
    case ValueKind::kUInt8:
      return std::to_string(Load<uint8_t>(a, i));
    case ValueKind::kInt16:
      return std::to_string(Load<int16_t>(a, i));
    case ValueKind::kUInt16:
      return std::to_string(Load<uint16_t>(a, i));
    case ValueKind::kInt32:
    case ValueKind::kDate32:
    case ValueKind::kTime32:
      return std::to_string(Load<int32_t>(a, i));
    case ValueKind::kUInt32:
      return std::to_string(Load<uint32_t>(a, i));
    case ValueKind::kInt64:
    case ValueKind::kTime64:
    case ValueKind::kTimestamp:
      return std::to_string(Load<int64_t>(a, i));
    case ValueKind::kUInt64:
      return std::to_string(Load<uint64_t>(a, i));
    case ValueKind::kFloat32: {
      std::ostringstream o;
      o << Load<float>(a, i);
      return o.str();
    }
    case ValueKind::kFloat64: {
      std::ostringstream o;
      o << Load<double>(a, i);
      return o.str();
    }
    case ValueKind::kFloat16:
    case ValueKind::kFixedBinary: {
      const size_t w = a.type.kind == ValueKind::kFloat16 ? 2 : static_cast<size_t>(a.type.width);
      return "0x" + Hex(a.values.data() + static_cast<size_t>(i) * w, w);
    }
    case ValueKind::kDecimal: {
      const size_t w = static_cast<size_t>(a.type.width);
      const uint8_t* p = a.values.data() + static_cast<size_t>(i) * w;
      if (w == 4) return std::to_string(Load<int32_t>(a, i));
      if (w == 8) return std::to_string(Load<int64_t>(a, i));
      __int128 v;
      std::memcpy(&v, p, 16);
      return Int128String(v);
    }
    case ValueKind::kString:
      return "\"" +
             std::string(reinterpret_cast<const char*>(a.values.data()) + a.offsets[i],
                         static_cast<size_t>(a.offsets[i + 1] - a.offsets[i])) +
             "\"";
    case ValueKind::kBinary:
      return "0x" + Hex(a.values.data() + a.offsets[i],
                        static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]));
    case ValueKind::kList: {
      std::string s = "[";
      for (int64_t j = a.offsets[i]; j < a.offsets[i + 1]; ++j) {
        if (j > a.offsets[i]) s += ", ";
        s += Render(a.children[0], j);
      }
      return s + "]";
    }
    case ValueKind::kStruct: {
      std::string s = "{";
      for (size_t c = 0; c < a.children.size(); ++c) {
        if (c > 0) s += ", ";
        s += Render(a.children[c], i);
      }
      return s + "}";
    }
    default:
      return "?";
  }
}

std::string Render(const Array& a) {
  std::string s = "[";
  for (int64_t i = 0; i < a.length; ++i) {
    if (i > 0) s += ", ";
    s += Render(a, i);
  }
  return s + "]";
}

// Reads `file` and returns each top-level column rendered.
std::vector<std::string> ReadRendered(const std::string& file) {
  auto r = ReadBytes(file);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<std::string> out;
  if (!r.ok()) return out;
  for (const Array& a : *r) out.push_back(Render(a));
  return out;
}

// Every piece of `parts` occurs in the error of opening and reading `file`.
void ExpectReadError(const std::string& file, const std::vector<std::string>& parts,
                     std::optional<absl::StatusCode> code = std::nullopt) {
  Status st;
  auto r = OpenBytes(file);
  if (!r.ok()) {
    st = r.status();
  } else {
    ReadOptions o;
    o.threads = 1;
    st = (*r)->ReadAll(o).status();
  }
  ASSERT_FALSE(st.ok()) << "expected an error containing " << parts.front();
  for (const std::string& p : parts) {
    EXPECT_NE(std::string(st.message()).find(p), std::string::npos)
        << "'" << p << "' missing from: " << st;
  }
  if (code) {
    EXPECT_EQ(st.code(), *code) << st;
  }
}

// ---------------------------------------------------------------------------
// 1. Legacy list forms.

// `optional group a (LIST) { repeated <element> }` with rows
// [1, 2], null, [], [3] in the leaf a.<rep>[.x]: rep levels, def levels.
const std::vector<uint32_t> kListRep = {0, 1, 0, 0, 0};
const std::vector<uint32_t> kListDef = {2, 2, 0, 1, 2};

Chunk ListChunk(std::vector<std::string> path) {
  Chunk c;
  c.path = std::move(path);
  c.type = PT::kInt32;
  c.num_values = 5;
  c.pages = {DataV1(5, Encoding::kPlain,
                    Levels(kListRep, 1) + Levels(kListDef, 2) + Plain<int32_t>({1, 2, 3}))};
  return c;
}

TEST(ParquetCompatTest, TwoLevelListOfRepeatedPrimitive) {
  const std::string f =
      Assemble({Root(1), Group("a", R::kOptional, 1, K::kNone, ConvertedType::kList),
                Leaf("array", R::kRepeated, PT::kInt32)},
               {{ListChunk({"a", "array"})}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)->fields().size(), 1u);
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<int32>");
  EXPECT_TRUE((*r)->fields()[0].nullable);
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[[1, 2], null, [], [3]]"});
}

TEST(ParquetCompatTest, TwoLevelListAcrossRowGroups) {
  const std::string f = Assemble(
      {Root(1), Group("a", R::kOptional, 1, K::kList), Leaf("array", R::kRepeated, PT::kInt32)},
      {{ListChunk({"a", "array"})}, {ListChunk({"a", "array"})}}, {4, 4});
  EXPECT_EQ(ReadRendered(f),
            std::vector<std::string>{"[[1, 2], null, [], [3], [1, 2], null, [], [3]]"});
}

TEST(ParquetCompatTest, RepeatedGroupNamedArrayIsTheElement) {
  const std::string f =
      Assemble({Root(1), Group("a", R::kOptional, 1, K::kList), Group("array", R::kRepeated, 1),
                Leaf("x", R::kRequired, PT::kInt32)},
               {{ListChunk({"a", "array", "x"})}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<struct<x: int32>>");
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[[{1}, {2}], null, [], [{3}]]"});
}

TEST(ParquetCompatTest, RepeatedGroupNamedTupleIsTheElement) {
  const std::string f =
      Assemble({Root(1), Group("a", R::kOptional, 1, K::kNone, ConvertedType::kList),
                Group("a_tuple", R::kRepeated, 1), Leaf("x", R::kRequired, PT::kInt32)},
               {{ListChunk({"a", "a_tuple", "x"})}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<struct<x: int32>>");
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[[{1}, {2}], null, [], [{3}]]"});
}

TEST(ParquetCompatTest, ThreeLevelListElementIsTheInnerField) {
  // The contrast: a one-field repeated group with another name is the
  // standard form, and the element is its field (here optional).
  Chunk c;
  c.path = {"a", "list", "element"};
  c.num_values = 6;
  c.pages = {DataV1(
      6, Encoding::kPlain,
      Levels({0, 1, 0, 0, 0, 1}, 1) + Levels({3, 3, 0, 1, 3, 2}, 3) + Plain<int32_t>({1, 2, 3}))};
  const std::string f =
      Assemble({Root(1), Group("a", R::kOptional, 1, K::kList), Group("list", R::kRepeated, 1),
                Leaf("element", R::kOptional, PT::kInt32)},
               {{c}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<int32>");
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[[1, 2], null, [], [3, null]]"});
}

TEST(ParquetCompatTest, RepeatedGroupWithTwoFieldsIsAStructElement) {
  Chunk x = ListChunk({"a", "pair", "x"});
  Chunk s;
  s.path = {"a", "pair", "s"};
  s.type = PT::kByteArray;
  s.num_values = 5;
  s.pages = {DataV1(5, Encoding::kPlain,
                    Levels(kListRep, 1) + Levels({3, 2, 0, 1, 3}, 3) + PlainBytes({"p", "q"}))};
  const std::string f =
      Assemble({Root(1), Group("a", R::kOptional, 1, K::kList), Group("pair", R::kRepeated, 2),
                Leaf("x", R::kRequired, PT::kInt32),
                Leaf("s", R::kOptional, PT::kByteArray, Lt(K::kString))},
               {{x, s}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<struct<x: int32, s: string>>");
  EXPECT_EQ(ReadRendered(f),
            std::vector<std::string>{R"([[{1, "p"}, {2, null}], null, [], [{3, "q"}]])"});
}

TEST(ParquetCompatTest, BareRepeatedPrimitiveIsANonNullList) {
  // rows: id 10, 11, 12; r [1, 2], [], [3]
  Chunk id{{"id"}, PT::kInt32, 3, {DataV1(3, Encoding::kPlain, Plain<int32_t>({10, 11, 12}))}};
  Chunk rc{{"r"},
           PT::kInt32,
           4,
           {DataV1(4, Encoding::kPlain,
                   Levels({0, 1, 0, 0}, 1) + Levels({1, 1, 0, 1}, 1) + Plain<int32_t>({1, 2, 3}))}};
  const std::string f =
      Assemble({Root(2), Leaf("id", R::kRequired, PT::kInt32), Leaf("r", R::kRepeated, PT::kInt32)},
               {{id, rc}}, {3});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[1]), "list<int32>");
  EXPECT_FALSE((*r)->fields()[1].nullable);
  auto a = ReadBytes(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)[1].null_count, 0);
  EXPECT_EQ(Render((*a)[0]), "[10, 11, 12]");
  EXPECT_EQ(Render((*a)[1]), "[[1, 2], [], [3]]");
}

TEST(ParquetCompatTest, BareRepeatedGroupIsANonNullListOfStructs) {
  // repeated group g { required int32 x; optional int32 y; }: rows
  // [{1, 5}, {2, null}], [], [{3, 6}]
  Chunk x{{"g", "x"},
          PT::kInt32,
          4,
          {DataV1(4, Encoding::kPlain,
                  Levels({0, 1, 0, 0}, 1) + Levels({1, 1, 0, 1}, 1) + Plain<int32_t>({1, 2, 3}))}};
  Chunk y{{"g", "y"},
          PT::kInt32,
          4,
          {DataV1(4, Encoding::kPlain,
                  Levels({0, 1, 0, 0}, 1) + Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({5, 6}))}};
  const std::string f =
      Assemble({Root(1), Group("g", R::kRepeated, 2), Leaf("x", R::kRequired, PT::kInt32),
                Leaf("y", R::kOptional, PT::kInt32)},
               {{x, y}}, {3});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<struct<x: int32, y: int32>>");
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[[{1, 5}, {2, null}], [], [{3, 6}]]"});
}

TEST(ParquetCompatTest, BareRepeatedPrimitiveInsideAStruct) {
  // optional group s { required int32 id; repeated int32 r; }: rows
  // {1, [1, 2]}, null, {2, []}, {3, [3]}
  Chunk id{{"s", "id"},
           PT::kInt32,
           4,
           {DataV1(4, Encoding::kPlain, Levels({1, 0, 1, 1}, 1) + Plain<int32_t>({1, 2, 3}))}};
  Chunk rc{{"s", "r"},
           PT::kInt32,
           5,
           {DataV1(5, Encoding::kPlain,
                   Levels(kListRep, 1) + Levels(kListDef, 2) + Plain<int32_t>({1, 2, 3}))}};
  const std::string f =
      Assemble({Root(1), Group("s", R::kOptional, 2), Leaf("id", R::kRequired, PT::kInt32),
                Leaf("r", R::kRepeated, PT::kInt32)},
               {{id, rc}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "struct<id: int32, r: list<int32>>");
  auto a = ReadBytes(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Render((*a)[0]), "[{1, [1, 2]}, null, {2, []}, {3, [3]}]");
  ASSERT_EQ((*a)[0].children.size(), 2u);
  EXPECT_EQ((*a)[0].children[1].length, 4);
}

// ---------------------------------------------------------------------------
// 2. Maps.

TEST(ParquetCompatTest, MapIsAListOfKeyValueStructs) {
  // rows {a: 1, b: 2}, null, {}, {c: null}
  Chunk key{
      {"m", "key_value", "key"},
      PT::kByteArray,
      5,
      {DataV1(5, Encoding::kPlain,
              Levels(kListRep, 1) + Levels({2, 2, 0, 1, 2}, 2) + PlainBytes({"a", "b", "c"}))}};
  Chunk val{{"m", "key_value", "value"},
            PT::kInt32,
            5,
            {DataV1(5, Encoding::kPlain,
                    Levels(kListRep, 1) + Levels({3, 3, 0, 1, 2}, 3) + Plain<int32_t>({1, 2}))}};
  const std::string f =
      Assemble({Root(1), Group("m", R::kOptional, 1, K::kNone, ConvertedType::kMap),
                Group("key_value", R::kRepeated, 2, K::kNone, ConvertedType::kMapKeyValue),
                Leaf("key", R::kRequired, PT::kByteArray, {}, ConvertedType::kUtf8),
                Leaf("value", R::kOptional, PT::kInt32)},
               {{key, val}}, {4});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(FieldTypeName((*r)->fields()[0]), "list<struct<key: string, value: int32>>");
  EXPECT_EQ((*r)->fields()[0].children[0].children[0].nullable, false);
  EXPECT_EQ(ReadRendered(f),
            std::vector<std::string>{R"([[{"a", 1}, {"b", 2}], null, [], [{"c", null}]])"});
}

std::string DuckDBMissing() {
  if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is not installed";
  const std::string api = kSourceDir + "/bench/peers/node_modules/@duckdb/node-api/lib/index.js";
  if (!std::filesystem::exists(api)) return "DuckDB's node package is not installed (" + api + ")";
  return "";
}

// Runs `sql` in DuckDB (in memory); false with the output on failure.
bool RunDuckDB(const std::string& sql, std::string* out) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fw_compat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "run.mjs").string();
  {
    std::ofstream s(script);
    s << "import {DuckDBInstance} from '" << kSourceDir
      << "/bench/peers/node_modules/@duckdb/node-api/lib/index.js';\n"
      << "const inst = await DuckDBInstance.create(':memory:');\n"
      << "const c = await inst.connect();\n"
      << "await c.run(" << '`' << sql << '`' << ");\n";
  }
  FILE* p = popen(("node '" + script + "' 2>&1").c_str(), "r");
  if (p == nullptr) return false;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  return pclose(p) == 0;
}

TEST(ParquetCompatTest, MapWrittenByDuckDB) {
  const std::string missing = DuckDBMissing();
  if (!missing.empty()) {
    GTEST_SKIP() << missing;
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("fw_compat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "map.parquet").string();
  std::string out;
  ASSERT_TRUE(
      RunDuckDB("COPY (SELECT * FROM (VALUES (1, MAP {'a': 1, 'b': 2}), (2, NULL), (3, MAP {}), "
                "(4, MAP {'c': NULL})) t(id, m) ORDER BY id) TO '" +
                    file + "' (FORMAT parquet)",
                &out))
      << out;
  auto r = ParquetReader::Open(file);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)->fields().size(), 2u);
  EXPECT_EQ(FieldTypeName((*r)->fields()[1]), "list<struct<key: string, value: int32>>");
  ReadOptions o;
  o.threads = 1;
  auto a = (*r)->ReadAll(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Render((*a)[0]), "[1, 2, 3, 4]");
  EXPECT_EQ(Render((*a)[1]), R"([[{"a", 1}, {"b", 2}], null, [], [{"c", null}]])");
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------
// 3. INT96 timestamps.

std::string Int96(int64_t nanos_of_day, int32_t julian_day) {
  std::string s(12, '\0');
  std::memcpy(s.data(), &nanos_of_day, 8);
  std::memcpy(s.data() + 8, &julian_day, 4);
  return s;
}

TEST(ParquetCompatTest, Int96IsTimestampNanos) {
  constexpr int64_t kNs = 1000000000;
  const int64_t noon = (12 * 3600 + 34 * 60 + 56) * kNs + 123456789;
  // 1970-01-01, 2000-01-01T12:34:56.123456789, null,
  // 1969-12-31T23:59:59.5, 1900-01-01
  const std::string values = Int96(0, 2440588) + Int96(noon, 2451545) +
                             Int96(86399 * kNs + kNs / 2, 2440587) + Int96(0, 2415021);
  Chunk c{{"t"}, PT::kInt96, 5, {DataV1(5, Encoding::kPlain, Levels({1, 1, 0, 1, 1}, 1) + values)}};
  const std::string f = Assemble({Root(1), Leaf("t", R::kOptional, PT::kInt96)}, {{c}}, {5});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->fields()[0].type.kind, ValueKind::kTimestamp);
  EXPECT_EQ((*r)->fields()[0].type.unit, TimeUnit::kNanos);
  auto a = ReadBytes(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Render((*a)[0]), "[0, " + std::to_string(int64_t{10957} * 86400 * kNs + noon) +
                                 ", null, -500000000, " +
                                 std::to_string(int64_t{-25567} * 86400 * kNs) + "]");
}

// ---------------------------------------------------------------------------
// 4. Codecs, page versions, encodings, logical types.

struct CodecCase {
  const char* name;
  CompressionCodec codec;
  Lz4Form form;
};

class CodecTest : public ::testing::TestWithParam<CodecCase> {};

TEST_P(CodecTest, DictionaryAndPlainPagesDecompress) {
  const CodecCase& p = GetParam();
  // s: optional string, dictionary of 3 words, 300 rows (every 7th null),
  // two data pages; v: required int64 PLAIN, 300 rows.
  const std::vector<std::string> words = {"alpha", "beta", "gamma"};
  std::vector<uint32_t> def, idx;
  std::vector<int64_t> v;
  std::string expect_s = "[", expect_v = "[";
  for (int i = 0; i < 300; ++i) {
    const bool valid = i % 7 != 3;
    def.push_back(valid ? 1 : 0);
    if (valid) idx.push_back(static_cast<uint32_t>(i % 3));
    v.push_back(int64_t{i} * 1000003 - 5);
    expect_s += (i ? ", " : "") + (valid ? "\"" + words[i % 3] + "\"" : std::string("null"));
    expect_v += (i ? ", " : "") + std::to_string(v.back());
  }
  expect_s += "]";
  expect_v += "]";
  // Split at row 150 (the dictionary indices counted per page).
  const std::vector<uint32_t> def1(def.begin(), def.begin() + 150),
      def2(def.begin() + 150, def.end());
  size_t present1 = 0;
  for (uint32_t d : def1) present1 += d;
  const std::vector<uint32_t> idx1(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(present1)),
      idx2(idx.begin() + static_cast<ptrdiff_t>(present1), idx.end());
  Chunk s{{"s"},
          PT::kByteArray,
          300,
          {Dict(3, PlainBytes(words), p.codec, p.form),
           DataV1(150, Encoding::kRleDictionary, Levels(def1, 1) + DictIndices(idx1, 2), p.codec,
                  p.form),
           DataV1(150, Encoding::kRleDictionary, Levels(def2, 1) + DictIndices(idx2, 2), p.codec,
                  p.form)},
          p.codec};
  Chunk vc{
      {"v"}, PT::kInt64, 300, {DataV1(300, Encoding::kPlain, Plain(v), p.codec, p.form)}, p.codec};
  const std::string f = Assemble({Root(2), Leaf("s", R::kOptional, PT::kByteArray, Lt(K::kString)),
                                  Leaf("v", R::kRequired, PT::kInt64)},
                                 {{s, vc}}, {300});
  EXPECT_EQ(ReadRendered(f), (std::vector<std::string>{expect_s, expect_v}));
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CodecTest,
    ::testing::Values(CodecCase{"Lz4Hadoop", CompressionCodec::kLz4, Lz4Form::kHadoop},
                      CodecCase{"Lz4BareBlock", CompressionCodec::kLz4, Lz4Form::kBare},
                      CodecCase{"Lz4Raw", CompressionCodec::kLz4Raw, Lz4Form::kHadoop},
                      CodecCase{"Brotli", CompressionCodec::kBrotli, Lz4Form::kHadoop},
                      CodecCase{"Gzip", CompressionCodec::kGzip, Lz4Form::kHadoop},
                      CodecCase{"Snappy", CompressionCodec::kSnappy, Lz4Form::kHadoop},
                      CodecCase{"Zstd", CompressionCodec::kZstd, Lz4Form::kHadoop}),
    [](const ::testing::TestParamInfo<CodecCase>& i) { return std::string(i.param.name); });

TEST(ParquetCompatTest, DataPageV2CompressedAndNot) {
  // x: optional int32 under ZSTD in two v2 pages, the first with
  // is_compressed = false; rows 1, null, 3 | null, 5, 6.
  Chunk x{{"x"},
          PT::kInt32,
          6,
          {DataV2(3, 1, 3, Encoding::kPlain, "", RleNoPrefix({1, 0, 1}, 1), Plain<int32_t>({1, 3}),
                  CompressionCodec::kZstd, false),
           DataV2(3, 1, 3, Encoding::kPlain, "", RleNoPrefix({0, 1, 1}, 1), Plain<int32_t>({5, 6}),
                  CompressionCodec::kZstd, true)},
          CompressionCodec::kZstd};
  // a: standard list of optional int32, one compressed v2 page with
  // repetition levels: [1, 2], null, [], [3, null], [4], [] .
  Chunk a{{"a", "list", "element"},
          PT::kInt32,
          8,
          {DataV2(8, 4, 6, Encoding::kPlain, RleNoPrefix({0, 1, 0, 0, 0, 1, 0, 0}, 1),
                  RleNoPrefix({3, 3, 0, 1, 3, 2, 3, 1}, 3), Plain<int32_t>({1, 2, 3, 4}),
                  CompressionCodec::kZstd, true)},
          CompressionCodec::kZstd};
  const std::string f =
      Assemble({Root(2), Leaf("x", R::kOptional, PT::kInt32), Group("a", R::kOptional, 1, K::kList),
                Group("list", R::kRepeated, 1), Leaf("element", R::kOptional, PT::kInt32)},
               {{x, a}}, {6});
  EXPECT_EQ(ReadRendered(f), (std::vector<std::string>{"[1, null, 3, null, 5, 6]",
                                                       "[[1, 2], null, [], [3, null], [4], []]"}));
}

TEST(ParquetCompatTest, DataPageV2UncompressedCodec) {
  Chunk x{{"x"},
          PT::kInt64,
          2,
          {DataV2(2, 0, 2, Encoding::kPlain, "", "", Plain<int64_t>({-7, 7}),
                  CompressionCodec::kUncompressed, true)}};
  const std::string f = Assemble({Root(1), Leaf("x", R::kRequired, PT::kInt64)}, {{x}}, {2});
  EXPECT_EQ(ReadRendered(f), std::vector<std::string>{"[-7, 7]"});
}

TEST(ParquetCompatTest, DeltaByteArrayOnFixedLenByteArray) {
  ByteArrays b;
  for (const char* s : {"abcd", "abce", "abzz", "xyzw"}) b.Append(s, 4);
  std::string enc;
  EncodeDeltaByteArray(b, &enc);
  Chunk c{{"f"},
          PT::kFixedLenByteArray,
          5,
          {DataV1(5, Encoding::kDeltaByteArray, Levels({1, 1, 0, 1, 1}, 1) + enc)}};
  const std::string f = Assemble(
      {Root(1), Leaf("f", R::kOptional, PT::kFixedLenByteArray, {}, std::nullopt, 4)}, {{c}}, {5});
  EXPECT_EQ(ReadRendered(f),
            std::vector<std::string>{"[0x61626364, 0x61626365, null, 0x61627a7a, 0x78797a77]"});
}

TEST(ParquetCompatTest, ByteStreamSplitOnIntsAndFixedLen) {
  auto bss = [](const std::string& plain, size_t width) {
    std::string out;
    EncodeByteStreamSplit(reinterpret_cast<const uint8_t*>(plain.data()), width,
                          static_cast<int64_t>(plain.size() / width), &out);
    return out;
  };
  Chunk i32{{"i"},
            PT::kInt32,
            4,
            {DataV1(4, Encoding::kByteStreamSplit,
                    Levels({1, 0, 1, 1}, 1) +
                        bss(Plain<int32_t>({-1, 0x12345678, -2147483647 - 1}), 4))}};
  Chunk i64{
      {"l"},
      PT::kInt64,
      4,
      {DataV1(
          4, Encoding::kByteStreamSplit,
          bss(Plain<int64_t>({1, -1, int64_t{0x0102030405060708}, -9223372036854775807 - 1}), 8))}};
  Chunk fl{{"f"},
           PT::kFixedLenByteArray,
           4,
           {DataV1(4, Encoding::kByteStreamSplit, Levels({1, 1, 1, 0}, 1) + bss("abcdefxyz", 3))}};
  const std::string f =
      Assemble({Root(3), Leaf("i", R::kOptional, PT::kInt32), Leaf("l", R::kRequired, PT::kInt64),
                Leaf("f", R::kOptional, PT::kFixedLenByteArray, {}, std::nullopt, 3)},
               {{i32, i64, fl}}, {4});
  EXPECT_EQ(ReadRendered(f), (std::vector<std::string>{
                                 "[-1, null, 305419896, -2147483648]",
                                 "[1, -1, 72623859790382856, -9223372036854775808]",
                                 "[0x616263, 0x646566, 0x78797a, null]",
                             }));
}

TEST(ParquetCompatTest, RleEncodedBooleans) {
  std::vector<uint32_t> bits;
  std::string expect = "[";
  for (int i = 0; i < 20; ++i) {
    const bool v = i < 10 || i % 3 == 0;  // an RLE run, then bit-packed
    bits.push_back(v);
    expect += std::string(i ? ", " : "") + (v ? "true" : "false");
  }
  expect += "]";
  std::string rle;
  EncodeRleBitPacked(bits.data(), 20, 1, &rle);
  Chunk b{{"b"},
          PT::kBoolean,
          20,
          {DataV1(20, Encoding::kRle, U32Le(static_cast<uint32_t>(rle.size())) + rle)}};
  std::string rle2;
  const std::vector<uint32_t> two = {1, 0};
  EncodeRleBitPacked(two.data(), 2, 1, &rle2);
  // the optional column: true, null, false, then nulls
  std::vector<uint32_t> def(20, 0);
  def[0] = def[2] = 1;
  Chunk o{{"o"},
          PT::kBoolean,
          20,
          {DataV1(20, Encoding::kRle,
                  Levels(def, 1) + U32Le(static_cast<uint32_t>(rle2.size())) + rle2)}};
  const std::string f = Assemble(
      {Root(2), Leaf("b", R::kRequired, PT::kBoolean), Leaf("o", R::kOptional, PT::kBoolean)},
      {{b, o}}, {20});
  const auto got = ReadRendered(f);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], expect);
  EXPECT_EQ(got[1].substr(0, 24), "[true, null, false, null");
}

TEST(ParquetCompatTest, LegacyBitPackedLevels) {
  // optional int32 with BIT_PACKED definition levels 1 0 1 1 0 (MSB first:
  // 0b10110000) and no length prefix.
  Chunk x{{"x"},
          PT::kInt32,
          5,
          {DataV1(5, Encoding::kPlain,
                  std::string(1, static_cast<char>(0xB0)) + Plain<int32_t>({7, 8, 9}),
                  CompressionCodec::kUncompressed, Lz4Form::kHadoop, Encoding::kBitPacked)}};
  // A legacy two-level list with BIT_PACKED repetition (1 bit) and
  // definition (2 bits) levels: [1, 2], null, [], [3].
  // rep 0 1 0 0 0 -> 0b01000000; def 2 2 0 1 2 -> 10 10 00 01 | 10 -> 0xA1 0x80
  Chunk l{{"a", "array"},
          PT::kInt32,
          5,
          {DataV1(5, Encoding::kPlain, std::string("\x40\xA1\x80", 3) + Plain<int32_t>({1, 2, 3}),
                  CompressionCodec::kUncompressed, Lz4Form::kHadoop, Encoding::kBitPacked)}};
  // The list has 4 rows, x has 5: two row groups would be needed; use
  // separate files.
  const std::string f1 = Assemble({Root(1), Leaf("x", R::kOptional, PT::kInt32)}, {{x}}, {5});
  EXPECT_EQ(ReadRendered(f1), std::vector<std::string>{"[7, null, 8, 9, null]"});
  const std::string f2 = Assemble(
      {Root(1), Group("a", R::kOptional, 1, K::kList), Leaf("array", R::kRepeated, PT::kInt32)},
      {{l}}, {4});
  EXPECT_EQ(ReadRendered(f2), std::vector<std::string>{"[[1, 2], null, [], [3]]"});
}

TEST(ParquetCompatTest, Float16AndUuid) {
  // FLOAT16 1.0 (0x3c00) and -2.0 (0xc000), stored little-endian.
  Chunk h{{"h"},
          PT::kFixedLenByteArray,
          3,
          {DataV1(3, Encoding::kPlain, Levels({1, 0, 1}, 1) + std::string("\x00\x3c\x00\xc0", 4))}};
  std::string uuid;
  for (int i = 0; i < 16; ++i) uuid += static_cast<char>(0xa0 + i);
  Chunk u{{"u"},
          PT::kFixedLenByteArray,
          3,
          {DataV1(3, Encoding::kPlain, Levels({1, 1, 0}, 1) + uuid + uuid)}};
  const std::string f = Assemble(
      {Root(2), Leaf("h", R::kOptional, PT::kFixedLenByteArray, Lt(K::kFloat16), std::nullopt, 2),
       Leaf("u", R::kOptional, PT::kFixedLenByteArray, Lt(K::kUuid), std::nullopt, 16)},
      {{h, u}}, {3});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->fields()[0].type.kind, ValueKind::kFloat16);
  EXPECT_EQ((*r)->fields()[1].type.kind, ValueKind::kFixedBinary);
  EXPECT_EQ((*r)->fields()[1].type.width, 16);
  auto a = ReadBytes(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Render((*a)[0]), "[0x003c, null, 0x00c0]");
  const std::string hex = "0xa0a1a2a3a4a5a6a7a8a9aaabacadaeaf";
  EXPECT_EQ(Render((*a)[1]), "[" + hex + ", " + hex + ", null]");
}

TEST(ParquetCompatTest, SmallAndUnsignedIntegersOnInt32) {
  auto col = [](const char* name, std::vector<int32_t> v) {
    return Chunk{{name},
                 PT::kInt32,
                 static_cast<int64_t>(v.size()),
                 {DataV1(static_cast<int32_t>(v.size()), Encoding::kPlain, Plain(v))}};
  };
  const std::string f = Assemble(
      {Root(7), Leaf("i8", R::kRequired, PT::kInt32, IntLt(8, true)),
       Leaf("u8", R::kRequired, PT::kInt32, IntLt(8, false)),
       Leaf("i16", R::kRequired, PT::kInt32, IntLt(16, true)),
       Leaf("u16", R::kRequired, PT::kInt32, IntLt(16, false)),
       Leaf("u32", R::kRequired, PT::kInt32, IntLt(32, false)),
       Leaf("legacy_u8", R::kRequired, PT::kInt32, {}, ConvertedType::kUint8),
       Leaf("legacy_i16", R::kRequired, PT::kInt32, {}, ConvertedType::kInt16)},
      {{col("i8", {-128, 127, -1}), col("u8", {0, 255, 128}), col("i16", {-32768, 32767, -2}),
        col("u16", {0, 65535, 40000}), col("u32", {0, -1, -2147483647 - 1}),
        col("legacy_u8", {200, 1, 0}), col("legacy_i16", {-300, 300, 0})}},
      {3});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> types;
  for (const Field& fl : (*r)->fields()) types.push_back(FieldTypeName(fl));
  EXPECT_EQ(types, (std::vector<std::string>{"int8", "uint8", "int16", "uint16", "uint32", "uint8",
                                             "int16"}));
  EXPECT_EQ(ReadRendered(f),
            (std::vector<std::string>{"[-128, 127, -1]", "[0, 255, 128]", "[-32768, 32767, -2]",
                                      "[0, 65535, 40000]", "[0, 4294967295, 2147483648]",
                                      "[200, 1, 0]", "[-300, 300, 0]"}));
}

// Big-endian two's complement of v in n bytes.
std::string BigEndian(__int128 v, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[n - 1 - i] = static_cast<char>(static_cast<uint8_t>(v >> (8 * std::min<size_t>(i, 15))));
  return s;
}

TEST(ParquetCompatTest, DecimalsOnEveryPhysicalType) {
  const __int128 big = -static_cast<__int128>(1234567890123456789LL) * 1000 - 12;  // 22 digits
  const __int128 p38 =
      static_cast<__int128>(-99999999999999999LL) * 1000000000000000000LL * 100;  // 37 digits
  Chunk i32{
      {"d32"},
      PT::kInt32,
      3,
      {DataV1(3, Encoding::kPlain, Levels({1, 0, 1}, 1) + Plain<int32_t>({-12345, 999999999}))}};
  Chunk i64{
      {"d64"},
      PT::kInt64,
      3,
      {DataV1(3, Encoding::kPlain, Levels({1, 1, 0}, 1) + Plain<int64_t>({-123456789012LL, 1}))}};
  Chunk f5{{"f5"},
           PT::kFixedLenByteArray,
           3,
           {DataV1(3, Encoding::kPlain,
                   Levels({1, 1, 1}, 1) + BigEndian(-1, 5) + BigEndian(-549755813888LL, 5) +
                       BigEndian(12345, 5))}};
  Chunk f16{
      {"f16"},
      PT::kFixedLenByteArray,
      3,
      {DataV1(3, Encoding::kPlain, Levels({1, 1, 0}, 1) + BigEndian(p38, 16) + BigEndian(-1, 16))}};
  Chunk ba{{"ba"},
           PT::kByteArray,
           3,
           {DataV1(3, Encoding::kPlain,
                   Levels({1, 1, 1}, 1) + PlainBytes({BigEndian(big, 10), BigEndian(-5, 1),
                                                      std::string("\x00\x80", 2)}))}};
  const std::string f = Assemble(
      {Root(5), Leaf("d32", R::kOptional, PT::kInt32, DecimalLt(9, 2)),
       Leaf("d64", R::kOptional, PT::kInt64, DecimalLt(18, 4)),
       Leaf("f5", R::kOptional, PT::kFixedLenByteArray, DecimalLt(11, 2), std::nullopt, 5),
       Leaf("f16", R::kOptional, PT::kFixedLenByteArray, DecimalLt(38, 0), std::nullopt, 16),
       Leaf("ba", R::kOptional, PT::kByteArray, {}, ConvertedType::kDecimal)},
      {{i32, i64, f5, f16, ba}}, {3}, [](FileMetaData& m) {
        m.schema[5].precision = 22;  // legacy DECIMAL: precision/scale in the element
        m.schema[5].scale = 3;
      });
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> types;
  std::vector<int> widths;
  for (const Field& fl : (*r)->fields()) {
    types.push_back(FieldTypeName(fl));
    widths.push_back(fl.type.width);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"decimal(9,2)", "decimal(18,4)", "decimal(11,2)",
                                             "decimal(38,0)", "decimal(22,3)"}));
  EXPECT_EQ(widths, (std::vector<int>{4, 8, 8, 16, 16}));
  EXPECT_EQ(ReadRendered(f), (std::vector<std::string>{
                                 "[-12345, null, 999999999]",
                                 "[-123456789012, 1, null]",
                                 "[-1, -549755813888, 12345]",
                                 "[" + Int128String(p38) + ", -1, null]",
                                 "[" + Int128String(big) + ", -5, 128]",
                             }));
}

TEST(ParquetCompatTest, TimeInEveryUnit) {
  Chunk ms{{"ms"}, PT::kInt32, 2, {DataV1(2, Encoding::kPlain, Plain<int32_t>({3723004, 0}))}};
  Chunk us{{"us"},
           PT::kInt64,
           2,
           {DataV1(2, Encoding::kPlain, Plain<int64_t>({3723004005LL, 86399999999LL}))}};
  Chunk ns{
      {"ns"}, PT::kInt64, 2, {DataV1(2, Encoding::kPlain, Plain<int64_t>({3723004005006LL, 1}))}};
  Chunk legacy{{"legacy"}, PT::kInt32, 2, {DataV1(2, Encoding::kPlain, Plain<int32_t>({1, 2}))}};
  const std::string f =
      Assemble({Root(4), Leaf("ms", R::kRequired, PT::kInt32, TimeLt(TimeUnit::kMillis)),
                Leaf("us", R::kRequired, PT::kInt64, TimeLt(TimeUnit::kMicros)),
                Leaf("ns", R::kRequired, PT::kInt64, TimeLt(TimeUnit::kNanos)),
                Leaf("legacy", R::kRequired, PT::kInt32, {}, ConvertedType::kTimeMillis)},
               {{ms, us, ns, legacy}}, {2});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& fs = (*r)->fields();
  EXPECT_EQ(fs[0].type.kind, ValueKind::kTime32);
  EXPECT_EQ(fs[0].type.unit, TimeUnit::kMillis);
  EXPECT_EQ(fs[1].type.kind, ValueKind::kTime64);
  EXPECT_EQ(fs[1].type.unit, TimeUnit::kMicros);
  EXPECT_EQ(fs[2].type.kind, ValueKind::kTime64);
  EXPECT_EQ(fs[2].type.unit, TimeUnit::kNanos);
  EXPECT_EQ(fs[3].type.kind, ValueKind::kTime32);
  EXPECT_EQ(ReadRendered(f), (std::vector<std::string>{"[3723004, 0]", "[3723004005, 86399999999]",
                                                       "[3723004005006, 1]", "[1, 2]"}));
}

TEST(ParquetCompatTest, UnknownLogicalTypeIsAllNull) {
  Chunk c{{"n"}, PT::kInt32, 3, {DataV1(3, Encoding::kPlain, Levels({0, 0, 0}, 1))}};
  Chunk id{{"id"}, PT::kInt32, 3, {DataV1(3, Encoding::kPlain, Plain<int32_t>({1, 2, 3}))}};
  const std::string f = Assemble({Root(2), Leaf("n", R::kOptional, PT::kInt32, Lt(K::kUnknown)),
                                  Leaf("id", R::kRequired, PT::kInt32)},
                                 {{c, id}}, {3});
  auto r = OpenBytes(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->fields()[0].type.kind, ValueKind::kNull);
  auto a = ReadBytes(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)[0].length, 3);
  EXPECT_EQ((*a)[0].null_count, 3);
  EXPECT_EQ(Render((*a)[0]), "[null, null, null]");
  EXPECT_EQ(Render((*a)[1]), "[1, 2, 3]");
}

// ---------------------------------------------------------------------------
// 5. Bad input: errors naming the file, row group, column and page.

// optional group s { optional int32 x; } (column path s.x, max def 2).
const std::vector<SchemaElement> kNested = {Root(1), Group("s", R::kOptional, 1),
                                            Leaf("x", R::kOptional, PT::kInt32)};

std::string NestedFile(std::vector<Page> pages, int64_t num_values, int64_t rows,
                       CompressionCodec codec = CompressionCodec::kUncompressed,
                       const std::function<void(FileMetaData&)>& edit = {}) {
  return Assemble(kNested, {{Chunk{{"s", "x"}, PT::kInt32, num_values, std::move(pages), codec}}},
                  {rows}, edit);
}

// rows {1}, {null}, null, {4}
Page GoodNestedPage() {
  return DataV1(4, Encoding::kPlain, Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({1, 4}));
}

// The page context of an error: "page N at byte B: ". Tests name the page by
// its byte offset B; the index N is checked by PageIndexInErrors below.
std::string AtByte(size_t offset) { return " at byte " + std::to_string(offset) + ": "; }
// The first page of NestedFile; the page after one Dict(2, ...) page.
const std::string kFirstPage = AtByte(4);
std::string SecondPage() { return AtByte(4 + Dict(2, Plain<int32_t>({10, 20})).bytes.size()); }

TEST(ParquetCompatTest, GoodNestedFileReads) {
  EXPECT_EQ(ReadRendered(NestedFile({GoodNestedPage()}, 4, 4)),
            std::vector<std::string>{"[{1}, {null}, null, {4}]"});
}

TEST(ParquetCompatTest, TruncatedFileIsAnError) {
  const std::string good = NestedFile({GoodNestedPage()}, 4, 4);
  for (size_t len : {size_t{0}, size_t{3}, size_t{4}, size_t{11}, size_t{12}, good.size() / 2,
                     good.size() - 9, good.size() - 8, good.size() - 5, good.size() - 1}) {
    SCOPED_TRACE(len);
    ExpectReadError(good.substr(0, len), {kName});
  }
}

TEST(ParquetCompatTest, WrongMagicIsAnError) {
  std::string head = NestedFile({GoodNestedPage()}, 4, 4);
  head[0] = 'Q';
  ExpectReadError(head, {kName, "magic", "start"});
  std::string tail = NestedFile({GoodNestedPage()}, 4, 4);
  tail[tail.size() - 1] = '2';
  ExpectReadError(tail, {kName, "magic", "end"});
}

TEST(ParquetCompatTest, FooterLengthBeyondTheFile) {
  std::string f = NestedFile({GoodNestedPage()}, 4, 4);
  const std::string len = U32Le(0x7fffffff);
  f.replace(f.size() - 8, 4, len);
  ExpectReadError(f, {kName, "footer length 2147483647"});
  f.replace(f.size() - 8, 4, U32Le(static_cast<uint32_t>(f.size() - 11)));
  ExpectReadError(f, {kName, "footer"});
}

TEST(ParquetCompatTest, LyingThriftListSizeInTheFooter) {
  // FileMetaData { 1: version = 1, 2: schema = list<struct> of 2^32-1 }
  // with nothing after the list header.
  const std::string footer = std::string("\x15\x02\x19\xfc\xff\xff\xff\xff\x0f", 9);
  const std::string f = "PAR1" + footer + U32Le(static_cast<uint32_t>(footer.size())) + "PAR1";
  ExpectReadError(f, {kName, "footer"});
  // The same lie inside a real footer: the row group's column list.
  std::string good = NestedFile({GoodNestedPage()}, 4, 4);
  const uint32_t flen = [&] {
    uint32_t l;
    std::memcpy(&l, good.data() + good.size() - 8, 4);
    return l;
  }();
  const size_t fstart = good.size() - 8 - flen;
  // Every list header of one struct element (0x1c) becomes "many".
  std::string damaged = good;
  size_t hits = 0;
  for (size_t i = fstart; i < good.size() - 8; ++i) {
    if (static_cast<uint8_t>(good[i]) == 0x1c) {
      damaged = good.substr(0, i) + std::string("\xfc\xff\xff\xff\x7f", 5) +
                good.substr(i + 1, good.size() - 8 - i - 1);
      const std::string footer2 = damaged.substr(fstart);
      damaged += U32Le(static_cast<uint32_t>(footer2.size())) + "PAR1";
      ++hits;
      SCOPED_TRACE(i);
      ExpectReadError(damaged, {kName, "footer"});
    }
  }
  EXPECT_GT(hits, 0u);
}

TEST(ParquetCompatTest, PageBeyondTheColumnChunk) {
  PageHeader h;
  h.type = PageType::kDataPage;
  const std::string body = Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({1, 4});
  h.uncompressed_page_size = static_cast<int32_t>(body.size());
  h.compressed_page_size = static_cast<int32_t>(body.size()) + 100;
  h.data_page_header =
      DataPageHeader{4, Encoding::kPlain, Encoding::kRle, Encoding::kRle, std::nullopt};
  ExpectReadError(NestedFile({RawPage(h, body)}, 4, 4),
                  {kName, "row group 0", "column s.x", "page 0", "past"});
}

TEST(ParquetCompatTest, ColumnChunkBeyondTheFile) {
  ExpectReadError(NestedFile({GoodNestedPage()}, 4, 4, CompressionCodec::kUncompressed,
                             [](FileMetaData& m) {
                               m.row_groups[0].columns[0].meta_data->total_compressed_size = 1
                                                                                             << 20;
                             }),
                  {kName, "row group 0", "column s.x", "outside"});
  ExpectReadError(NestedFile({GoodNestedPage()}, 4, 4, CompressionCodec::kUncompressed,
                             [](FileMetaData& m) {
                               m.row_groups[0].columns[0].meta_data->data_page_offset = 1 << 30;
                             }),
                  {kName, "row group 0", "column s.x", "outside"});
}

TEST(ParquetCompatTest, InvalidUtf8InAStringColumn) {
  Chunk c{{"name"},
          PT::kByteArray,
          3,
          {DataV1(3, Encoding::kPlain,
                  Levels({1, 1, 0}, 1) + PlainBytes({"ok", std::string("b\xc3\x28", 3)}))}};
  const std::string f = Assemble(
      {Root(1), Leaf("name", R::kOptional, PT::kByteArray, {}, ConvertedType::kUtf8)}, {{c}}, {3});
  ExpectReadError(f, {kName, "row group 0", "column name", "UTF-8"}, absl::StatusCode::kDataLoss);
}

TEST(ParquetCompatTest, DictionaryIndexOutOfRange) {
  ExpectReadError(
      NestedFile(
          {Dict(2, Plain<int32_t>({10, 20})),
           DataV1(4, Encoding::kRleDictionary, Levels({2, 1, 0, 2}, 2) + DictIndices({1, 2}, 2))},
          4, 4),
      {kName, "row group 0", "column s.x", SecondPage(), "dictionary index 2", "out of range"});
}

TEST(ParquetCompatTest, DictionaryBitWidthAbove32) {
  ExpectReadError(
      NestedFile({Dict(2, Plain<int32_t>({10, 20})),
                  DataV1(4, Encoding::kRleDictionary,
                         Levels({2, 1, 0, 2}, 2) + std::string("\x21\x04\x00\x00\x00\x00", 6))},
                 4, 4),
      {kName, "row group 0", "column s.x", SecondPage(), "bit width 33"});
}

TEST(ParquetCompatTest, DeltaBinaryPackedMiniblockWidthAbove64) {
  // block 128, 4 miniblocks, 4 values, first value 0; block: min delta 0,
  // widths 65 0 0 0.
  const std::string delta =
      std::string("\x80\x01\x04\x04\x00\x00\x41\x00\x00\x00", 10) + std::string(64, '\0');
  ExpectReadError(
      NestedFile({DataV1(4, Encoding::kDeltaBinaryPacked, Levels({2, 2, 2, 2}, 2) + delta)}, 4, 4),
      {kName, "row group 0", "column s.x", kFirstPage, "65"});
}

TEST(ParquetCompatTest, LevelAboveTheMaximum) {
  // max definition level 2 (2 bits): an RLE run of value 3.
  const std::string def = std::string("\x08\x03", 2);
  ExpectReadError(
      NestedFile({DataV1(4, Encoding::kPlain, U32Le(2) + def + Plain<int32_t>({1, 2, 3, 4}))}, 4,
                 4),
      {kName, "row group 0", "column s.x", kFirstPage, "definition levels",
       "exceeds the maximum 2"});
}

TEST(ParquetCompatTest, FewerValuesThanTheLevelsNeed) {
  ExpectReadError(
      NestedFile({DataV1(4, Encoding::kPlain, Levels({2, 2, 2, 2}, 2) + Plain<int32_t>({1, 2}))}, 4,
                 4),
      {kName, "row group 0", "column s.x", kFirstPage, "PLAIN"});
  // The same for strings.
  Chunk c{{"b"},
          PT::kByteArray,
          3,
          {DataV1(3, Encoding::kPlain, Levels({1, 1, 1}, 1) + PlainBytes({"a", "b"}))}};
  ExpectReadError(Assemble({Root(1), Leaf("b", R::kOptional, PT::kByteArray)}, {{c}}, {3}),
                  {kName, "row group 0", "column b", kFirstPage});
}

TEST(ParquetCompatTest, DataPageClaimsMoreValuesThanTheChunk) {
  ExpectReadError(NestedFile({GoodNestedPage()}, 3, 3),
                  {kName, "row group 0", "column s.x", kFirstPage, "more than"});
}

TEST(ParquetCompatTest, ChunkEndsBeforeItsValues) {
  ExpectReadError(NestedFile({GoodNestedPage()}, 8, 8),
                  {kName, "row group 0", "column s.x", "ends after 4"});
}

TEST(ParquetCompatTest, SecondDictionaryPage) {
  ExpectReadError(NestedFile({Dict(2, Plain<int32_t>({10, 20})), Dict(2, Plain<int32_t>({10, 20})),
                              DataV1(4, Encoding::kRleDictionary,
                                     Levels({2, 1, 0, 2}, 2) + DictIndices({1, 0}, 1))},
                             4, 4),
                  {kName, "row group 0", "column s.x", SecondPage(), "second dictionary"});
}

TEST(ParquetCompatTest, DictionaryEncodedPageWithoutDictionary) {
  ExpectReadError(NestedFile({DataV1(4, Encoding::kRleDictionary,
                                     Levels({2, 1, 0, 2}, 2) + DictIndices({1, 0}, 1))},
                             4, 4),
                  {kName, "row group 0", "column s.x", kFirstPage, "without a dictionary page"});
}

TEST(ParquetCompatTest, UncompressedPageSizeAboveOneGiB) {
  for (bool v2 : {false, true}) {
    SCOPED_TRACE(v2);
    PageHeader h;
    const std::string levels = Levels({2, 1, 0, 2}, 2);
    const std::string body = levels + Plain<int32_t>({1, 4});
    h.uncompressed_page_size = (1 << 30) + 1;
    h.compressed_page_size = static_cast<int32_t>(body.size());
    if (v2) {
      h.type = PageType::kDataPageV2;
      DataPageHeaderV2 d;
      d.num_values = 4;
      d.num_nulls = 2;
      d.num_rows = 4;
      d.definition_levels_byte_length = static_cast<int32_t>(levels.size());
      h.data_page_header_v2 = d;
    } else {
      h.type = PageType::kDataPage;
      h.data_page_header =
          DataPageHeader{4, Encoding::kPlain, Encoding::kRle, Encoding::kRle, std::nullopt};
    }
    ExpectReadError(NestedFile({RawPage(h, body)}, 4, 4, CompressionCodec::kSnappy),
                    {kName, "row group 0", "column s.x", kFirstPage, "1073741825"});
  }
  // A dictionary page the same.
  PageHeader d;
  d.type = PageType::kDictionaryPage;
  d.uncompressed_page_size = (1 << 30) + 1;
  d.compressed_page_size = 8;
  d.dictionary_page_header = DictionaryPageHeader{2, Encoding::kPlain, std::nullopt};
  ExpectReadError(NestedFile({RawPage(d, Plain<int32_t>({1, 2})), GoodNestedPage()}, 4, 4,
                             CompressionCodec::kSnappy),
                  {kName, "row group 0", "column s.x", kFirstPage, "1073741825"});
}

TEST(ParquetCompatTest, LzoIsUnimplemented) {
  const std::string raw = Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({1, 4});
  PageHeader h;
  h.type = PageType::kDataPage;
  h.uncompressed_page_size = static_cast<int32_t>(raw.size());
  h.compressed_page_size = static_cast<int32_t>(raw.size());
  h.data_page_header =
      DataPageHeader{4, Encoding::kPlain, Encoding::kRle, Encoding::kRle, std::nullopt};
  ExpectReadError(NestedFile({RawPage(h, raw)}, 4, 4, CompressionCodec::kLzo),
                  {kName, "row group 0", "column s.x", kFirstPage, "LZO"},
                  absl::StatusCode::kUnimplemented);
}

// Regression: ReadLeaf once advanced its page counter before decoding the
// page, so an error in a page's header said "page 0" and one in its body
// "page 1".
TEST(ParquetCompatTest, PageIndexInErrorsIsTheSameForHeaderAndBody) {
  // Header error in the first page: "page 0".
  PageHeader h;
  h.type = PageType::kDataPage;
  const std::string body = Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({1, 4});
  h.uncompressed_page_size = static_cast<int32_t>(body.size());
  h.compressed_page_size = static_cast<int32_t>(body.size()) + 100;
  h.data_page_header =
      DataPageHeader{4, Encoding::kPlain, Encoding::kRle, Encoding::kRle, std::nullopt};
  ExpectReadError(NestedFile({RawPage(h, body)}, 4, 4), {"page 0 at byte 4: "});
  // Body error in the first page: also "page 0".
  ExpectReadError(
      NestedFile({DataV1(4, Encoding::kPlain, Levels({2, 2, 2, 2}, 2) + Plain<int32_t>({1, 2}))}, 4,
                 4),
      {"page 0 at byte 4: "});
  // Body error in the second page: "page 1".
  ExpectReadError(NestedFile({Dict(2, Plain<int32_t>({10, 20})),
                              DataV1(4, Encoding::kRleDictionary,
                                     Levels({2, 1, 0, 2}, 2) + DictIndices({1, 2}, 2))},
                             4, 4),
                  {"page 1" + SecondPage()});
}

TEST(ParquetCompatTest, CorruptCompressedPageIsAnError) {
  for (CompressionCodec c :
       {CompressionCodec::kLz4, CompressionCodec::kLz4Raw, CompressionCodec::kGzip,
        CompressionCodec::kBrotli, CompressionCodec::kSnappy, CompressionCodec::kZstd}) {
    SCOPED_TRACE(static_cast<int>(c));
    const std::string raw = Levels({2, 1, 0, 2}, 2) + Plain<int32_t>({1, 4});
    PageHeader h;
    h.type = PageType::kDataPage;
    h.uncompressed_page_size = static_cast<int32_t>(raw.size());
    const std::string junk = "\xff\xfe\xfd\xfc\x01\x02\x03\x04\x05\x06\x07\x08";
    h.compressed_page_size = static_cast<int32_t>(junk.size());
    h.data_page_header =
        DataPageHeader{4, Encoding::kPlain, Encoding::kRle, Encoding::kRle, std::nullopt};
    ExpectReadError(NestedFile({RawPage(h, junk)}, 4, 4, c),
                    {kName, "row group 0", "column s.x", kFirstPage});
  }
}

}  // namespace
}  // namespace flywheel::interop::parquet

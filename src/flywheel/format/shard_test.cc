#include "flywheel/format/shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flywheel/base/checksum.h"
#include "flywheel/base/rng.h"
#include "flywheel/io/file_system.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::format {
namespace {

using ::testing::HasSubstr;

constexpr size_t kTrailerSize = 32;

// The expected contents of one column: the raw bytes of every row (fixed
// width: fixed_width() bytes; binary/string: the bytes; list: the packed
// elements) and its validity.
struct ColumnModel {
  Field field;
  std::vector<std::string> rows;
  std::vector<bool> valid;
};

size_t ElemSize(const DataType& t) {
  if (t.is_fixed_width()) return t.fixed_width();
  if (t.id == TypeId::kList) return ScalarSize(t.elem);
  return 1;
}

std::string RowBytes(const Column& c, int64_t i) {
  if (c.type.is_fixed_width()) {
    return std::string(reinterpret_cast<const char*>(c.FixedRow(i)), c.type.fixed_width());
  }
  const size_t esize = ElemSize(c.type);
  const int64_t* o = c.offsets_data();
  return std::string(reinterpret_cast<const char*>(c.values.data) + o[i] * esize,
                     static_cast<size_t>(o[i + 1] - o[i]) * esize);
}

// Rows [start, start+n) of the model as a column the writer accepts.
Column BuildColumn(const ColumnModel& m, int64_t start, int64_t n) {
  const DataType& t = m.field.type;
  Column c;
  c.type = t;
  c.length = n;
  std::string values;
  std::vector<int64_t> offsets{0};
  const size_t esize = ElemSize(t);
  for (int64_t i = start; i < start + n; ++i) {
    values += m.rows[static_cast<size_t>(i)];
    offsets.push_back(static_cast<int64_t>(values.size() / esize));
  }
  c.values = Buffer::FromString(std::move(values));
  if (t.is_variable_length()) c.offsets = Buffer::FromVector(std::move(offsets));
  if (m.field.nullable) {
    SetValidity(c, std::vector<bool>(m.valid.begin() + start, m.valid.begin() + start + n));
  }
  return c;
}

RecordBatch BuildBatch(const std::vector<ColumnModel>& models, int64_t start, int64_t n) {
  RecordBatch b;
  for (const ColumnModel& m : models) {
    b.schema.fields.push_back(m.field);
    b.columns.push_back(BuildColumn(m, start, n));
  }
  b.num_rows = n;
  return b;
}

Schema SchemaOf(const std::vector<ColumnModel>& models) {
  Schema s;
  for (const ColumnModel& m : models) s.fields.push_back(m.field);
  return s;
}

// Checks that `got` holds model rows `rows` exactly (bytes, validity, null count).
::testing::AssertionResult ColumnMatches(const Column& got, const ColumnModel& m,
                                         const std::vector<int64_t>& rows) {
  if (!(got.type == m.field.type)) {
    return ::testing::AssertionFailure() << "type " << got.type.ToString();
  }
  if (got.length != static_cast<int64_t>(rows.size())) {
    return ::testing::AssertionFailure() << "length " << got.length << ", want " << rows.size();
  }
  Status v = got.Validate(m.field.name);
  if (!v.ok()) return ::testing::AssertionFailure() << v;
  int64_t nulls = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = static_cast<size_t>(rows[i]);
    if (got.IsValid(static_cast<int64_t>(i)) != m.valid[r]) {
      return ::testing::AssertionFailure() << "validity of row " << i << " (model row " << r << ")";
    }
    nulls += !m.valid[r];
    if (RowBytes(got, static_cast<int64_t>(i)) != m.rows[r]) {
      return ::testing::AssertionFailure() << "bytes of row " << i << " (model row " << r << ")";
    }
  }
  if (got.null_count != nulls) {
    return ::testing::AssertionFailure() << "null_count " << got.null_count << ", want " << nulls;
  }
  return ::testing::AssertionSuccess();
}

std::vector<int64_t> Range(int64_t start, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

std::string RandomBytes(SplitMix64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng.Next());
  return s;
}

// One column of every type, nullable ones with nulls (scattered, clustered in
// a few pages, or none at all), deterministic in `seed`.
std::vector<ColumnModel> MakeModels(int64_t n, uint64_t seed) {
  SplitMix64 rng(seed);
  const char* kSchema =
      "b:bool, i8:int8, i16:int16?, i32:int32?, i64:int64, u8:uint8, u16:uint16, u32:uint32, "
      "u64:uint64, f16:float16, f32:float32?, f64:float64, emb:float32[16], img:uint8[4,4,3]?, "
      "s:string?, bin:binary, tok:list<int32>?, never_null:int64?";
  Schema schema = *Schema::Parse(kSchema);
  std::vector<ColumnModel> models;
  for (const Field& f : schema.fields) {
    ColumnModel m;
    m.field = f;
    for (int64_t i = 0; i < n; ++i) {
      const DataType& t = f.type;
      if (t.id == TypeId::kBool) {
        m.rows.push_back(std::string(1, static_cast<char>(rng.Uniform(2))));
      } else if (t.is_fixed_width()) {
        m.rows.push_back(RandomBytes(rng, t.fixed_width()));
      } else if (t.id == TypeId::kList) {
        m.rows.push_back(RandomBytes(rng, 4 * rng.Uniform(11)));
      } else if (t.id == TypeId::kString) {
        std::string s;
        const size_t len = rng.Uniform(41);
        for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>('a' + rng.Uniform(26)));
        m.rows.push_back(s);
      } else {
        m.rows.push_back(RandomBytes(rng, rng.Uniform(60)));
      }
      bool valid = true;
      if (f.nullable && f.name == "f32") {
        valid = !(i >= 300 && i < 310);  // nulls clustered: most pages have none
      } else if (f.nullable && f.name != "never_null") {
        valid = rng.Uniform(4) != 0;
      }
      m.valid.push_back(valid);
    }
    models.push_back(std::move(m));
  }
  return models;
}

class ShardTestBase : public ::testing::Test {
 protected:
  void SetUp() override {}

  std::string Path(const std::string& name) const { return io::JoinPath(dir_, name); }

  // Writes the models' rows with one Write() per chunk of `chunks` sizes
  // (cycled), each chunk a slice of one big batch so source offsets and
  // validity start mid-buffer.
  ShardInfo WriteShard(const std::string& path, const std::vector<ColumnModel>& models,
                       const ShardWriterOptions& options,
                       std::vector<int64_t> chunks = {1, 7, 100, 333}) {
    auto writer = ShardWriter::Open(fs_.get(), path, SchemaOf(models), options);
    EXPECT_TRUE(writer.ok()) << writer.status();
    const int64_t n = static_cast<int64_t>(models[0].rows.size());
    RecordBatch all = BuildBatch(models, 0, n);
    int64_t row = 0;
    for (size_t k = 0; row < n; ++k) {
      const int64_t take = std::min(chunks[k % chunks.size()], n - row);
      RecordBatch part;
      part.schema = all.schema;
      for (const Column& c : all.columns) part.columns.push_back(c.Slice(row, take));
      part.num_rows = take;
      Status s = (*writer)->Write(part);
      EXPECT_TRUE(s.ok()) << s;
      row += take;
    }
    EXPECT_EQ((*writer)->num_rows(), n);
    auto info = (*writer)->Finish();
    EXPECT_TRUE(info.ok()) << info.status();
    return *info;
  }

  std::string ReadBytes(const std::string& path) { return *fs_->ReadFile(path); }
  void WriteBytes(const std::string& path, const std::string& data) {
    ASSERT_TRUE(fs_->Put(path, data).ok());
  }

  std::shared_ptr<io::FileSystem> fs_ = io::PosixFileSystem(io::PosixOptions{.sync = false});
  io::TempDir tmp_{"fw_shard_test"};
  std::string dir_ = tmp_.path();
};

// ------------------------------------------------------------ round trips

class ShardCodecTest : public ShardTestBase, public ::testing::WithParamInterface<Codec> {};

TEST_P(ShardCodecTest, EveryColumnTypeRoundTripsThroughManyPages) {
  const int64_t n = 3000;
  const auto models = MakeModels(n, 42);
  ShardWriterOptions options;
  options.page_size = 1024;
  options.codec = GetParam();
  options.metadata = {{"origin", "shard_test"}, {"empty", ""}, {"bin", std::string("a\0b", 3)}};
  const std::string path = Path("all.fws");
  ShardInfo info = WriteShard(path, models, options);
  EXPECT_EQ(info.path, path);
  EXPECT_EQ(info.num_rows, n);
  EXPECT_EQ(info.size_bytes, fs_->Stat(path)->size);

  auto reader = ShardReader::Open(fs_.get(), path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const ShardReader& r = **reader;
  EXPECT_EQ(r.num_rows(), n);
  EXPECT_EQ(r.schema(), SchemaOf(models));
  EXPECT_EQ(r.metadata(), options.metadata);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.file_size(), info.size_bytes);

  for (int c = 0; c < r.schema().num_fields(); ++c) {
    const ColumnModel& m = models[static_cast<size_t>(c)];
    SCOPED_TRACE(m.field.name);
    const auto& pages = r.pages(c);
    EXPECT_GT(pages.size(), 2u) << "page_size 1024 should split every column";
    int64_t row = 0;
    for (size_t p = 0; p < pages.size(); ++p) {
      const PageInfo& pi = pages[p];
      EXPECT_EQ(pi.first_row, row);
      EXPECT_GT(pi.num_rows, 0);
      EXPECT_EQ(pi.offset % 64, 0u) << "pages are 64-byte aligned";
      EXPECT_EQ(pi.codec, GetParam());
      if (GetParam() == Codec::kNone) {
        EXPECT_EQ(pi.stored_size, pi.uncompressed_size());
      }
      EXPECT_EQ(r.FindPage(c, pi.first_row), static_cast<int>(p));
      EXPECT_EQ(r.FindPage(c, pi.first_row + pi.num_rows - 1), static_cast<int>(p));
      auto page = r.ReadPage(c, static_cast<int>(p));
      ASSERT_TRUE(page.ok()) << page.status();
      EXPECT_EQ(page->null_count, pi.null_count);
      EXPECT_EQ(page->validity.empty(), pi.null_count == 0);
      EXPECT_TRUE(ColumnMatches(*page, m, Range(pi.first_row, pi.num_rows)));
      row += pi.num_rows;
    }
    EXPECT_EQ(row, n);

    auto whole = r.Read(c, 0, n);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_TRUE(ColumnMatches(*whole, m, Range(0, n)));

    // Ranges that start, end or straddle page boundaries.
    for (size_t p = 1; p < pages.size(); p += 3) {
      const int64_t b = pages[p].first_row;
      for (auto [start, len] : std::vector<std::pair<int64_t, int64_t>>{
               {b - 1, 2}, {b, 1}, {b - 1, 1}, {std::max<int64_t>(0, b - 5), 40}}) {
        len = std::min(len, n - start);
        auto got = r.Read(c, start, len);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_TRUE(ColumnMatches(*got, m, Range(start, len))) << "rows " << start << "+" << len;
      }
    }
    auto tail = r.Read(c, n - 1, 1);
    ASSERT_TRUE(tail.ok());
    EXPECT_TRUE(ColumnMatches(*tail, m, {n - 1}));
    auto none = r.Read(c, 17, 0);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->length, 0);
    EXPECT_EQ(none->type, m.field.type);

    // Random, repeated and descending rows.
    SplitMix64 rng(static_cast<uint64_t>(c) + 7);
    std::vector<int64_t> idx;
    for (int k = 0; k < 500; ++k) idx.push_back(static_cast<int64_t>(rng.Uniform(n)));
    idx.push_back(idx[3]);
    idx.push_back(idx[3]);
    for (int64_t k = n - 1; k >= n - 20; --k) idx.push_back(k);
    idx.push_back(0);
    auto taken = r.Take(c, idx.data(), idx.size());
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_TRUE(ColumnMatches(*taken, m, idx));
    auto empty_take = r.Take(c, nullptr, 0);
    ASSERT_TRUE(empty_take.ok());
    EXPECT_EQ(empty_take->length, 0);
  }
}

TEST_P(ShardCodecTest, ReadsWithoutMmapMatch) {
  const auto models = MakeModels(700, 3);
  ShardWriterOptions options;
  options.page_size = 1024;
  options.codec = GetParam();
  const std::string path = Path("nommap.fws");
  WriteShard(path, models, options, {700});
  auto reader = ShardReader::Open(fs_.get(), path, ShardReaderOptions{.mmap = false});
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int c = 0; c < (*reader)->schema().num_fields(); ++c) {
    auto got = (*reader)->Read(c, 0, 700);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(ColumnMatches(*got, models[static_cast<size_t>(c)], Range(0, 700)))
        << models[static_cast<size_t>(c)].field.name;
    // Read twice: copied pages are verified on every read.
    auto again = (*reader)->ReadPage(c, 0);
    ASSERT_TRUE(again.ok());
  }
}

TEST_P(ShardCodecTest, ConcurrentReadersSeeTheSameRows) {
  const auto models = MakeModels(1200, 11);
  ShardWriterOptions options;
  options.page_size = 1024;
  options.codec = GetParam();
  const std::string path = Path("concurrent.fws");
  WriteShard(path, models, options);
  auto reader = ShardReader::Open(fs_.get(), path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::shared_ptr<ShardReader> r = *reader;
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < r->schema().num_fields(); ++c) {
        for (int p = 0; p < static_cast<int>(r->pages(c).size()); ++p) {
          auto page = r->ReadPage(c, p);
          const PageInfo& pi = r->pages(c)[static_cast<size_t>(p)];
          if (!page.ok() || !ColumnMatches(*page, models[static_cast<size_t>(c)],
                                           Range(pi.first_row, pi.num_rows))) {
            failures[static_cast<size_t>(t)]++;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

INSTANTIATE_TEST_SUITE_P(Codecs, ShardCodecTest,
                         ::testing::Values(Codec::kNone, Codec::kLz4, Codec::kZstd),
                         [](const auto& info) { return std::string(CodecName(info.param)); });

// ------------------------------------------------------------ zero copy

bool Inside(const void* p, const uint8_t* base, uint64_t size) {
  const auto* b = static_cast<const uint8_t*>(p);
  return base != nullptr && b >= base && b < base + size;
}

TEST_F(ShardTestBase, UncompressedMappedPagesAreZeroCopy) {
  const auto models = MakeModels(2000, 5);
  ShardWriterOptions options;
  options.page_size = 1024;
  const std::string path = Path("zc.fws");
  WriteShard(path, models, options);
  auto file = fs_->OpenRead(path);
  ASSERT_TRUE(file.ok());
  const uint8_t* base = (*file)->mapped_data();
  ASSERT_NE(base, nullptr);
  const uint64_t size = (*file)->size();
  auto reader = ShardReader::Open(*file);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const ShardReader& r = **reader;
  for (int c = 0; c < r.schema().num_fields(); ++c) {
    SCOPED_TRACE(models[static_cast<size_t>(c)].field.name);
    for (int p = 0; p < static_cast<int>(r.pages(c).size()); ++p) {
      const PageInfo& pi = r.pages(c)[static_cast<size_t>(p)];
      auto page = r.ReadPage(c, p);
      ASSERT_TRUE(page.ok());
      EXPECT_EQ(page->values.data, base + pi.offset);
      EXPECT_TRUE(Inside(page->values.data, base, size));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(page->values.data) % 64, 0u);
      if (!page->offsets.empty()) {
        EXPECT_TRUE(Inside(page->offsets.data, base, size));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(page->offsets.data) % 8, 0u);
      }
      if (!page->validity.empty()) {
        EXPECT_TRUE(Inside(page->validity.data, base, size));
      }
    }
    // A range inside one page is a view too.
    const PageInfo& p1 = r.pages(c)[1];
    auto part = r.Read(c, p1.first_row + 1, std::max<int64_t>(1, p1.num_rows - 2));
    ASSERT_TRUE(part.ok());
    EXPECT_TRUE(Inside(part->values.data, base, size));
  }
  // The column keeps the mapping alive after the reader and file are gone.
  auto page = r.ReadPage(0, 0);
  ASSERT_TRUE(page.ok());
  Column kept = *page;
  reader->reset();
  file->reset();
  EXPECT_TRUE(ColumnMatches(kept, models[0], Range(0, kept.length)));
}

TEST_F(ShardTestBase, CompressedAndUnmappedPagesAreCopies) {
  const auto models = MakeModels(500, 6);
  for (Codec codec : {Codec::kLz4, Codec::kZstd}) {
    ShardWriterOptions options;
    options.page_size = 1024;
    options.codec = codec;
    const std::string path = Path(absl::StrCat("copy_", AsAbsl(CodecName(codec)), ".fws"));
    WriteShard(path, models, options);
    auto file = fs_->OpenRead(path);
    ASSERT_TRUE(file.ok());
    const uint8_t* base = (*file)->mapped_data();
    ASSERT_NE(base, nullptr);
    auto reader = ShardReader::Open(*file);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (int c = 0; c < (*reader)->schema().num_fields(); ++c) {
      auto page = (*reader)->ReadPage(c, 0);
      ASSERT_TRUE(page.ok());
      EXPECT_FALSE(Inside(page->values.data, base, (*file)->size())) << CodecName(codec);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(page->values.data) % 8, 0u);
    }
  }
  const std::string path = Path("plain.fws");
  ShardWriterOptions options;
  options.page_size = 1024;
  WriteShard(path, models, options);
  auto file = fs_->OpenRead(path, io::FileOpenOptions{.mmap = false});
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->mapped_data(), nullptr);
  auto reader = ShardReader::Open(*file);
  ASSERT_TRUE(reader.ok());
  auto page = (*reader)->ReadPage(0, 0);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(ColumnMatches(*page, models[0], Range(0, page->length)));
}

TEST_F(ShardTestBase, CompressionShrinksCompressibleData) {
  std::vector<ColumnModel> models(1);
  models[0].field = Field{"x", DataType::Scalar(TypeId::kInt64)};
  for (int i = 0; i < 5000; ++i) {
    int64_t v = i / 100;
    models[0].rows.emplace_back(reinterpret_cast<const char*>(&v), 8);
    models[0].valid.push_back(true);
  }
  std::vector<uint64_t> sizes;
  for (Codec codec : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    ShardWriterOptions options;
    options.codec = codec;
    const std::string name = absl::StrCat("c_", AsAbsl(CodecName(codec)));
    sizes.push_back(WriteShard(Path(name), models, options, {5000}).size_bytes);
  }
  EXPECT_GT(sizes[0], 40000u);
  EXPECT_LT(sizes[1], sizes[0] / 4);
  EXPECT_LT(sizes[2], sizes[0] / 4);
}

// ------------------------------------------------------------ pages

TEST_F(ShardTestBase, RowsLargerThanAPageGetAPageEach) {
  std::vector<ColumnModel> models(2);
  models[0].field = Field{"big", DataType::Tensor(TypeId::kFloat32, {600})};
  models[1].field = Field{"blob", DataType::Binary()};
  SplitMix64 rng(9);
  for (int i = 0; i < 10; ++i) {
    models[0].rows.push_back(RandomBytes(rng, 2400));
    models[1].rows.push_back(RandomBytes(rng, i == 4 ? 0 : 3000 + i));
    models[0].valid.push_back(true);
    models[1].valid.push_back(true);
  }
  ShardWriterOptions options;
  options.page_size = 1024;
  WriteShard(Path("big.fws"), models, options, {3, 7});
  auto reader = ShardReader::Open(fs_.get(), Path("big.fws"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->pages(0).size(), 10u);
  for (const PageInfo& pi : (*reader)->pages(0)) EXPECT_EQ(pi.num_rows, 1);
  // The empty blob shares a page with the next row; the others are alone.
  EXPECT_EQ((*reader)->pages(1).size(), 9u);
  for (int c = 0; c < 2; ++c) {
    auto got = (*reader)->Read(c, 0, 10);
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(ColumnMatches(*got, models[static_cast<size_t>(c)], Range(0, 10)));
  }
}

TEST_F(ShardTestBase, FixedWidthPagesHoldPageSizeBytes) {
  std::vector<ColumnModel> models(1);
  models[0].field = Field{"x", DataType::Scalar(TypeId::kInt32)};
  for (int i = 0; i < 1000; ++i) {
    models[0].rows.emplace_back(reinterpret_cast<const char*>(&i), 4);
    models[0].valid.push_back(true);
  }
  ShardWriterOptions options;
  options.page_size = 1024;
  WriteShard(Path("fixed.fws"), models, options, {1, 99, 1000});
  auto reader = ShardReader::Open(fs_.get(), Path("fixed.fws"));
  ASSERT_TRUE(reader.ok());
  const auto& pages = (*reader)->pages(0);
  ASSERT_EQ(pages.size(), 4u);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(pages[static_cast<size_t>(p)].num_rows, 256);
  EXPECT_EQ(pages[3].num_rows, 1000 - 3 * 256);
  EXPECT_EQ(pages[0].values_size, 1024u);
  EXPECT_EQ(pages[0].validity_size, 0u);
  EXPECT_EQ(pages[0].offsets_size, 0u);
}

// ------------------------------------------------------------ file layout

TEST_F(ShardTestBase, FileHasHeaderFooterAndTrailerAsSpecified) {
  const auto models = MakeModels(50, 1);
  ShardWriterOptions options;
  options.metadata = {{"k", "v"}};
  WriteShard(Path("layout.fws"), models, options);
  const std::string bytes = ReadBytes(Path("layout.fws"));
  ASSERT_GT(bytes.size(), 48u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("FWSHARD\0", 8));
  uint16_t header_version;
  std::memcpy(&header_version, bytes.data() + 8, 2);
  EXPECT_EQ(header_version, kShardFormatVersion);
  EXPECT_EQ(bytes.substr(10, 6), std::string(6, '\0'));

  const char* t = bytes.data() + bytes.size() - kTrailerSize;
  uint64_t footer_offset, footer_size, footer_checksum;
  uint16_t version, features;
  std::memcpy(&footer_offset, t, 8);
  std::memcpy(&footer_size, t + 8, 8);
  std::memcpy(&footer_checksum, t + 16, 8);
  std::memcpy(&version, t + 24, 2);
  std::memcpy(&features, t + 26, 2);
  EXPECT_EQ(std::string(t + 28, 4), "FWS1");
  EXPECT_EQ(version, 1);
  EXPECT_EQ(features, 0);
  EXPECT_EQ(footer_offset + footer_size + kTrailerSize, bytes.size());
  EXPECT_EQ(footer_checksum, Checksum64(bytes.data() + footer_offset, footer_size));
  EXPECT_EQ(static_cast<uint8_t>(bytes[footer_offset]), 1) << "footer version varint";

  // The first page starts at the first 64-byte boundary after the header.
  auto reader = ShardReader::Open(fs_.get(), Path("layout.fws"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->pages(0)[0].offset, 64u);
  // Each page's checksum is XXH3-64 of its stored bytes.
  for (int c = 0; c < (*reader)->schema().num_fields(); ++c) {
    for (const PageInfo& pi : (*reader)->pages(c)) {
      EXPECT_EQ(pi.checksum, Checksum64(bytes.data() + pi.offset, pi.stored_size));
    }
  }
}

// ------------------------------------------------------------ versioning

class ShardTrailerTest : public ShardTestBase {
 protected:
  void SetUp() override {
    ShardTestBase::SetUp();
    const auto models = MakeModels(40, 2);
    WriteShard(Path("ok.fws"), models, ShardWriterOptions{});
    bytes_ = ReadBytes(Path("ok.fws"));
  }
  // Writes `bytes` as a new file and returns Open's status.
  Status OpenPatched(const std::string& name, const std::string& bytes) {
    WriteBytes(Path(name), bytes);
    auto r = ShardReader::Open(fs_.get(), Path(name));
    return r.status();
  }
  void PutU16(std::string& b, size_t pos, uint16_t v) { std::memcpy(b.data() + pos, &v, 2); }
  std::string bytes_;
};

TEST_F(ShardTrailerTest, NewerFormatVersionIsRefusedWithUpgradeHint) {
  std::string b = bytes_;
  PutU16(b, b.size() - 8, 2);
  Status s = OpenPatched("v2.fws", b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(Path("v2.fws")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard format version 2 is not supported"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("upgrade flywheel"));

  PutU16(b, b.size() - 8, 0);
  s = OpenPatched("v0.fws", b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("version 0 is not supported"));
}

TEST_F(ShardTrailerTest, UnknownRequiredFeatureIsRefusedNamingTheBits) {
  for (uint16_t bits : {uint16_t{0x2}, uint16_t{0x4}, uint16_t{0x8000}}) {
    std::string b = bytes_;
    PutU16(b, b.size() - 6, bits);
    const std::string name = absl::StrCat("feat", bits, ".fws");
    Status s = OpenPatched(name, b);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(Path(name)));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("requires format features 0x", absl::Hex(bits))));
    EXPECT_THAT(std::string(s.message()), HasSubstr("upgrade flywheel"));
  }
}

TEST_F(ShardTrailerTest, HeaderVersionMustMatchTheTrailer) {
  std::string b = bytes_;
  PutU16(b, 8, 2);
  Status s = OpenPatched("hv.fws", b);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("header"));
}

TEST_F(ShardTrailerTest, BadMagicOrFooterIsDataLoss) {
  {
    std::string b = bytes_;
    b[b.size() - 1] = '2';
    Status s = OpenPatched("magic.fws", b);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("bad trailer magic"));
  }
  {
    std::string b = bytes_;
    b[0] = 'X';
    Status s = OpenPatched("hmagic.fws", b);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("not a flywheel shard"));
  }
  {
    std::string b = bytes_;
    b[b.size() - kTrailerSize - 3] ^= 0x10;  // inside the footer
    Status s = OpenPatched("footer.fws", b);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("footer checksum mismatch"));
  }
  {
    // A well-checksummed footer of an unknown footer version.
    std::string b = bytes_;
    uint64_t footer_offset, footer_size;
    std::memcpy(&footer_offset, b.data() + b.size() - 32, 8);
    std::memcpy(&footer_size, b.data() + b.size() - 24, 8);
    b[footer_offset] = 2;
    const uint64_t sum = Checksum64(b.data() + footer_offset, footer_size);
    std::memcpy(b.data() + b.size() - 16, &sum, 8);
    Status s = OpenPatched("fv.fws", b);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("unknown footer version 2"));
  }
  {
    Status s = OpenPatched("tiny.fws", "FWSHARD");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("too small to be a shard"));
    EXPECT_THAT(std::string(s.message()), HasSubstr(Path("tiny.fws")));
  }
}

// ------------------------------------------------------------ empty shards

TEST_F(ShardTestBase, EmptyShardHasSchemaAndNoPages) {
  const auto models = MakeModels(0, 1);
  ShardWriterOptions options;
  options.metadata = {{"rows", "0"}};
  auto writer = ShardWriter::Open(fs_.get(), Path("empty.fws"), SchemaOf(models), options);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write(BuildBatch(models, 0, 0)).ok());  // a 0-row batch is fine
  auto info = (*writer)->Finish();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_rows, 0);

  auto reader = ShardReader::Open(fs_.get(), Path("empty.fws"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  const ShardReader& r = **reader;
  EXPECT_EQ(r.num_rows(), 0);
  EXPECT_EQ(r.schema(), SchemaOf(models));
  EXPECT_EQ(r.metadata(), options.metadata);
  for (int c = 0; c < r.schema().num_fields(); ++c) {
    EXPECT_TRUE(r.pages(c).empty());
    auto got = r.Read(c, 0, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->length, 0);
    EXPECT_TRUE(got->Validate("x").ok());
    auto taken = r.Take(c, nullptr, 0);
    ASSERT_TRUE(taken.ok());
    EXPECT_EQ(taken->length, 0);
    const int64_t zero = 0;
    EXPECT_EQ(r.Take(c, &zero, 1).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(r.Read(c, 0, 1).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(r.ReadPage(c, 0).status().code(), absl::StatusCode::kOutOfRange);
  }
}

// ------------------------------------------------------------ misuse

TEST_F(ShardTestBase, ReaderRejectsOutOfRangeArgumentsNamingTheFile) {
  const auto models = MakeModels(100, 4);
  WriteShard(Path("args.fws"), models, ShardWriterOptions{});
  auto reader = ShardReader::Open(fs_.get(), Path("args.fws"));
  ASSERT_TRUE(reader.ok());
  const ShardReader& r = **reader;
  const int64_t bad_rows[] = {5, 100};
  for (const absl::Status& s :
       {r.Read(0, 90, 11).status(), r.Read(0, -1, 2).status(), r.Read(0, 0, -1).status(),
        r.Read(99, 0, 1).status(), r.Read(-1, 0, 1).status(), r.ReadPage(0, 1).status(),
        r.ReadPage(0, -1).status(), r.ReadPage(99, 0).status(), r.Take(0, bad_rows, 2).status(),
        r.Take(99, bad_rows, 1).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(Path("args.fws")));
  }
}

// start + length overflowed int64 (undefined behaviour), wrapped negative, passed
// the range check, and Read returned an empty column of no type.
TEST_F(ShardTestBase, RegressionReadLengthOverflow) {
  WriteShard(Path("ovf.fws"), MakeModels(10, 4), ShardWriterOptions{});
  auto reader = ShardReader::Open(fs_.get(), Path("ovf.fws"));
  ASSERT_TRUE(reader.ok());
  for (auto [start, len] : std::vector<std::pair<int64_t, int64_t>>{
           {1, INT64_MAX}, {INT64_MAX, 1}, {INT64_MAX, INT64_MAX}, {11, 0}}) {
    auto got = (*reader)->Read(0, start, len);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange) << start << "+" << len;
  }
  auto edge = (*reader)->Read(0, 10, 0);  // an empty range at the end is fine
  ASSERT_TRUE(edge.ok());
  EXPECT_EQ(edge->length, 0);
}

TEST_F(ShardTestBase, WriterRejectsBadOptionsSchemasAndBatches) {
  const auto models = MakeModels(10, 4);
  const Schema schema = SchemaOf(models);
  {
    ShardWriterOptions o;
    o.page_size = 100;
    auto w = ShardWriter::Open(fs_.get(), Path("w1"), schema, o);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(w.status().message()), HasSubstr("page_size 100"));
    o.page_size = (64u << 20) + 1;
    EXPECT_FALSE(o.Validate().ok());
  }
  {
    ShardWriterOptions o;
    o.codec = Codec::kZstd;
    o.zstd_level = 0;
    auto w = ShardWriter::Open(fs_.get(), Path("w2"), schema, o);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(w.status().message()), HasSubstr("zstd_level 0"));
  }
  {
    auto w = ShardWriter::Open(fs_.get(), Path("w3"), Schema{}, {});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto w = ShardWriter::Open(fs_.get(), Path("w4"), schema, {});
  ASSERT_TRUE(w.ok());
  {
    RecordBatch b = BuildBatch(models, 0, 5);
    std::swap(b.schema.fields[0].name, b.schema.fields[1].name);
    Status s = (*w)->Write(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr(Path("w4")));
    EXPECT_THAT(std::string(s.message()), HasSubstr("batch field 0 is i8:bool"));
  }
  {
    RecordBatch b = BuildBatch(models, 0, 5);
    b.schema.fields.pop_back();
    b.columns.pop_back();
    EXPECT_EQ((*w)->Write(b).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    RecordBatch b = BuildBatch(models, 0, 5);
    SetValidity(b.columns[1], {true, false, true, true, true});  // i8 is not nullable
    Status s = (*w)->Write(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("has nulls"));
  }
  EXPECT_EQ((*w)->num_rows(), 0);
  ASSERT_TRUE((*w)->Write(BuildBatch(models, 0, 10)).ok());
  auto info = (*w)->Finish();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_rows, 10);
  EXPECT_EQ((*w)->Write(BuildBatch(models, 0, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);

  // Shards are immutable: the writer refuses to replace an existing file.
  auto again = ShardWriter::Open(fs_.get(), Path("w4"), schema, {});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(ShardTestBase, MissingFileIsNotFound) {
  auto r = ShardReader::Open(fs_.get(), Path("nope.fws"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(Path("nope.fws")));
}

TEST_F(ShardTestBase, FieldIdsAndNullabilityRoundTrip) {
  Schema schema;
  schema.fields.push_back(Field{"a", DataType::Scalar(TypeId::kInt16), true, 7});
  schema.fields.push_back(Field{"b", DataType::List(TypeId::kFloat64), false, -1});
  schema.fields.push_back(Field{"c", DataType::Tensor(TypeId::kFloat16, {2, 3}), false, 123456});
  auto w = ShardWriter::Open(fs_.get(), Path("ids.fws"), schema, {});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = ShardReader::Open(fs_.get(), Path("ids.fws"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->schema(), schema);
}

}  // namespace
}  // namespace flywheel::format

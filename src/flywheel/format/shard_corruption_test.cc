// Shard readers facing damaged and hostile files: every flipped byte and every
// truncation of a real shard, and hand-built files whose checksums are right
// but whose index lies. The reader must return an error naming the file, never
// crash, and never return values that differ from what was written while
// checksums are on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flywheel/base/checksum.h"
#include "flywheel/base/rng.h"
#include "flywheel/format/internal/coding.h"
#include "flywheel/format/shard.h"
#include "flywheel/io/file_system.h"
#include "flywheel/io/memory_cap_testing.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::format {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace ifmt = ::flywheel::internal_format;

constexpr uint64_t kTrailerSize = 32;
constexpr uint64_t kHeaderSize = 16;

// Every page of every column, decoded to comparable bytes.
struct Snapshot {
  std::vector<std::vector<std::string>> pages;  // [column][page] -> canonical bytes
};

std::string Canonical(const Column& c) {
  std::string out;
  for (int64_t i = 0; i < c.length; ++i) {
    out.push_back(c.IsValid(i) ? 'v' : 'n');
    if (c.type.is_fixed_width()) {
      out.append(reinterpret_cast<const char*>(c.FixedRow(i)), c.type.fixed_width());
    } else {
      const size_t esize = c.type.id == TypeId::kList ? ScalarSize(c.type.elem) : 1;
      const int64_t* o = c.offsets_data();
      out += std::to_string(o[i + 1] - o[i]) + ":";
      out.append(reinterpret_cast<const char*>(c.values.data) + o[i] * esize,
                 static_cast<size_t>(o[i + 1] - o[i]) * esize);
    }
  }
  return out;
}

// Marks errors from columns the reader returned but that fail Validate.
constexpr char kInvalidColumn[] = "INVALID COLUMN FROM READER";

// Opens `file` and reads every page of every column, plus a Take of a few
// rows. Returns the first error, or the decoded pages.
Result<Snapshot> ReadEverything(std::shared_ptr<io::RandomAccessFile> file, bool verify) {
  FW_ASSIGN_OR_RETURN(
      auto reader,
      ShardReader::Open(std::move(file), ShardReaderOptions{.verify_checksums = verify}));
  Snapshot snap;
  for (int c = 0; c < reader->schema().num_fields(); ++c) {
    snap.pages.emplace_back();
    for (int p = 0; p < static_cast<int>(reader->pages(c).size()); ++p) {
      FW_ASSIGN_OR_RETURN(Column col, reader->ReadPage(c, p));
      FW_RETURN_IF_ERROR_CTX(col.Validate("page"), kInvalidColumn);
      snap.pages.back().push_back(Canonical(col));
    }
    if (reader->num_rows() > 0) {
      const int64_t rows[] = {0, reader->num_rows() - 1, reader->num_rows() / 2, 0};
      FW_ASSIGN_OR_RETURN(Column taken, reader->Take(c, rows, 4));
      FW_RETURN_IF_ERROR_CTX(taken.Validate("take"), kInvalidColumn);
      FW_ASSIGN_OR_RETURN(Column all, reader->Read(c, 0, reader->num_rows()));
      FW_RETURN_IF_ERROR_CTX(all.Validate("read"), kInvalidColumn);
    }
  }
  return snap;
}

bool SameSnapshot(const Snapshot& a, const Snapshot& b) { return a.pages == b.pages; }

class ShardCorruptionTest : public ::testing::TestWithParam<Codec> {
 protected:
  void SetUp() override {
    path_ = io::JoinPath(dir_, "small.fws");
    WriteSmallShard(path_, GetParam());
    bytes_ = *fs_->ReadFile(path_);
    auto reader = ShardReader::Open(fs_.get(), path_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = *reader;
    auto snap = ReadEverything(io::NewMemoryFile(path_, bytes_), true);
    ASSERT_TRUE(snap.ok()) << snap.status();
    original_ = *snap;
  }

  // ~3-4 KB, several pages per column, nulls, all three layouts.
  void WriteSmallShard(const std::string& path, Codec codec) {
    auto schema = Schema::Parse("id:int64, name:string?, tok:list<int16>?, flag:bool");
    ASSERT_TRUE(schema.ok());
    const int n = 150;
    SplitMix64 rng(17);
    std::vector<int64_t> ids;
    std::vector<std::string> names;
    std::vector<std::vector<int16_t>> toks;
    std::vector<uint8_t> flags;
    std::vector<bool> name_valid, tok_valid;
    for (int i = 0; i < n; ++i) {
      ids.push_back(i * 1000003);
      names.push_back(std::string(rng.Uniform(12), static_cast<char>('a' + i % 26)));
      toks.emplace_back(rng.Uniform(5), static_cast<int16_t>(i));
      flags.push_back(static_cast<uint8_t>(i % 3 == 0));
      name_valid.push_back(i % 7 != 3);
      tok_valid.push_back(i % 11 != 5);
    }
    RecordBatch b;
    b.schema = *schema;
    b.num_rows = n;
    b.columns.push_back(MakeFixedColumn(b.schema.fields[0].type, ids));
    b.columns.push_back(MakeStringColumn(names));
    SetValidity(b.columns.back(), name_valid);
    b.columns.push_back(MakeListColumn<int16_t>(TypeId::kInt16, toks));
    SetValidity(b.columns.back(), tok_valid);
    b.columns.push_back(MakeFixedColumn(b.schema.fields[3].type, flags));
    ShardWriterOptions options;
    options.page_size = 1024;
    options.codec = codec;
    auto w = ShardWriter::Open(fs_.get(), path, *schema, options);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write(b).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }

  // True for bytes no checksum or check covers: alignment gaps between pages.
  bool IsPadding(uint64_t pos) const {
    if (pos < kHeaderSize) return false;
    uint64_t footer_offset;
    std::memcpy(&footer_offset, bytes_.data() + bytes_.size() - kTrailerSize, 8);
    if (pos >= footer_offset) return false;
    for (int c = 0; c < reader_->schema().num_fields(); ++c) {
      for (const PageInfo& pi : reader_->pages(c)) {
        if (pos >= pi.offset && pos < pi.offset + pi.stored_size) return false;
      }
    }
    return true;
  }

  std::shared_ptr<io::FileSystem> fs_ = io::PosixFileSystem(io::PosixOptions{.sync = false});
  io::TempDir tmp_{"fw_shard_corruption"};
  std::string dir_ = tmp_.path();
  std::string path_, bytes_;
  std::shared_ptr<ShardReader> reader_;
  Snapshot original_;
};

TEST_P(ShardCorruptionTest, FileIsSmallAndMultiPage) {
  EXPECT_LT(bytes_.size(), 6000u);
  EXPECT_GT(bytes_.size(), 1500u);
  for (int c = 0; c < 3; ++c) EXPECT_GE(reader_->pages(c).size(), 2u) << c;
  RecordProperty("file_bytes", static_cast<int>(bytes_.size()));
}

TEST_P(ShardCorruptionTest, EveryFlippedByteIsDetectedOrHarmless) {
  int detected = 0, harmless = 0;
  for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
    for (size_t i = 0; i < bytes_.size(); ++i) {
      std::string damaged = bytes_;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      auto got = ReadEverything(io::NewMemoryFile(path_, damaged), /*verify=*/true);
      if (got.ok()) {
        ++harmless;
        EXPECT_TRUE(IsPadding(i)) << "flipping byte " << i << " went unnoticed";
        EXPECT_TRUE(SameSnapshot(*got, original_)) << "flipping byte " << i << " changed values";
      } else {
        ++detected;
        EXPECT_FALSE(IsPadding(i)) << "byte " << i << " is padding; readers must ignore it";
        EXPECT_THAT(std::string(got.status().message()), HasSubstr(path_)) << "byte " << i;
      }
    }
  }
  EXPECT_GT(detected, 0);
  RecordProperty("harmless_flips", harmless);
}

TEST_P(ShardCorruptionTest, FlippedBytesWithoutChecksumsNeverCrash) {
  // With verification off nothing guarantees the values, but every error
  // still names the file and every returned column is structurally valid
  // (ReadEverything validates each one).
  for (size_t i = 0; i < bytes_.size(); ++i) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x04}}) {
      std::string damaged = bytes_;
      damaged[i] = static_cast<char>(damaged[i] ^ mask);
      auto got = ReadEverything(io::NewMemoryFile(path_, damaged), /*verify=*/false);
      if (!got.ok()) {
        EXPECT_THAT(std::string(got.status().message()), Not(HasSubstr(kInvalidColumn)))
            << "byte " << i;
        EXPECT_THAT(std::string(got.status().message()), HasSubstr(path_)) << "byte " << i;
      }
    }
  }
}

TEST_P(ShardCorruptionTest, FlippedBytesOnDiskAreDetected) {
  // The same through the POSIX file system (mmap and pread).
  for (size_t i = 0; i < bytes_.size(); i += 37) {
    if (IsPadding(i)) continue;
    std::string damaged = bytes_;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x20);
    const std::string p = io::JoinPath(dir_, "flip" + std::to_string(i));
    ASSERT_TRUE(fs_->Put(p, damaged).ok());
    for (bool mmap : {true, false}) {
      auto file = fs_->OpenRead(p, io::FileOpenOptions{.mmap = mmap});
      ASSERT_TRUE(file.ok());
      auto got = ReadEverything(*file, true);
      ASSERT_FALSE(got.ok()) << "byte " << i;
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(p));
    }
  }
}

TEST_P(ShardCorruptionTest, TruncationAtEveryByteFailsToOpen) {
  for (size_t len = 0; len < bytes_.size(); ++len) {
    auto r = ShardReader::Open(io::NewMemoryFile(path_, bytes_.substr(0, len)));
    ASSERT_FALSE(r.ok()) << "truncated to " << len << " bytes";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path_));
  }
}

TEST_P(ShardCorruptionTest, TruncationAtSectionBoundariesFailsClearly) {
  uint64_t footer_offset;
  std::memcpy(&footer_offset, bytes_.data() + bytes_.size() - kTrailerSize, 8);
  const uint64_t size = bytes_.size();
  std::vector<uint64_t> cuts = {0, 8, kHeaderSize};
  for (int c = 0; c < reader_->schema().num_fields(); ++c) {
    for (const PageInfo& pi : reader_->pages(c)) {
      cuts.push_back(pi.offset);
      cuts.push_back(pi.offset + pi.stored_size / 2);
      cuts.push_back(pi.offset + pi.stored_size);
    }
  }
  for (uint64_t x : {footer_offset, footer_offset + 1, (footer_offset + size - kTrailerSize) / 2,
                     size - kTrailerSize, size - kTrailerSize / 2, size - 4, size - 1}) {
    cuts.push_back(x);
  }
  for (uint64_t len : cuts) {
    ASSERT_LT(len, size);
    const std::string p = io::JoinPath(dir_, "cut" + std::to_string(len));
    ASSERT_TRUE(fs_->Put(p, bytes_.substr(0, len)).ok());
    auto r = ShardReader::Open(fs_.get(), p);
    ASSERT_FALSE(r.ok()) << "truncated to " << len;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr("opening shard " + p));
    if (len < 48) {
      EXPECT_THAT(msg, HasSubstr("too small to be a shard"));
    } else {
      EXPECT_THAT(msg, HasSubstr("bad trailer magic (file truncated or not a shard)"));
    }
  }
}

TEST_P(ShardCorruptionTest, AppendedBytesAreDetected) {
  auto r = ShardReader::Open(io::NewMemoryFile(path_, bytes_ + std::string(64, '\0')));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  // A second copy of the trailer does not make the extra bytes acceptable.
  const std::string trailer = bytes_.substr(bytes_.size() - kTrailerSize);
  r = ShardReader::Open(io::NewMemoryFile(path_, bytes_ + std::string(64, '\0') + trailer));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path_));
}

INSTANTIATE_TEST_SUITE_P(Codecs, ShardCorruptionTest,
                         ::testing::Values(Codec::kNone, Codec::kLz4, Codec::kZstd),
                         [](const auto& info) { return std::string(CodecName(info.param)); });

// ---------------------------------------------------------------- crafted
//
// Files built byte by byte with correct checksums and a lying page index,
// one per bug the fuzzer or review found. See docs/format/shard.md.

struct CraftedField {
  std::string name;
  TypeId id = TypeId::kInt32;
  TypeId elem = TypeId::kNone;
  std::vector<uint64_t> shape;
  bool nullable = false;
};

struct CraftedPage {
  uint64_t num_rows = 1;
  uint64_t offset = 64;
  uint64_t stored_size = 0;
  uint64_t values_size = 0;
  uint64_t offsets_size = 0;
  uint64_t validity_size = 0;
  Codec codec = Codec::kNone;
  uint64_t null_count = 0;
};

struct CraftedShard {
  std::string data;  // the file up to the footer; the header is filled in
  std::vector<CraftedField> fields;
  uint64_t num_rows = 0;
  std::vector<std::vector<CraftedPage>> pages;
  std::vector<std::pair<std::string, std::string>> metadata;

  // Places `bytes` at the next 64-byte boundary and returns its offset.
  uint64_t AddPage(const std::string& bytes) {
    if (data.size() < kHeaderSize) data.resize(kHeaderSize);
    data.resize((data.size() + 63) / 64 * 64, '\0');
    const uint64_t offset = data.size();
    data += bytes;
    return offset;
  }

  std::string Build() const {
    std::string file = data;
    if (file.size() < kHeaderSize) file.resize(kHeaderSize);
    std::memcpy(file.data(), "FWSHARD\0\1\0\0\0\0\0\0\0", kHeaderSize);
    std::string f;
    ifmt::PutVarint(&f, 1);
    ifmt::PutVarint(&f, fields.size());
    for (const CraftedField& fd : fields) {
      ifmt::PutBytes(&f, fd.name);
      f.push_back(static_cast<char>(fd.id));
      f.push_back(static_cast<char>(fd.elem));
      ifmt::PutVarint(&f, fd.shape.size());
      for (uint64_t d : fd.shape) ifmt::PutVarint(&f, d);
      f.push_back(fd.nullable ? 1 : 0);
      ifmt::PutSigned(&f, -1);
    }
    ifmt::PutVarint(&f, num_rows);
    for (const auto& col : pages) {
      ifmt::PutVarint(&f, col.size());
      for (const CraftedPage& p : col) {
        ifmt::PutVarint(&f, p.num_rows);
        ifmt::PutVarint(&f, p.offset);
        ifmt::PutVarint(&f, p.stored_size);
        ifmt::PutVarint(&f, p.values_size);
        ifmt::PutVarint(&f, p.offsets_size);
        ifmt::PutVarint(&f, p.validity_size);
        f.push_back(static_cast<char>(p.codec));
        ifmt::PutVarint(&f, p.null_count);
        const uint64_t sum = p.offset + p.stored_size <= file.size()
                                 ? Checksum64(file.data() + p.offset, p.stored_size)
                                 : 0;
        ifmt::PutFixed64(&f, sum);
      }
    }
    ifmt::PutVarint(&f, metadata.size());
    for (const auto& [k, v] : metadata) {
      ifmt::PutBytes(&f, k);
      ifmt::PutBytes(&f, v);
    }
    const uint64_t footer_offset = file.size();
    file += f;
    ifmt::PutFixed64(&file, footer_offset);
    ifmt::PutFixed64(&file, f.size());
    ifmt::PutFixed64(&file, Checksum64(f));
    ifmt::PutFixed16(&file, 1);
    ifmt::PutFixed16(&file, 0);
    file += "FWS1";
    return file;
  }
};

const char kCraftedPath[] = "/crafted/shard.fws";

// Opens and reads everything; returns the first error.
Status OpenAndRead(const std::string& bytes) {
  return ReadEverything(io::NewMemoryFile(kCraftedPath, bytes), true).status();
}

std::string Int64s(std::vector<int64_t> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

TEST(CraftedShardTest, WellFormedCraftedFileReads) {
  // Guards the builder itself: the same layout the writer produces.
  CraftedShard s;
  s.fields = {{"t", TypeId::kBinary}};
  s.num_rows = 2;
  std::string body = "abc";
  body.resize(8, '\0');
  body += Int64s({0, 1, 3});
  CraftedPage p;
  p.num_rows = 2;
  p.offset = s.AddPage(body);
  p.stored_size = body.size();
  p.values_size = 3;
  p.offsets_size = 24;
  s.pages = {{p}};
  s.metadata = {{"k", "v"}};
  const std::string bytes = s.Build();
  auto r = ShardReader::Open(io::NewMemoryFile(kCraftedPath, bytes));
  ASSERT_TRUE(r.ok()) << r.status();
  auto col = (*r)->Read(0, 0, 2);
  ASSERT_TRUE(col.ok()) << col.status();
  EXPECT_EQ(col->GetBytes(0), "a");
  EXPECT_EQ(col->GetBytes(1), "bc");
  EXPECT_EQ((*r)->metadata().at("k"), "v");
}

// n * fixed_width overflowed uint64: 2^29 rows of float64[65536,65536]
// "matched" a 0-byte values section, and Take read far outside the page.
TEST(CraftedShardTest, RegressionFixedWidthSizeOverflow) {
  CraftedShard s;
  s.fields = {{"big", TypeId::kFloat64, TypeId::kNone, {65536, 65536}}};
  s.num_rows = uint64_t{1} << 29;
  CraftedPage p;
  p.num_rows = s.num_rows;
  p.offset = s.AddPage("");
  s.pages = {{p}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("section sizes do not match"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(kCraftedPath));
}

// offsets[n] * element size overflowed: a list<int32> row claiming 2^62+1
// elements "covered" a 4-byte values section.
TEST(CraftedShardTest, RegressionListOffsetsOverflow) {
  CraftedShard s;
  s.fields = {{"l", TypeId::kList, TypeId::kInt32}};
  s.num_rows = 1;
  std::string body(8, '\0');
  body += Int64s({0, (int64_t{1} << 62) + 1});
  CraftedPage p;
  p.offset = s.AddPage(body);
  p.stored_size = body.size();
  p.values_size = 4;
  p.offsets_size = 16;
  s.pages = {{p}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("page offsets do not cover the values"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(kCraftedPath));
}

// A page index pointing at an unaligned offset made mapped reads of int64
// offsets misaligned (undefined behaviour).
TEST(CraftedShardTest, RegressionMisalignedPageOffset) {
  CraftedShard s;
  s.fields = {{"t", TypeId::kBinary}};
  s.num_rows = 1;
  std::string body(8, 'x');
  body += Int64s({0, 8});
  s.data = std::string(kHeaderSize, '\0') + std::string(3, '\0') + body;
  CraftedPage p;
  p.offset = kHeaderSize + 3;
  p.stored_size = body.size();
  p.values_size = 8;
  p.offsets_size = 16;
  s.pages = {{p}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("offset 19 is not 64-byte aligned"));
}

// A compressed page claiming a huge uncompressed size made the reader try to
// allocate it (std::bad_alloc, or the OOM killer) before decompressing.
TEST(CraftedShardTest, RegressionHugeDecompressedSize) {
  for (Codec codec : {Codec::kLz4, Codec::kZstd}) {
    CraftedShard s;
    s.fields = {{"t", TypeId::kBinary}};
    s.num_rows = 1;
    CraftedPage p;
    p.offset = s.AddPage(std::string(10, 'z'));
    p.stored_size = 10;
    p.values_size = uint64_t{1} << 39;
    p.offsets_size = 16;
    p.codec = codec;
    s.pages = {{p}};
    Status st = OpenAndRead(s.Build());
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("bytes cannot decode to"));
    // The same under a 256 MB address-space cap (the crafted-input suite).
    const std::string bytes = s.Build();
    const std::string got = io::UnderMemoryCap(256, [&]() -> std::string {
      Status capped = OpenAndRead(bytes);
      return capped.ok() ? "ok" : "error: " + std::string(capped.message());
    });
    EXPECT_THAT(got, HasSubstr("bytes cannot decode to"));
  }
}

// The bitmap and the index disagreeing about nulls gave columns whose
// null_count was wrong.
TEST(CraftedShardTest, RegressionNullCountDisagreesWithBitmap) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32, TypeId::kNone, {}, true}};
  s.num_rows = 3;
  std::string body(16, '\0');
  body.push_back(static_cast<char>(0b101));  // one null (row 1)
  CraftedPage p;
  p.num_rows = 3;
  p.offset = s.AddPage(body);
  p.stored_size = body.size();
  p.values_size = 12;
  p.validity_size = 1;
  p.null_count = 2;
  s.pages = {{p}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("page validity has 1 nulls, index says 2"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(kCraftedPath));
}

// footer_size close to the file size made `size - 32 - footer_size` wrap, so
// a matching wrapped footer_offset passed the range check.
TEST(CraftedShardTest, RegressionFooterSizeUnderflow) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32}};
  s.pages = {{}};
  std::string bytes = s.Build();
  ASSERT_TRUE(OpenAndRead(bytes).ok());
  const uint64_t size = bytes.size();
  const uint64_t footer_size = size - 20;
  const uint64_t footer_offset = size - kTrailerSize - footer_size;  // wraps
  std::memcpy(bytes.data() + size - 32, &footer_offset, 8);
  std::memcpy(bytes.data() + size - 24, &footer_size, 8);
  Status st = OpenAndRead(bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("does not fit"));
}

TEST(CraftedShardTest, PagesWithMoreRowsThanTheFileAreRejected) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32}};
  s.num_rows = 1;
  CraftedPage p;
  p.offset = s.AddPage(std::string(8, '\0'));
  p.stored_size = 8;
  p.values_size = 4;
  s.pages = {{p, p}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("pages hold more than the file's 1 rows"));
}

TEST(CraftedShardTest, DuplicateMetadataKeysAreRejected) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32}};
  s.pages = {{}};
  s.metadata = {{"k", "1"}, {"k", "2"}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("duplicate metadata key"));
}

TEST(CraftedShardTest, NonZeroReservedHeaderBytesAreRejected) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32}};
  s.pages = {{}};
  std::string bytes = s.Build();
  ASSERT_TRUE(OpenAndRead(bytes).ok());
  bytes[12] = 1;
  Status st = OpenAndRead(bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("header byte 12 is not zero"));
}

TEST(CraftedShardTest, ElementTypeOnNonListFieldIsRejected) {
  CraftedShard s;
  s.fields = {{"x", TypeId::kInt32, TypeId::kInt8}};
  s.pages = {{}};
  Status st = OpenAndRead(s.Build());
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("invalid schema"));
}

}  // namespace
}  // namespace flywheel::format

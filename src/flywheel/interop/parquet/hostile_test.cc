// Parquet files whose headers lie, read under a memory cap (the hostile-input
// issue, items 4 and 5): a page claiming far more decoded bytes than its
// stored bytes can produce is refused before anything is allocated for it,
// and a flipped byte in a page is caught by the page CRC the writer stores.
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/metadata.h"
#include "flywheel/interop/parquet/reader.h"
#include "flywheel/interop/parquet/writer.h"
#include "flywheel/io/file_system.h"
#include "flywheel/io/memory_cap_testing.h"
#include "flywheel/io/temp_dir.h"
#include "gtest/gtest.h"

namespace flywheel::interop::parquet {
namespace {

const std::string kTestData = FLYWHEEL_PARQUET_TESTDATA;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

uint32_t Le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// `file` with the first page of row group 0, column 0 rewritten by `edit`
// (its header re-serialized; offsets in the footer moved to match) and its
// footer by `edit_meta`.
template <typename Edit, typename EditMeta>
std::string RewriteFirstPage(const std::string& file, Edit edit, EditMeta edit_meta) {
  const uint32_t footer_len = Le32(file.data() + file.size() - 8);
  const size_t footer_start = file.size() - 8 - footer_len;
  auto meta = ParseFileMetaData(reinterpret_cast<const uint8_t*>(file.data()) + footer_start, footer_len);
  EXPECT_TRUE(meta.ok()) << meta.status();
  ColumnMetaData& cm = *meta->row_groups[0].columns[0].meta_data;
  int64_t start = cm.data_page_offset;
  if (cm.dictionary_page_offset && *cm.dictionary_page_offset > 0) start = std::min(start, *cm.dictionary_page_offset);
  size_t consumed = 0;
  auto h = ParsePageHeader(reinterpret_cast<const uint8_t*>(file.data()) + start, file.size() - start, &consumed);
  EXPECT_TRUE(h.ok()) << h.status();
  const int64_t old_len = static_cast<int64_t>(consumed) + h->compressed_page_size;
  std::string body = file.substr(start + consumed, static_cast<size_t>(h->compressed_page_size));
  edit(*h, body);
  h->compressed_page_size = static_cast<int32_t>(body.size());
  const std::string header = SerializePageHeader(*h);
  const int64_t delta = static_cast<int64_t>(header.size() + body.size()) - old_len;
  auto shift = [&](int64_t& v) {
    if (v > start) v += delta;
  };
  for (auto& rg : meta->row_groups) {
    for (auto& cc : rg.columns) {
      shift(cc.file_offset);
      if (!cc.meta_data) continue;
      shift(cc.meta_data->data_page_offset);
      if (cc.meta_data->dictionary_page_offset) shift(*cc.meta_data->dictionary_page_offset);
      if (cc.meta_data->index_page_offset) shift(*cc.meta_data->index_page_offset);
    }
    if (rg.file_offset) shift(*rg.file_offset);
  }
  cm.total_compressed_size += delta;
  edit_meta(*meta);
  const std::string footer = SerializeFileMetaData(*meta);
  std::string out = file.substr(0, start) + header + body +
                    file.substr(start + old_len, footer_start - start - old_len) + footer;
  const uint32_t len = static_cast<uint32_t>(footer.size());
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += "PAR1";
  return out;
}

template <typename Edit>
std::string RewriteFirstPage(const std::string& file, Edit edit) {
  return RewriteFirstPage(file, edit, [](FileMetaData&) {});
}

// Reads `path` whole in a child process limited to `cap_mb` of address
// space: "ok", "error: <message>", or how the child died.
std::string ReadUnderCap(const std::string& path, int cap_mb, bool verify_crc = true) {
  return io::UnderMemoryCap(cap_mb, [&]() -> std::string {
    auto r = ParquetReader::Open(path);
    if (!r.ok()) return "error: " + std::string(r.status().message());
    (*r)->set_verify_page_crc(verify_crc);
    ReadOptions o;
    o.threads = 1;
    auto all = (*r)->ReadAll(o);
    return all.ok() ? "ok" : "error: " + std::string(all.status().message());
  });
}

class HostileParquetTest : public ::testing::Test {
 protected:
  // flat_uncompressed.parquet rewritten by our writer with `codec`.
  std::string Written(CompressionCodec codec) {
    auto r = ParquetReader::Open(kTestData + "/flat_uncompressed.parquet");
    EXPECT_TRUE(r.ok()) << r.status();
    auto arrays = (*r)->ReadAll(ReadOptions{});
    EXPECT_TRUE(arrays.ok()) << arrays.status();
    ParquetWriterOptions o;
    o.codec = codec;
    o.dictionary_bytes = 0;
    const std::string path = dir_.path() + "/w_" + std::string(CodecName(codec)) + ".parquet";
    auto w = ParquetWriter::Open(path, (*r)->fields(), o);
    EXPECT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE((*w)->WriteRowGroup(*arrays).ok());
    EXPECT_TRUE((*w)->Close().ok());
    return ReadBytes(path);
  }

  std::string Put(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.path() + "/" + name;
    WriteBytes(path, bytes);
    return path;
  }

  io::TempDir dir_{"fw_parquet_hostile"};
};

TEST_F(HostileParquetTest, PageClaimingAGigabyteIsRefusedUnderA256MegabyteCapForEveryCodec) {
  for (CompressionCodec codec : {CompressionCodec::kUncompressed, CompressionCodec::kSnappy, CompressionCodec::kGzip,
                                 CompressionCodec::kZstd, CompressionCodec::kBrotli, CompressionCodec::kLz4Raw}) {
    SCOPED_TRACE(std::string(CodecName(codec)));
    const std::string lying = RewriteFirstPage(Written(codec), [](PageHeader& h, std::string&) {
      h.uncompressed_page_size = 1000000000;
      h.crc.reset();
    });
    const std::string path = Put("claims_1e9.parquet", lying);
    const std::string got = ReadUnderCap(path, 256);
    EXPECT_EQ(got.rfind("error: ", 0), 0u) << got;
    EXPECT_NE(got.find("1000000000"), std::string::npos) << got;
  }
}

TEST_F(HostileParquetTest, UncompressedPageMustClaimItsStoredSize) {
  const std::string lying = RewriteFirstPage(Written(CompressionCodec::kUncompressed), [](PageHeader& h, std::string&) {
    h.uncompressed_page_size += 1;
    h.crc.reset();
  });
  const std::string got = ReadUnderCap(Put("plus_one.parquet", lying), 256);
  EXPECT_NE(got.find("the page header says"), std::string::npos) << got;
}

TEST_F(HostileParquetTest, WriterStoresPageCrcsAndAFlippedPageByteIsCaught) {
  const std::string good = Written(CompressionCodec::kUncompressed);
  // Every page the writer wrote carries a CRC.
  bool saw_crc = false;
  const std::string flipped = RewriteFirstPage(good, [&](PageHeader& h, std::string& body) {
    saw_crc = h.crc.has_value();
    body[body.size() / 2] ^= 0x10;
  });
  EXPECT_TRUE(saw_crc);
  EXPECT_EQ(ReadUnderCap(Put("good.parquet", good), 256), "ok");
  const std::string got = ReadUnderCap(Put("flipped.parquet", flipped), 256);
  EXPECT_NE(got.find("page CRC mismatch"), std::string::npos) << got;
  // The check can be skipped: the file then reads (a value has changed).
  EXPECT_EQ(ReadUnderCap(Put("flipped.parquet", flipped), 256, /*verify_crc=*/false), "ok");
}

// Headers that lie about counts: a page or a footer claiming billions of
// values is checked against what its level and value streams really hold
// before any array is sized by the claim.
TEST_F(HostileParquetTest, PageClaimingTwoBillionValuesIsRefusedUnderTheCap) {
  constexpr int32_t kClaim = 2147483647;
  for (const char* name : {"flat_uncompressed", "flat_v2"}) {
    SCOPED_TRACE(name);
    const std::string lying = RewriteFirstPage(
        ReadBytes(kTestData + "/" + name + ".parquet"),
        [](PageHeader& h, std::string&) {
          if (h.data_page_header) h.data_page_header->num_values = kClaim;
          if (h.data_page_header_v2) {
            h.data_page_header_v2->num_values = kClaim;
            h.data_page_header_v2->num_rows = kClaim;
          }
          h.crc.reset();
        },
        // The footer agrees with the page, so only the page's streams can
        // tell the claim is false.
        [](FileMetaData& m) {
          m.row_groups[0].columns[0].meta_data->num_values = kClaim;
          m.row_groups[0].num_rows = kClaim;
          m.num_rows = kClaim;
        });
    const std::string got = ReadUnderCap(Put("claims_2e9_values.parquet", lying), 256);
    EXPECT_EQ(got.rfind("error: ", 0), 0u) << got;
    EXPECT_NE(got.find("claims 2147483647 values"), std::string::npos) << got;
  }
}

TEST_F(HostileParquetTest, FooterClaimingATrillionValuesIsRefusedUnderTheCap) {
  const std::string file = ReadBytes(kTestData + "/flat_uncompressed.parquet");
  auto keep_page = [](PageHeader&, std::string&) {};
  // The chunk's count disagrees with the row group's rows.
  std::string got = ReadUnderCap(Put("chunk_1e12.parquet", RewriteFirstPage(file, keep_page, [](FileMetaData& m) {
                                       m.row_groups[0].columns[0].meta_data->num_values = 1000000000000;
                                     })),
                                 256);
  EXPECT_NE(got.find("the column chunk says 1000000000000 values, the row group 500 rows"), std::string::npos) << got;
  // Chunk and row group agree; the pages run out.
  got = ReadUnderCap(Put("rows_1e12.parquet", RewriteFirstPage(file, keep_page, [](FileMetaData& m) {
                       for (auto& c : m.row_groups[0].columns) c.meta_data->num_values = 1000000000000;
                       m.row_groups[0].num_rows = 1000000000000;
                       m.num_rows = 1000000000000;
                     })),
                     256);
  EXPECT_NE(got.find("ends after 500 of its 1000000000000 values"), std::string::npos) << got;
}

TEST_F(HostileParquetTest, ReferenceFilesStillReadUnderTheCap) {
  for (const char* name : {"flat_uncompressed", "flat_snappy", "flat_gzip", "flat_zstd", "flat_v2", "lists_zstd"}) {
    EXPECT_EQ(ReadUnderCap(kTestData + "/" + name + ".parquet", 256), "ok") << name;
  }
}

}  // namespace
}  // namespace flywheel::interop::parquet

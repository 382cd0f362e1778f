#include "flywheel/interop/ingest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "flywheel/base/checksum.h"
#include "flywheel/format/json_column.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::interop {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = FLYWHEEL_PARQUET_TESTDATA;
const std::vector<std::string> kFlat = {"flat_gzip", "flat_snappy", "flat_uncompressed", "flat_v2", "flat_zstd"};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t ExpectedRows(const std::string& name) {
  return json::parse(Slurp(kDir + "/" + name + ".expected.json"))["num_rows"].get<int64_t>();
}

class IngestTest : public ::testing::Test {
 protected:
  IngestOptions Options(std::vector<std::string> sources) {
    IngestOptions o;
    o.sources = std::move(sources);
    o.table = table_;
    o.threads = 2;
    o.command_line = "ingest_test";
    o.table_options.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    return o;
  }
  std::shared_ptr<table::Table> Open() {
    auto t = table::Table::Open(table_, {}, table::TableOptions{.fs = io::PosixFileSystem(io::PosixOptions{.sync = false})});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  // A copy of a reference file with bytes in its data pages damaged.
  std::string Damaged(const std::string& name) {
    std::string b = Slurp(kDir + "/" + name + ".parquet");
    for (size_t i = 100; i < b.size() / 2; i += 97) b[i] = static_cast<char>(b[i] ^ 0x5a);
    const std::string p = tmp_.path() + "/src/" + name + "_damaged.parquet";
    fs::create_directories(tmp_.path() + "/src");
    std::ofstream(p, std::ios::binary) << b;
    return p;
  }
  io::TempDir tmp_{"fw_ingest_test"};
  std::string table_ = tmp_.path() + "/t";
};

TEST_F(IngestTest, ParquetFilesFromTwoWritersLandInOneCommitWithProvenance) {
  std::vector<std::string> srcs;
  int64_t want_rows = 0;
  for (const auto& n : kFlat) {
    srcs.push_back(kDir + "/" + n + ".parquet");
    want_rows += ExpectedRows(n);
  }
  IngestProgress last;
  int reports = 0;
  IngestOptions o = Options(srcs);
  o.progress = [&](const IngestProgress& p) {
    last = p;
    ++reports;
  };
  auto r = Ingest(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows, want_rows);
  EXPECT_EQ(r->versions, std::vector<int64_t>{2});  // 1 = create, 2 = the one append
  EXPECT_GE(reports, 1);
  EXPECT_EQ(last.files_done, 5);
  EXPECT_EQ(last.rows, want_rows);
  auto t = Open();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->num_rows(), want_rows);
  EXPECT_EQ(t->schema().ToString().substr(0, 31), "id:int32?, i8:int8?, i16:int16?");
  const auto& props = t->manifest().operation.properties;
  ASSERT_TRUE(props.count("ingest.sources"));
  const json sources = json::parse(props.at("ingest.sources"));
  ASSERT_EQ(sources.size(), 5u);
  for (const auto& s : sources) {
    const std::string path = s["path"];
    const std::string data = Slurp(path);
    EXPECT_EQ(s["size"].get<int64_t>(), static_cast<int64_t>(data.size())) << path;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Checksum64(data)));
    EXPECT_EQ(s["xxh3_64"].get<std::string>(), hex) << path;
    EXPECT_EQ(s["format"], "parquet");
    const std::string stem = fs::path(path).stem().string();
    EXPECT_EQ(s["rows"].get<int64_t>(), ExpectedRows(stem)) << path;
  }
  EXPECT_EQ(props.at("ingest.command"), "ingest_test");
  EXPECT_EQ(props.at("flywheel.version"), "0.1.0");
}

TEST_F(IngestTest, CommitEveryNFilesCommitsSeveralVersions) {
  std::vector<std::string> srcs;
  for (const auto& n : kFlat) srcs.push_back(kDir + "/" + n + ".parquet");
  IngestOptions o = Options(srcs);
  o.commit_every = 2;
  auto r = Ingest(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->versions, (std::vector<int64_t>{2, 3, 4}));
}

TEST_F(IngestTest, NestedParquetKeepsItsShape) {
  auto r = Ingest(Options({kDir + "/images_snappy.parquet"}));
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = Open();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->schema().ToString(),
            "idx:int32?, image:struct<bytes: binary?, path: string?>?, label:int32?, "
            "meta:struct<w: int32?, tags: list<string?>?>?");
  auto b = t->Take({0, 1}, {"image", "meta"});
  ASSERT_TRUE(b.ok()) << b.status();
  const format::Column& image = b->columns[0];
  EXPECT_EQ(image.children[1].GetBytes(1), "img/000001.jpg");
  EXPECT_EQ(format::ValueToJson(b->columns[1], 0), "null");  // meta is null in row 0
  EXPECT_EQ(format::ValueToJson(b->columns[1], 1), R"({"w":1,"tags":["a1","b"]})");

  table_ = tmp_.path() + "/lists";
  r = Ingest(Options({kDir + "/lists_zstd.parquet"}));
  ASSERT_TRUE(r.ok()) << r.status();
  t = Open();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->schema().ToString(),
            "id:int64?, tokens:list<int32?>?, weights:list<float32?>?, words:list<string?>?, "
            "nested:list<list<int64?>?>?");
  auto c = t->Take({1}, {"tokens", "nested"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(format::ValueToJson(c->columns[0], 0), "[1]");
  EXPECT_EQ(format::ValueToJson(c->columns[1], 0), "[[1,2],[2]]");
}

TEST_F(IngestTest, BadSourcesFailSkipOrQuarantine) {
  const std::string good = kDir + "/flat_snappy.parquet";
  const std::string bad = Damaged("flat_zstd");
  // fail: an error naming the file, and no new version; the table this
  // ingest would have created does not exist afterwards
  // (FailedIngestIntoANewTableLeavesNoTable).
  auto r = Ingest(Options({good, bad}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("flat_zstd_damaged.parquet"), std::string::npos) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("nothing was committed and the new table was removed"),
            std::string::npos)
      << r.status();
  EXPECT_FALSE(fs::exists(table_));
  // Into an existing table: it stays at its last commit.
  ASSERT_TRUE(Ingest(Options({good})).ok());
  r = Ingest(Options({good, bad}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nothing was committed; the table is at its last commit"),
            std::string::npos)
      << r.status();
  auto t = Open();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->version(), 2);
  EXPECT_EQ(t->num_rows(), ExpectedRows("flat_snappy"));
  // skip: the good file lands, the bad one is recorded.
  IngestOptions o = Options({good, bad});
  o.on_error = OnError::kSkip;
  r = Ingest(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files_failed, 1);
  EXPECT_EQ(r->rows, ExpectedRows("flat_snappy"));
  EXPECT_FALSE(r->sources[1].error.empty());
  t = Open();
  EXPECT_EQ(t->num_rows(), 2 * ExpectedRows("flat_snappy"));
  const json skipped = json::parse(t->manifest().operation.properties.at("ingest.skipped"));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0]["path"].get<std::string>().find("damaged"), std::string::npos);
  // quarantine: also copied beside the table.
  o.on_error = OnError::kQuarantine;
  r = Ingest(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(fs::exists(table_ + "/_quarantine/flat_zstd_damaged.parquet"));
}

TEST_F(IngestTest, CancelledIngestCommitsNothing) {
  std::atomic<bool> cancel{true};
  IngestOptions o = Options({kDir + "/flat_snappy.parquet", kDir + "/flat_zstd.parquet"});
  o.cancel = &cancel;
  auto r = Ingest(o);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  // The table it would have created is not left behind.
  EXPECT_FALSE(fs::exists(table_));
  EXPECT_NE(std::string(r.status().message()).find("new table was removed"), std::string::npos) << r.status();
}

TEST_F(IngestTest, SourcesAreExpandedAndTheirFormatsDetected) {
  auto s = ExpandSources({kDir + "/flat_*.parquet"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size(), 5u);
  EXPECT_TRUE(std::is_sorted(s->begin(), s->end()));
  EXPECT_TRUE(absl::IsNotFound(ExpandSources({kDir + "/nothing_*.parquet"}).status()));
  EXPECT_TRUE(absl::IsNotFound(ExpandSources({kDir + "/missing.parquet"}).status()));
  EXPECT_EQ(*DetectFormat("a.parquet", SourceFormat::kAuto), SourceFormat::kParquet);
  EXPECT_EQ(*DetectFormat("a.JSONL", SourceFormat::kAuto), SourceFormat::kJsonLines);
  EXPECT_EQ(*DetectFormat("a.tsv", SourceFormat::kAuto), SourceFormat::kCsv);
  EXPECT_EQ(*DetectFormat("shard-000.tar.gz", SourceFormat::kAuto), SourceFormat::kWebDataset);
  EXPECT_EQ(*DetectFormat(kDir, SourceFormat::kAuto), SourceFormat::kFiles);
  auto unknown = DetectFormat("a.bin", SourceFormat::kAuto);
  EXPECT_NE(std::string(unknown.status().message()).find("--format"), std::string::npos);
  EXPECT_EQ(*DetectFormat("a.bin", SourceFormat::kCsv), SourceFormat::kCsv);
  EXPECT_FALSE(ParseOnError("ignore").ok());
  EXPECT_FALSE(ParseSourceFormat("xml").ok());
}

}  // namespace
}  // namespace flywheel::interop

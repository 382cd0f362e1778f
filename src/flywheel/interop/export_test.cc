#include "flywheel/interop/export.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "flywheel/interop/ingest.h"
#include "flywheel/interop/parquet/reader.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::interop {
namespace {

const std::string kDir = FLYWHEEL_PARQUET_TESTDATA;

class ExportTest : public ::testing::Test {
 protected:
  std::shared_ptr<table::Table> Ingested(const std::string& name) {
    IngestOptions o;
    o.sources = {kDir + "/" + name + ".parquet"};
    o.table = tmp_.path() + "/" + name;
    o.threads = 1;
    o.table_options.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    auto r = Ingest(o);
    EXPECT_TRUE(r.ok()) << r.status();
    auto t = table::Table::Open(o.table);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  io::TempDir tmp_{"fw_export_test"};
};

bool SameValues(const parquet::Array& a, const parquet::Array& b) {
  if (a.length != b.length || a.null_count != b.null_count || a.type.kind != b.type.kind) return false;
  for (int64_t i = 0; i < a.length; ++i) {
    if (a.IsValid(i) != b.IsValid(i)) return false;
  }
  if (a.offsets != b.offsets || a.children.size() != b.children.size()) return false;
  // Null slots may hold anything; compare valid fixed-width values only.
  if (a.offsets.empty()) {
    const size_t w = a.length ? a.values.size() / static_cast<size_t>(a.length) : 0;
    for (int64_t i = 0; i < a.length; ++i) {
      if (a.IsValid(i) && std::memcmp(a.values.data() + i * w, b.values.data() + i * w, w) != 0) return false;
    }
  } else if (a.values != b.values) {
    return false;
  }
  for (size_t c = 0; c < a.children.size(); ++c) {
    if (!SameValues(a.children[c], b.children[c])) return false;
  }
  return true;
}

TEST_F(ExportTest, FlatParquetThroughATableComesBackWithTheSameTypesAndValues) {
  for (const char* name : {"flat_snappy", "flat_v2", "arrowrs_default"}) {
    SCOPED_TRACE(name);
    auto t = Ingested(name);
    ASSERT_TRUE(t);
    const std::string out = tmp_.path() + "/" + name + ".out.parquet";
    ExportOptions o;
    o.row_group_rows = 1000;  // several row groups
    auto n = ExportParquet(*t, out, o);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, t->num_rows());
    auto a = parquet::ParquetReader::Open(kDir + "/" + std::string(name) + ".parquet");
    auto b = parquet::ParquetReader::Open(out);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ((*a)->fields().size(), (*b)->fields().size());
    for (size_t c = 0; c < (*a)->fields().size(); ++c) {
      EXPECT_EQ(parquet::FieldTypeName((*a)->fields()[c]), parquet::FieldTypeName((*b)->fields()[c]))
          << (*a)->fields()[c].name;
    }
    auto va = (*a)->ReadAll({});
    auto vb = (*b)->ReadAll({});
    ASSERT_TRUE(va.ok() && vb.ok());
    for (size_t c = 0; c < va->size(); ++c) {
      EXPECT_TRUE(SameValues((*va)[c], (*vb)[c])) << (*a)->fields()[c].name;
    }
    EXPECT_EQ((*b)->num_row_groups(), static_cast<int>((t->num_rows() + 999) / 1000));
  }
}

TEST_F(ExportTest, ProjectionVersionsAndErrors) {
  auto t = Ingested("flat_zstd");
  ASSERT_TRUE(t);
  ExportOptions o;
  o.columns = {"txt", "id"};
  const std::string out = tmp_.path() + "/p.parquet";
  ASSERT_TRUE(ExportParquet(*t, out, o).ok());
  auto r = parquet::ParquetReader::Open(out);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ((*r)->fields().size(), 2u);
  EXPECT_EQ((*r)->fields()[0].name, "txt");
  // An existing file is not overwritten; an unknown column is NotFound.
  EXPECT_FALSE(ExportParquet(*t, out, o).ok());
  o.columns = {"nope"};
  auto bad = ExportParquet(*t, tmp_.path() + "/q.parquet", o);
  EXPECT_TRUE(absl::IsNotFound(bad.status())) << bad.status();
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() + "/q.parquet"));
  // An older version exports as it was.
  auto v1 = table::Table::Open(t->uri(), table::OpenOptions{.version = 1});
  ASSERT_TRUE(v1.ok());
  auto n = ExportParquet(**v1, tmp_.path() + "/v1.parquet", ExportOptions{});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
}

}  // namespace
}  // namespace flywheel::interop

// The loader's image columns: JPEG bytes decoded by the workers, keyed
// randomness, and what happens to rows that do not decode.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "flywheel/format/column.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/loader/loader.h"
#include "flywheel/loader/transforms/jpeg_testing.h"

namespace flywheel::loader {
namespace {

using format::DataType;
using format::TypeId;

constexpr int64_t kRows = 60;
// Rows whose bytes are not a JPEG (a truncated one, then garbage).
bool Broken(int64_t id) { return id % 13 == 5; }

class LoaderImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table::TableOptions o;
    o.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    auto corpus = testing_util::SyntheticJpegCorpus(static_cast<int>(kRows));
    std::vector<std::string> jpegs;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < kRows; ++i) {
      std::string bytes(corpus[i].begin(), corpus[i].end());
      if (Broken(i)) bytes = i % 2 ? bytes.substr(0, bytes.size() / 3) : std::string("not a jpeg at all");
      jpegs.push_back(std::move(bytes));
      ids.push_back(i);
    }
    format::RecordBatch b;
    b.schema = *format::Schema::Parse("id:int64, jpeg:binary");
    b.num_rows = kRows;
    b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ids)));
    b.columns.push_back(format::MakeStringColumn(jpegs, /*binary=*/true));
    auto t = table::Table::Create(tmp_.Sub("images"), b.schema, o);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->Append(b).ok());
    table_ = *t;
  }

  LoaderOptions Options(OnError on_error, int threads = 2) {
    LoaderOptions o;
    o.batch_size = 8;
    o.seed = 3;
    o.num_threads = threads;
    o.on_error = on_error;
    ImageColumn ic;
    ic.column = "jpeg";
    ic.options.height = 16;
    ic.options.width = 20;
    o.images.push_back(ic);
    return o;
  }

  std::unique_ptr<Loader> Make(const LoaderOptions& o) {
    auto l = Loader::Create({table_}, o);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? std::move(*l) : nullptr;
  }

  io::TempDir tmp_{"fw_loader_images_test"};
  std::shared_ptr<table::Table> table_;
};

TEST_F(LoaderImagesTest, SkipLeavesUndecodableRowsOutAndDecodesTheRestDeterministically) {
  std::string first;
  for (int threads : {1, 2, 4}) {
    auto l = Make(Options(OnError::kSkip, threads));
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->schema().fields[1].type, DataType::Tensor(TypeId::kUInt8, {16, 20, 3}));
    std::set<int64_t> seen;
    std::string bytes;
    int64_t short_batches = 0;
    while (true) {
      auto b = l->Next(absl::Seconds(30));
      ASSERT_TRUE(b.ok()) << b.status();
      if (!*b) break;
      const Batch& batch = **b;
      const BatchColumn* id = batch.column("id");
      const BatchColumn* img = batch.column("jpeg");
      ASSERT_EQ(img->offsets, nullptr);
      ASSERT_EQ(img->values_size, static_cast<size_t>(batch.num_rows) * 16 * 20 * 3);
      if (batch.num_rows < 8) ++short_batches;
      for (int64_t i = 0; i < batch.num_rows; ++i) {
        const int64_t v = reinterpret_cast<const int64_t*>(id->values)[i];
        EXPECT_FALSE(Broken(v)) << v;
        EXPECT_EQ(batch.indices[i], v);
        EXPECT_TRUE(seen.insert(v).second) << v;
      }
      bytes.append(reinterpret_cast<const char*>(img->values), img->values_size);
    }
    int64_t good = 0;
    for (int64_t i = 0; i < kRows; ++i) good += !Broken(i);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), good);
    EXPECT_GT(short_batches, 0);
    EXPECT_EQ(l->stats().skipped_rows, kRows - good);
    EXPECT_GT(l->stats().transform_seconds, 0);
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first) << "decoded pixels differ with " << threads << " threads";
  }
}

TEST_F(LoaderImagesTest, EntropyIndexesServeLaterEpochsWithTheSameBytes) {
  // Images no other test in this process has seen (the index cache is
  // process-wide).
  table::TableOptions to;
  to.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  auto corpus = testing_util::SyntheticJpegCorpus(24, /*first=*/7000);
  std::vector<std::string> jpegs;
  for (const auto& j : corpus) jpegs.emplace_back(j.begin(), j.end());
  format::RecordBatch rb;
  rb.schema = *format::Schema::Parse("jpeg:binary");
  rb.num_rows = static_cast<int64_t>(jpegs.size());
  rb.columns.push_back(format::MakeStringColumn(jpegs, /*binary=*/true));
  auto t = table::Table::Create(tmp_.Sub("fresh"), rb.schema, to);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Append(rb).ok());
  auto epoch_bytes = [](Loader& l) {
    std::string bytes;
    while (true) {
      auto b = l.Next(absl::Seconds(30));
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      const BatchColumn* img = (*b)->column("jpeg");
      bytes.append(reinterpret_cast<const char*>(img->values), img->values_size);
    }
    return bytes;
  };
  LoaderOptions with = Options(OnError::kFail);
  with.images[0].options.height = with.images[0].options.width = 24;
  LoaderOptions without = with;
  without.images[0].options.index_cache_mb = 0;
  auto a = Loader::Create({*t}, with);
  auto b = Loader::Create({*t}, without);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(epoch_bytes(**a), epoch_bytes(**b)) << "epoch " << epoch;
  }
  // Epoch 2 (and what was read ahead of the next ones) goes through the
  // indexes, except crops whose MCUs cover the whole image; epoch 0 sees
  // each image first, epoch 1 indexes each while decoding it.
  EXPECT_GE((*a)->stats().indexed_images, 12);
  EXPECT_EQ((*b)->stats().indexed_images, 0);
}

TEST_F(LoaderImagesTest, FailNamesTheRowAndKeepsThePosition) {
  auto l = Make(Options(OnError::kFail));
  ASSERT_NE(l, nullptr);
  Status err;
  for (int k = 0; k < 20 && err.ok(); ++k) {
    auto b = l->Next(absl::Seconds(30));
    if (!b.ok()) err = b.status();
  }
  ASSERT_FALSE(err.ok());
  const std::string msg(err.message());
  EXPECT_NE(msg.find("column 'jpeg'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" row "), std::string::npos) << msg;
  EXPECT_NE(msg.find(table_->uri()), std::string::npos) << msg;
  const LoaderState s = l->state();
  auto again = l->Next(absl::Seconds(30));
  EXPECT_FALSE(again.ok());  // the same batch, read again
  EXPECT_EQ(l->state(), s);
}

TEST_F(LoaderImagesTest, CropsDependOnTheRowNotOnTheRankLayout) {
  // The image of a row is the same when it is served by rank 0 of 1 or by
  // rank 1 of 2: its key is (seed, epoch, table, row).
  auto pixels_by_id = [&](int rank, int world) {
    LoaderOptions o = Options(OnError::kSkip);
    o.rank = rank;
    o.world_size = world;
    auto l = Make(o);
    std::map<int64_t, std::string> out;
    while (true) {
      auto b = l->Next(absl::Seconds(30));
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      const BatchColumn* id = (*b)->column("id");
      const BatchColumn* img = (*b)->column("jpeg");
      const size_t w = 16 * 20 * 3;
      for (int64_t i = 0; i < (*b)->num_rows; ++i) {
        out[reinterpret_cast<const int64_t*>(id->values)[i]] =
            std::string(reinterpret_cast<const char*>(img->values) + i * w, w);
      }
    }
    return out;
  };
  auto one = pixels_by_id(0, 1);
  auto r1 = pixels_by_id(1, 2);
  ASSERT_FALSE(r1.empty());
  for (const auto& [id, px] : r1) EXPECT_EQ(one.at(id), px) << id;
}

TEST_F(LoaderImagesTest, BadImageOptionsAreClearErrors) {
  LoaderOptions o = Options(OnError::kFail);
  o.images[0].column = "id";
  auto l = Loader::Create({table_}, o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("binary"), std::string::npos) << l.status();
  o = Options(OnError::kFail);
  o.images[0].column = "nope";
  l = Loader::Create({table_}, o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("'nope'"), std::string::npos) << l.status();
  o = Options(OnError::kFail);
  o.images[0].options.height = 0;
  l = Loader::Create({table_}, o);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("height"), std::string::npos) << l.status();
}

}  // namespace
}  // namespace flywheel::loader

#include "flywheel/io/file_system.h"
#include "flywheel/io/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

namespace flywheel::io {
namespace {

class FileSystemTest : public ::testing::Test {
 protected:
  io::TempDir tmp_{"fw_io_test"};
  std::string dir_ = tmp_.path();
  std::shared_ptr<FileSystem> fs_ = PosixFileSystem();
};

TEST_F(FileSystemTest, PutIfAbsentPublishesOnceThenRefuses) {
  const std::string p = JoinPath(dir_, "m1");
  ASSERT_TRUE(fs_->PutIfAbsent(p, "first").ok());
  Status s = fs_->PutIfAbsent(p, "second");
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_EQ(*fs_->ReadFile(p), "first");
  // No temp files are left behind.
  auto list = fs_->List(dir_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "m1");
}

TEST_F(FileSystemTest, PutIfAbsentHasExactlyOneWinnerUnderContention) {
  const std::string p = JoinPath(dir_, "contended");
  std::atomic<int> wins{0}, losses{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Status s = fs_->PutIfAbsent(p, std::string(1000, static_cast<char>('a' + t)));
      if (s.ok()) wins++;
      else if (absl::IsAlreadyExists(s)) losses++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(losses.load(), 7);
  const std::string data = *fs_->ReadFile(p);
  EXPECT_EQ(data, std::string(1000, data[0]));
}

TEST_F(FileSystemTest, ReadRangesWithAndWithoutMmap) {
  const std::string p = JoinPath(dir_, "f");
  auto w = fs_->NewWritable(p);
  ASSERT_TRUE(w.ok());
  std::string content;
  for (int i = 0; i < 3000000; ++i) content += static_cast<char>(i % 251);
  ASSERT_TRUE((*w)->Append(content).ok());
  EXPECT_EQ((*w)->position(), content.size());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_TRUE(absl::IsAlreadyExists(fs_->NewWritable(p).status()));
  for (bool mmap : {true, false}) {
    auto f = fs_->OpenRead(p, FileOpenOptions{.mmap = mmap});
    ASSERT_TRUE(f.ok());
    EXPECT_EQ((*f)->size(), content.size());
    EXPECT_EQ((*f)->mapped_data() != nullptr, mmap);
    std::string buf(100, '\0');
    ASSERT_TRUE((*f)->ReadAt(2999900, 100, buf.data()).ok());
    EXPECT_EQ(buf, content.substr(2999900));
    Status s = (*f)->ReadAt(2999950, 100, buf.data());
    EXPECT_TRUE(absl::IsOutOfRange(s));
    EXPECT_NE(s.message().find(p), std::string::npos);
  }
}

TEST_F(FileSystemTest, ListStatDeleteAndErrors) {
  ASSERT_TRUE(fs_->CreateDirs(JoinPath(dir_, "a/b/c")).ok());
  ASSERT_TRUE(fs_->Put(JoinPath(dir_, "a/x"), "1").ok());
  ASSERT_TRUE(fs_->Put(JoinPath(dir_, "a/x"), "22").ok());  // replace
  EXPECT_EQ(*fs_->ReadFile(JoinPath(dir_, "a/x")), "22");
  auto list = fs_->List(JoinPath(dir_, "a"));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "b");
  EXPECT_TRUE((*list)[0].is_dir);
  EXPECT_EQ((*list)[1].size, 2u);
  EXPECT_TRUE(*fs_->Exists(JoinPath(dir_, "a/x")));
  ASSERT_TRUE(fs_->Delete(JoinPath(dir_, "a/x")).ok());
  EXPECT_FALSE(*fs_->Exists(JoinPath(dir_, "a/x")));
  EXPECT_TRUE(absl::IsNotFound(fs_->Delete(JoinPath(dir_, "a/x"))));
  EXPECT_TRUE(absl::IsNotFound(fs_->List(JoinPath(dir_, "nope")).status()));
  EXPECT_TRUE(absl::IsNotFound(fs_->OpenRead(JoinPath(dir_, "nope")).status()));
}

TEST(PathTest, JoinPath) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "/b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
}

// Scheme URIs never become local folders named "s3:" (hostile-input issue, item 1).
TEST(PathTest, SchemeUrisAreRefusedAndFileUrisNameLocalPaths) {
  EXPECT_EQ(*LocalPath("data/t"), "data/t");
  EXPECT_EQ(*LocalPath("/abs/t"), "/abs/t");
  EXPECT_EQ(*LocalPath("file:///abs/t"), "/abs/t");
  EXPECT_EQ(*LocalPath("FILE://localhost/abs/t"), "/abs/t");
  EXPECT_EQ(*LocalPath("file:///a%20b/%C3%A9"), "/a b/\xC3\xA9");
  EXPECT_EQ(*LocalPath("weird:name/x"), "weird:name/x");  // no "://": a local name
  for (const char* uri : {"s3://bucket/t", "gs://b/t", "hdfs://nn/t", "S3://B/t", "az+blob://x/y"}) {
    auto r = LocalPath(uri);
    ASSERT_FALSE(r.ok()) << uri;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
    EXPECT_NE(std::string(r.status().message()).find(uri), std::string::npos) << r.status();
  }
  EXPECT_FALSE(LocalPath("file://otherhost/t").ok());
  EXPECT_FALSE(LocalPath("file:///a%00b").ok());
  // Every PosixFileSystem call refuses them before touching the disk.
  TempDir tmp("fw_scheme");
  auto fs = PosixFileSystem();
  EXPECT_TRUE(absl::IsInvalidArgument(fs->CreateDirs("s3://bucket/t/_versions")));
  EXPECT_TRUE(absl::IsInvalidArgument(fs->PutIfAbsent("s3://bucket/t/x", "data")));
  EXPECT_FALSE(fs->Exists("s3:").value_or(true));
  ASSERT_TRUE(fs->PutIfAbsent("file://" + tmp.path() + "/via_uri", "ok").ok());
  EXPECT_EQ(*fs->ReadFile(tmp.path() + "/via_uri"), "ok");
}

TEST(MemoryFileTest, ReadsAndBoundsChecks) {
  auto f = NewMemoryFile("mem", "hello");
  char buf[3];
  ASSERT_TRUE(f->ReadAt(2, 3, buf).ok());
  EXPECT_EQ(std::string(buf, 3), "llo");
  EXPECT_TRUE(absl::IsOutOfRange(f->ReadAt(4, 3, buf)));
}

}  // namespace
}  // namespace flywheel::io

// Damaged table files (docs/format/table.md): every corruption of a manifest,
// deletion vector, data file, `_latest` hint or tag must surface as an error
// naming the damaged file (or, for the hint, be ignored), never as a crash or
// as wrong rows.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/base/checksum.h"
#include "flywheel/format/column.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/table.h"
#include "temp_table_test.h"

namespace flywheel::table {
namespace {

using format::DataType;
using format::RecordBatch;
using format::Schema;
using format::TypeId;
using ::testing::HasSubstr;

Schema TestSchema() { return *Schema::Parse("id:int64, name:string"); }

TableOptions Options() {
  TableOptions o;
  o.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  o.shard.page_size = 1024;
  return o;
}

RecordBatch Rows(int64_t start, int64_t n) {
  std::vector<int64_t> ids(n);
  std::vector<std::string> names(n);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = start + i;
    names[i] = absl::StrCat("r", start + i);
  }
  RecordBatch b;
  b.schema = TestSchema();
  b.num_rows = n;
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ids)));
  b.columns.push_back(format::MakeStringColumn(names));
  return b;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  ASSERT_TRUE(out.good()) << "writing " << path;
}

// Reads every row of `t`; returns the ids, or the first error.
Result<std::vector<int64_t>> ScanAll(const Table& t) {
  FW_ASSIGN_OR_RETURN(auto it, t.Scan());
  std::vector<int64_t> ids;
  while (true) {
    FW_ASSIGN_OR_RETURN(auto b, it->Next());
    if (!b) break;
    for (int64_t i = 0; i < b->num_rows; ++i) ids.push_back(b->columns[0].values.as<int64_t>()[i]);
  }
  return ids;
}

// A manifest file around `body` with a correct header and checksum: damage
// that a checksum cannot catch (a buggy or foreign writer).
std::string Seal(const std::string& body) {
  char header[96];
  std::snprintf(header, sizeof header, "flywheel-manifest 1 %016" PRIx64 " %zu\n", Checksum64(body),
                body.size());
  return header + body;
}

// Runs `fn` in a forked child so that a crash fails the test instead of
// ending the test binary. Returns the child's wait status; -1 if it hung
// past 30 s (it is then killed).
int RunIsolated(const std::function<int()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(fn());
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  pollfd p{pidfd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, 30000);
  } while (r < 0 && errno == EINTR);
  int status = 0;
  if (r <= 0) ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ::close(pidfd);
  return r <= 0 ? -1 : status;
}

// Versions: 1 create, 2 append ids 0..19, 3 append 20..39, 4 delete ids 3, 5
// and 25 (one deletion vector per fragment). Tag "before-delete" = 3.
class TableCorruptionTest : public TempTableTest {
 protected:
  void SetUp() override {
    TempTableTest::SetUp();
    auto t = Table::Create(uri_, TestSchema(), Options());
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->Append(Rows(0, 20)).ok());
    ASSERT_TRUE((*t)->Append(Rows(20, 20)).ok());
    ASSERT_TRUE((*t)->Tag("before-delete").ok());
    ASSERT_TRUE((*t)->Delete({3, 5, 25}).ok());
    ASSERT_EQ((*t)->version(), 4);
    const Manifest& m = (*t)->manifest();
    ASSERT_EQ(m.fragments.size(), 2u);
    ASSERT_FALSE(m.fragments[0].deletion.path.empty());
    ASSERT_FALSE(m.fragments[1].deletion.path.empty());
    manifest_path_ = uri_ + "/_versions/00000000000000000004.manifest";
    dv_path_ = uri_ + "/" + m.fragments[0].deletion.path;
    data_path_ = uri_ + "/" + m.fragments[1].files[0].path;
    for (int64_t i = 0; i < 40; ++i) {
      if (i != 3 && i != 5 && i != 25) live_.push_back(i);
    }
    auto ids = ScanAll(**t);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(*ids, live_);
  }

  // Opening version 4 (explicitly and as the latest) must fail naming the
  // manifest; `what` describes the damage.
  void ExpectManifestRejected(const std::string& what) {
    SCOPED_TRACE(what);
    auto t = Table::Open(uri_, OpenOptions{.version = 4}, Options());
    ASSERT_FALSE(t.ok()) << "opened a damaged manifest";
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(manifest_path_)) << t.status();
    auto latest = Table::Open(uri_, {}, Options());
    ASSERT_FALSE(latest.ok()) << "opened a damaged manifest as the latest version";
    EXPECT_THAT(std::string(latest.status().message()), HasSubstr(manifest_path_)) << latest.status();
  }

  // Version 4 opens, but reading rows of fragment 0 must fail naming `path`.
  void ExpectReadsFailNaming(const std::string& path, const std::string& what) {
    SCOPED_TRACE(what);
    auto t = Table::Open(uri_, OpenOptions{.version = 4}, Options());
    ASSERT_TRUE(t.ok()) << t.status();
    auto ids = ScanAll(**t);
    ASSERT_FALSE(ids.ok()) << "scan read a damaged file";
    EXPECT_THAT(std::string(ids.status().message()), HasSubstr(path)) << ids.status();
    auto rows = (*t)->Take({0, 1});
    ASSERT_FALSE(rows.ok()) << "take read a damaged file";
    EXPECT_THAT(std::string(rows.status().message()), HasSubstr(path)) << rows.status();
  }

  void ExpectIntact() {
    auto t = Table::Open(uri_, {}, Options());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->version(), 4);
    auto ids = ScanAll(**t);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, live_);
  }

  std::string manifest_path_, dv_path_, data_path_;
  std::vector<int64_t> live_;
};

TEST_F(TableCorruptionTest, EveryFlippedManifestByteIsRejectedNamingTheFile) {
  const std::string good = ReadAll(manifest_path_);
  ASSERT_GT(good.size(), 100u);
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      WriteAll(manifest_path_, bad);
      ExpectManifestRejected(absl::StrCat("byte ", i, " of ", good.size(), " xor ", mask));
      if (HasFatalFailure() || HasFailure()) {
        WriteAll(manifest_path_, good);
        return;  // one report is enough
      }
    }
  }
  WriteAll(manifest_path_, good);
  ExpectIntact();
}

TEST_F(TableCorruptionTest, EveryTruncatedManifestIsRejectedNamingTheFile) {
  const std::string good = ReadAll(manifest_path_);
  for (size_t len = 0; len < good.size(); ++len) {
    WriteAll(manifest_path_, good.substr(0, len));
    ExpectManifestRejected(absl::StrCat("truncated to ", len, " of ", good.size(), " bytes"));
    if (HasFailure()) break;
  }
  // Extra bytes after the body are damage too.
  if (!HasFailure()) {
    WriteAll(manifest_path_, good + "x");
    ExpectManifestRejected("one byte appended");
  }
  WriteAll(manifest_path_, good);
  ExpectIntact();
}

TEST_F(TableCorruptionTest, DamagedDeletionVectorFailsReadsNamingTheFile) {
  const std::string good = ReadAll(dv_path_);
  ASSERT_GE(good.size(), 24u);
  for (size_t i = 0; i < good.size() && !HasFailure(); ++i) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      WriteAll(dv_path_, bad);
      ExpectReadsFailNaming(dv_path_, absl::StrCat("byte ", i, " of ", good.size(), " xor ", mask));
      if (HasFailure()) break;
    }
  }
  for (size_t len = 0; len < good.size() && !HasFailure(); ++len) {
    WriteAll(dv_path_, good.substr(0, len));
    ExpectReadsFailNaming(dv_path_, absl::StrCat("truncated to ", len, " bytes"));
  }
  if (!HasFailure()) {
    WriteAll(dv_path_, good + std::string(1, '\x01'));
    ExpectReadsFailNaming(dv_path_, "one byte appended");
  }
  // A vector of the right format but another row count than the manifest's.
  if (!HasFailure()) {
    const std::string other = ReadAll(uri_ + "/" + [&] {
      auto t = Table::Open(uri_, {}, Options());
      return (*t)->manifest().fragments[1].deletion.path;
    }());
    WriteAll(dv_path_, other);  // holds 1 row; the manifest says 2
    ExpectReadsFailNaming(dv_path_, "another fragment's vector");
  }
  // A missing vector.
  if (!HasFailure()) {
    ASSERT_EQ(::unlink(dv_path_.c_str()), 0);
    ExpectReadsFailNaming(dv_path_, "deleted");
  }
  WriteAll(dv_path_, good);
  ExpectIntact();
}

TEST_F(TableCorruptionTest, LatestHintIsNeverTrusted) {
  const std::string hint = uri_ + "/_latest";
  ASSERT_EQ(ReadAll(hint), "4");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"garbage", "no version here"},
      {"binary garbage", std::string("\xff\x00\x17\x80", 4)},
      {"too high", "999"},
      {"just past the end", "5"},
      {"far too high", "99999999999999999999999999"},
      {"too low", "1"},
      {"a middle version", "2"},
      {"zero", "0"},
      {"negative", "-3"},
      {"empty", ""},
      {"number then junk", "2junk"},
      {"whitespace", "  \n"},
  };
  for (const auto& [what, content] : cases) {
    SCOPED_TRACE(what);
    WriteAll(hint, content);
    auto t = Table::Open(uri_, {}, Options());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->version(), 4);
    auto latest = (*t)->LatestVersion();
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, 4);
  }
  // No hint at all.
  ASSERT_EQ(::unlink(hint.c_str()), 0);
  auto t = Table::Open(uri_, {}, Options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->version(), 4);
  // A stale hint left by a writer that died before updating it: a commit
  // made since is still found.
  WriteAll(hint, "1");
  ASSERT_TRUE((*t)->Append(Rows(40, 1)).ok());
  WriteAll(hint, "2");
  auto newer = Table::Open(uri_, {}, Options());
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ((*newer)->version(), 5);
}

TEST_F(TableCorruptionTest, MissingDataFileFailsReadsNamingTheFile) {
  const std::string aside = data_path_ + ".aside";
  ASSERT_EQ(::rename(data_path_.c_str(), aside.c_str()), 0);
  auto t = Table::Open(uri_, OpenOptions{.version = 4}, Options());
  ASSERT_TRUE(t.ok()) << t.status();
  auto ids = ScanAll(**t);
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr(data_path_)) << ids.status();
  // Rows of the intact fragment still read; rows of the lost one fail.
  auto first = (*t)->Take({0, 16});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->columns[0].values.as<int64_t>()[1], 18);
  auto lost = (*t)->Take({18});
  ASSERT_FALSE(lost.ok());
  EXPECT_THAT(std::string(lost.status().message()), HasSubstr(data_path_)) << lost.status();
  // The version before the delete references the same file.
  auto v3 = Table::Open(uri_, OpenOptions{.tag = "before-delete"}, Options());
  ASSERT_TRUE(v3.ok()) << v3.status();
  auto ids3 = ScanAll(**v3);
  ASSERT_FALSE(ids3.ok());
  EXPECT_THAT(std::string(ids3.status().message()), HasSubstr(data_path_)) << ids3.status();
  // A file of the right name but cut short is refused too.
  const std::string good = ReadAll(aside);
  WriteAll(data_path_, good.substr(0, good.size() / 2));
  auto half = Table::Open(uri_, OpenOptions{.version = 4}, Options());
  ASSERT_TRUE(half.ok()) << half.status();
  auto ids_half = ScanAll(**half);
  ASSERT_FALSE(ids_half.ok());
  EXPECT_THAT(std::string(ids_half.status().message()), HasSubstr(data_path_)) << ids_half.status();
  ASSERT_EQ(::rename(aside.c_str(), data_path_.c_str()), 0);
  ExpectIntact();
}

TEST_F(TableCorruptionTest, GarbageTagFileFailsOpenByTagClearly) {
  const std::string tag_path = uri_ + "/_tags/before-delete";
  const std::string good = ReadAll(tag_path);
  const std::vector<std::pair<std::string, std::string>> corrupt = {
      {"garbage", "garbage\x01\x02"},
      {"empty", ""},
      {"truncated JSON", good.substr(0, good.size() / 2)},
      {"no version key", "{\"timestamp_ms\": 5}"},
      {"version is a string", "{\"version\": \"three\"}"},
      {"an array", "[3]"},
      {"a bare number", "3"},
      {"null version", "{\"version\": null}"},
  };
  for (const auto& [what, content] : corrupt) {
    SCOPED_TRACE(what);
    WriteAll(tag_path, content);
    auto t = Table::Open(uri_, OpenOptions{.tag = "before-delete"}, Options());
    ASSERT_FALSE(t.ok()) << "opened version " << (*t)->version() << " from a corrupt tag";
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(tag_path)) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("corrupt")) << t.status();
  }
  // Well-formed, but naming versions that do not exist.
  for (const std::string content : {"{\"version\": 99}", "{\"version\": 0}", "{\"version\": -7}"}) {
    SCOPED_TRACE(content);
    WriteAll(tag_path, content);
    auto t = Table::Open(uri_, OpenOptions{.tag = "before-delete"}, Options());
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("retained versions: 1..4")) << t.status();
  }
  // Opening by version and the latest are unaffected by a bad tag.
  ExpectIntact();
  WriteAll(tag_path, good);
  auto t = Table::Open(uri_, OpenOptions{.tag = "before-delete"}, Options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->version(), 3);
  auto ids = ScanAll(**t);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 40u);
}

// Regression test; the bug was (flywheel/table/manifest.cc, Manifest::Decode, and table.cc,
// Table::Take): Decode accepts a fragment whose "deletion" has a count but an
// empty path. Impl::Deletions then returns a null vector; Take dereferences
// it (`dvs[f]->LiveToPhysical(local)`) and the process dies with SIGSEGV,
// while Scan skips the null vector and returns the 2 deleted rows as live
// (20 rows where the manifest promises 18). Random corruption cannot produce
// this (the checksum catches it), a buggy or foreign writer can. Fix: Decode
// rejects a "deletion" object with an empty path or a count < 1 (DataLoss
// naming the manifest), and Take/Scan return DataLoss instead of using a null
// vector when deletion.count > 0.
TEST_F(TableCorruptionTest, ChecksummedManifestWithInconsistentDeletionIsRefusedNotACrash) {

  const std::string good = ReadAll(manifest_path_);
  const std::string body = good.substr(good.find('\n') + 1);
  const std::string dv_rel = dv_path_.substr(uri_.size() + 1);
  const size_t at = body.find("\"path\":\"" + dv_rel + "\"");
  ASSERT_NE(at, std::string::npos) << body;
  // Fragment 0 says 2 rows are deleted but names no deletion vector.
  std::string bad = body;
  bad.replace(at, dv_rel.size() + 9, "\"path\":\"\"");
  WriteAll(manifest_path_, Seal(bad));
  const int status = RunIsolated([&] {
    auto t = Table::Open(uri_, OpenOptions{.version = 4}, Options());
    if (!t.ok()) return 0;  // refused at open: fine
    // Otherwise every read must fail (2 rows are unaccounted for), not crash.
    auto rows = (*t)->Take({0, 1});
    auto ids = ScanAll(**t);
    std::fprintf(stderr, "take: %s\nscan: %s\n", rows.status().ToString().c_str(),
                 ids.status().ToString().c_str());
    return rows.ok() || ids.ok() ? 1 : 0;
  });
  EXPECT_TRUE(WIFEXITED(status)) << "reading crashed (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "read rows of an inconsistent manifest";
  WriteAll(manifest_path_, good);
  ExpectIntact();
}

}  // namespace
}  // namespace flywheel::table

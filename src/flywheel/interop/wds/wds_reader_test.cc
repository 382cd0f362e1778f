#include "flywheel/interop/wds/wds_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/interop/wds/tar.h"
#include "flywheel/io/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::interop::internal_wds {

// Tar building helpers, defined in tar_test.cc (same test binary).
std::string TestTarHeader(std::string_view name, uint64_t size, char type, std::string_view link,
                          int checksum_delta = 0, bool base256_size = false);
std::string TestPadded(std::string_view data);
std::string TestTarFile(std::string_view name, std::string_view data, char type = '0',
                        std::string_view link = "");
std::string TestTarEnd();
std::string TestGzip(std::string_view data);
Status TestWriteFile(const std::string& path, std::string_view data);

namespace {

using format::RecordBatch;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Values = std::vector<std::optional<std::string>>;

struct File {
  std::string name;
  std::string data;
};

std::string MakeTar(const std::vector<File>& files, bool end = true) {
  std::string out;
  for (const auto& f : files) out += TestTarFile(f.name, f.data);
  if (end) out += TestTarEnd();
  return out;
}

Result<std::vector<RecordBatch>> ReadAll(WdsReader& reader) {
  std::vector<RecordBatch> out;
  for (;;) {
    FW_ASSIGN_OR_RETURN(auto batch, reader.Next());
    if (!batch.has_value()) break;
    FW_RETURN_IF_ERROR(batch->Validate());
    if (!(batch->schema == reader.schema())) return absl::InternalError("batch schema differs");
    out.push_back(std::move(*batch));
  }
  return out;
}

// Column `name` over all batches; binary/string as bytes, int64 as decimal.
Values Column(const std::vector<RecordBatch>& batches, std::string_view name) {
  Values out;
  for (const auto& b : batches) {
    const int i = b.schema.FieldIndex(name);
    if (i < 0) {
      ADD_FAILURE() << "no column " << name;
      return out;
    }
    const format::Column& c = b.columns[static_cast<size_t>(i)];
    for (int64_t r = 0; r < b.num_rows; ++r) {
      if (!c.IsValid(r)) {
        out.push_back(std::nullopt);
      } else if (c.type.id == format::TypeId::kInt64) {
        out.push_back(std::to_string(c.values.as<int64_t>()[r]));
      } else {
        out.push_back(std::string(c.GetBytes(r)));
      }
    }
  }
  return out;
}

class WdsReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, std::string_view bytes) {
    const std::string path = tmp_.Sub(name);
    EXPECT_TRUE(TestWriteFile(path, bytes).ok());
    return path;
  }

  // Opens and reads the whole archive.
  Result<std::vector<RecordBatch>> Read(std::string_view bytes, const WdsReadOptions& options = {},
                                        format::Schema* schema = nullptr,
                                        std::vector<std::string>* skipped = nullptr) {
    const std::string path = Write("t" + std::to_string(counter_++) + ".tar", bytes);
    FW_ASSIGN_OR_RETURN(auto reader, OpenWebDataset(path, options));
    if (schema != nullptr) *schema = reader->schema();
    if (skipped != nullptr) *skipped = reader->skipped_entries();
    return ReadAll(*reader);
  }

  io::TempDir tmp_{"fw_wds_test"};
  int counter_ = 0;
};

TEST_F(WdsReaderTest, GroupsFilesIntoSamplesWithTypedNullableColumns) {
  const std::string jpg("\xff\xd8\xff\x00jpeg", 8);
  const std::string tar = MakeTar({{"s/000.jpg", jpg},
                                   {"s/000.txt", "caption zero"},
                                   {"s/000.cls", "3\n"},
                                   {"s/000.json", "{\"a\": 1}"},
                                   {"s/001.jpg", "j1"},
                                   {"s/001.cls", " -7 "},
                                   {"s/002.txt", "two"},
                                   {"s/002.seg.png", "png"}});
  format::Schema schema;
  auto batches = Read(tar, {}, &schema);
  ASSERT_TRUE(batches.ok()) << batches.status();
  // Extension columns sorted by name; all nullable.
  EXPECT_EQ(schema.ToString(),
            "__key__:string, cls:int64?, jpg:binary?, json:string?, seg.png:binary?, txt:string?");
  ASSERT_EQ(batches->size(), 1u);
  EXPECT_EQ((*batches)[0].num_rows, 3);
  EXPECT_THAT(Column(*batches, "__key__"), ElementsAre("s/000", "s/001", "s/002"));
  EXPECT_THAT(Column(*batches, "jpg"), ElementsAre(jpg, "j1", std::nullopt));
  EXPECT_THAT(Column(*batches, "txt"), ElementsAre("caption zero", std::nullopt, "two"));
  EXPECT_THAT(Column(*batches, "cls"), ElementsAre("3", "-7", std::nullopt));
  EXPECT_THAT(Column(*batches, "json"), ElementsAre("{\"a\": 1}", std::nullopt, std::nullopt));
  EXPECT_THAT(Column(*batches, "seg.png"), ElementsAre(std::nullopt, std::nullopt, "png"));
  EXPECT_EQ((*batches)[0].columns[1].null_count, 1);
  EXPECT_EQ((*batches)[0].columns[3].null_count, 2);
}

TEST_F(WdsReaderTest, TypeFallbacks) {
  const std::string bad_utf8("caf\xc3", 4);
  const std::string tar = MakeTar({{"0.cls", "1"},
                                   {"0.index", "-5"},
                                   {"0.cls2", "2"},
                                   {"0.txt", "ok"},
                                   {"0.en.TXT", "x"},
                                   {"0.json", "{}"},
                                   {"1.cls", "n/a"},
                                   {"1.index", "+6\n"},
                                   {"1.cls2", "9223372036854775808"},
                                   {"1.txt", bad_utf8},
                                   {"1.en.TXT", "y"},
                                   {"1.json", bad_utf8}});
  format::Schema schema;
  auto batches = Read(tar, {}, &schema);
  ASSERT_TRUE(batches.ok()) << batches.status();
  // cls: "n/a" is no integer -> string. cls2 overflows int64 -> string.
  // txt/json with invalid UTF-8 -> binary. "en.TXT" is text by its last part.
  EXPECT_EQ(
      schema.ToString(),
      "__key__:string, cls:string?, cls2:string?, en.TXT:string?, index:int64?, json:binary?, "
      "txt:binary?");
  EXPECT_THAT(Column(*batches, "cls"), ElementsAre("1", "n/a"));
  EXPECT_THAT(Column(*batches, "index"), ElementsAre("-5", "6"));
  EXPECT_THAT(Column(*batches, "cls2"), ElementsAre("2", "9223372036854775808"));
  EXPECT_THAT(Column(*batches, "txt"), ElementsAre("ok", bad_utf8));
}

TEST_F(WdsReaderTest, BatchBoundaries) {
  std::vector<File> files;
  for (int i = 0; i < 5; ++i) {
    const std::string k = "k" + std::to_string(i);
    files.push_back({k + ".txt", "t" + std::to_string(i)});
    if (i % 2 == 0) files.push_back({k + ".bin", "b" + std::to_string(i)});
  }
  const std::string tar = MakeTar(files);
  for (int64_t batch_rows : {1, 2, 3, 5, 100}) {
    SCOPED_TRACE(batch_rows);
    const std::string path = Write("b.tar", tar);
    auto reader = OpenWebDataset(path, {.columns = {}, .batch_rows = batch_rows});
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto batches = ReadAll(**reader);
    ASSERT_TRUE(batches.ok()) << batches.status();
    std::vector<int64_t> sizes;
    for (const auto& b : *batches) sizes.push_back(b.num_rows);
    std::vector<int64_t> expected;
    for (int64_t left = 5; left > 0; left -= batch_rows)
      expected.push_back(std::min(left, batch_rows));
    EXPECT_EQ(sizes, expected);
    EXPECT_THAT(Column(*batches, "__key__"), ElementsAre("k0", "k1", "k2", "k3", "k4"));
    EXPECT_THAT(Column(*batches, "txt"), ElementsAre("t0", "t1", "t2", "t3", "t4"));
    EXPECT_THAT(Column(*batches, "bin"), ElementsAre("b0", std::nullopt, "b2", std::nullopt, "b4"));
    // The end stays the end.
    auto again = (*reader)->Next();
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->has_value());
    EXPECT_EQ((*reader)->bytes_read(), static_cast<int64_t>(tar.size()));
  }
}

TEST_F(WdsReaderTest, ColumnsOptionSelectsAndOrders) {
  const std::string tar = MakeTar(
      {{"a.jpg", "A"}, {"a.txt", "at"}, {"a.json", "{}"}, {"b.json", "{}"}, {"c.txt", "ct"}});
  format::Schema schema;
  auto batches = Read(tar, {.columns = {"txt", "missing.cls", "__key__", "jpg", "other"}}, &schema);
  ASSERT_TRUE(batches.ok()) << batches.status();
  // Unseen columns: typed by the rules (cls -> int64, unknown -> binary), all null.
  EXPECT_EQ(schema.ToString(),
            "__key__:string, txt:string?, missing.cls:int64?, jpg:binary?, other:binary?");
  // Every sample is a row, even one whose files are all unselected.
  EXPECT_THAT(Column(*batches, "__key__"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Column(*batches, "txt"), ElementsAre("at", std::nullopt, "ct"));
  EXPECT_THAT(Column(*batches, "missing.cls"),
              ElementsAre(std::nullopt, std::nullopt, std::nullopt));
  EXPECT_THAT(Column(*batches, "jpg"), ElementsAre("A", std::nullopt, std::nullopt));
}

TEST_F(WdsReaderTest, OptionsAreValidated) {
  const std::string path = Write("v.tar", MakeTar({{"a.txt", "x"}}));
  auto zero = OpenWebDataset(path, {.columns = {}, .batch_rows = 0});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("batch_rows"));
  auto dup = OpenWebDataset(path, {.columns = {"txt", "txt"}});
  EXPECT_THAT(dup.status().message(), HasSubstr("twice"));
  auto missing = OpenWebDataset(tmp_.Sub("nope.tar"), {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WdsReaderTest, KeyReappearingAfterAnotherKeyIsAnError) {
  auto batches = Read(MakeTar({{"a.jpg", "1"}, {"b.jpg", "2"}, {"a.txt", "3"}}));
  ASSERT_FALSE(batches.ok());
  EXPECT_EQ(batches.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(batches.status().message(), HasSubstr("tar entry 2 \"a.txt\" at offset 2048"));
  EXPECT_THAT(batches.status().message(), HasSubstr("key \"a\" reappears"));
  EXPECT_THAT(batches.status().message(), HasSubstr(".tar"));  // the file
}

TEST_F(WdsReaderTest, DuplicateExtensionIsAnError) {
  auto batches = Read(MakeTar({{"a.jpg", "1"}, {"./a.jpg", "2"}}));
  ASSERT_FALSE(batches.ok());
  EXPECT_THAT(batches.status().message(), HasSubstr("duplicate extension \"jpg\" in sample \"a\""));
}

TEST_F(WdsReaderTest, DirectoriesIgnoredAndDotComponentsDropped) {
  const std::string tar = TestTarFile("./", "", '5') + TestTarFile("./a/", "", '5') +
                          TestTarFile("./a/000.txt", "t") + TestTarFile("a//000.cls", "4") +
                          TestTarFile("a/old-style-dir/", "") + TestTarEnd();
  auto batches = Read(tar);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_THAT(Column(*batches, "__key__"), ElementsAre("a/000"));
  EXPECT_THAT(Column(*batches, "cls"), ElementsAre("4"));
}

struct Refusal {
  std::string header;  // the refused entry, tar-encoded
  std::string why;     // substring of the reason
};

TEST_F(WdsReaderTest, RefusedEntriesAreErrorsOrSkipped) {
  const std::vector<Refusal> cases = {
      {TestTarFile("l.txt", "", '1', "etc/passwd"), "hard link to \"etc/passwd\" refused"},
      {TestTarFile("l.txt", "", '2', "/etc/passwd"), "symbolic link to \"/etc/passwd\" refused"},
      {TestTarFile("dev.txt", "", '3'), "character device refused"},
      {TestTarFile("dev.txt", "", '4'), "block device refused"},
      {TestTarFile("fifo.txt", "", '6'), "FIFO refused"},
      {TestTarFile("c.txt", "data", '7'), "contiguous file"},
      {TestTarFile("vol", "", 'V'), "entry type \"V\" refused"},
      {TestTarFile("/etc/x.txt", "abs"), "absolute name refused"},
      {TestTarFile("a/../../x.txt", "up"), "'..' path component refused"},
      {TestTarFile("../x.txt", "up"), "'..' path component refused"},
      {TestTarFile("README", "r"), "no extension"},
      {TestTarFile("a/.hidden", "h"), "starts with '.'"},
      {TestTarFile("k.", "e"), "empty extension"},
      {TestTarFile("k.__key__", "e"), "reserved"},
      {TestTarFile("\xff\xfe.txt", "n"), "not valid UTF-8"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    const std::string tar =
        TestTarFile("a.txt", "A") + c.header + TestTarFile("b.txt", "B") + TestTarEnd();
    auto strict = Read(tar);
    ASSERT_FALSE(strict.ok());
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(strict.status().message(), HasSubstr("tar entry 1 \""));
    EXPECT_THAT(strict.status().message(), HasSubstr("at offset 1024"));
    EXPECT_THAT(strict.status().message(), HasSubstr(c.why));

    std::vector<std::string> skipped;
    auto lenient =
        Read(tar, {.columns = {}, .batch_rows = 1, .skip_bad_entries = true}, nullptr, &skipped);
    ASSERT_TRUE(lenient.ok()) << lenient.status();
    EXPECT_THAT(Column(*lenient, "__key__"), ElementsAre("a", "b"));
    EXPECT_THAT(Column(*lenient, "txt"), ElementsAre("A", "B"));
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_THAT(skipped[0], HasSubstr("tar entry 1"));
    EXPECT_THAT(skipped[0], HasSubstr(c.why));
  }
}

TEST_F(WdsReaderTest, PaxSparseEntryIsRefused) {
  const std::string pax = "22 GNU.sparse.major=1\n";
  const std::string tar = TestTarFile("PaxHeaders/x", pax, 'x') + TestTarFile("s.bin", "map") +
                          TestTarFile("a.txt", "A") + TestTarEnd();
  auto strict = Read(tar);
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("sparse"));
  std::vector<std::string> skipped;
  auto lenient =
      Read(tar, {.columns = {}, .batch_rows = 4, .skip_bad_entries = true}, nullptr, &skipped);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_THAT(Column(*lenient, "__key__"), ElementsAre("a"));
  EXPECT_EQ(skipped.size(), 1u);
}

TEST_F(WdsReaderTest, EmptyArchives) {
  for (const std::string& bytes : {std::string(), TestTarEnd(), TestTarFile("d/", "", '5')}) {
    format::Schema schema;
    auto batches = Read(bytes, {}, &schema);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_TRUE(batches->empty());
    EXPECT_EQ(schema.ToString(), "__key__:string");
  }
}

TEST_F(WdsReaderTest, ChecksumErrorNamesFileEntryAndOffset) {
  const std::string tar = TestTarFile("a.txt", "A") + TestTarFile("b.txt", "B") +
                          TestTarHeader("c.txt", 1, '0', "", -1) + TestPadded("C") + TestTarEnd();
  auto batches = Read(tar);
  ASSERT_FALSE(batches.ok());
  EXPECT_THAT(batches.status().message(), HasSubstr("reading WebDataset " + tmp_.path()));
  EXPECT_THAT(batches.status().message(),
              HasSubstr("tar entry 2 at offset 2048: header checksum mismatch"));
}

TEST_F(WdsReaderTest, Base256SizeHeader) {
  const std::string data(1500, 'q');
  const std::string tar = TestTarHeader("x.bin", data.size(), '0', "", 0, /*base256_size=*/true) +
                          TestPadded(data) + TestTarEnd();
  auto batches = Read(tar);
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_THAT(Column(*batches, "bin"), ElementsAre(data));
}

TEST_F(WdsReaderTest, TruncationAtManyOffsetsIsAnErrorOrAFullPrefix) {
  const std::string full =
      MakeTar({{"k0.txt", "zero"}, {"k0.bin", std::string(700, 'b')}, {"k1.txt", "one"}});
  // Entry boundaries: after k0.txt (1024), after k0.bin (1024 + 512 + 1024),
  // after k1.txt, after the first end block; the second end block is padding.
  const std::vector<size_t> boundaries = {0, 1024, 2560, 3584, 4096};
  std::vector<size_t> cuts = boundaries;
  for (size_t cut = 0; cut <= full.size(); cut += (cut < 1100 ? 1 : 13)) cuts.push_back(cut);
  cuts.push_back(full.size());
  for (size_t cut : cuts) {
    auto batches = Read(std::string_view(full).substr(0, cut), {.columns = {}, .batch_rows = 1});
    const bool boundary =
        std::find(boundaries.begin(), boundaries.end(), cut) != boundaries.end() ||
        cut > full.size() - 512;
    ASSERT_EQ(batches.ok(), boundary) << "cut at " << cut << ": " << batches.status();
    if (batches.ok()) continue;
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(batches.status().message(), HasSubstr("truncated")) << cut;
    EXPECT_THAT(batches.status().message(), HasSubstr("tar entry ")) << cut;
  }
  // Truncation is found by the first pass, at open.
  const std::string cut_path = Write("cut.tar", std::string_view(full).substr(0, 3000));
  auto reader = OpenWebDataset(cut_path, {});
  ASSERT_FALSE(reader.ok());
  EXPECT_THAT(reader.status().message(),
              HasSubstr("tar entry 2 at offset 2560: archive truncated"));
  // A full prefix yields the samples it holds.
  auto two = Read(std::string_view(full).substr(0, 2560));
  ASSERT_TRUE(two.ok());
  EXPECT_THAT(Column(*two, "bin"), ElementsAre(std::string(700, 'b')));
}

TEST_F(WdsReaderTest, GzipSingleAndMultiMemberMatchPlain) {
  std::vector<File> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back({"s" + std::to_string(100 + i) + ".txt", "text " + std::to_string(i)});
    files.push_back({"s" + std::to_string(100 + i) + ".cls", std::to_string(i % 3)});
  }
  const std::string tar = MakeTar(files);
  const std::string multi = TestGzip(tar.substr(0, 5000)) + TestGzip(tar.substr(5000, 7777)) +
                            TestGzip(tar.substr(12777));
  for (const std::string& bytes : {tar, TestGzip(tar), multi}) {
    format::Schema schema;
    const std::string path = Write("g.tar.gz", bytes);
    auto reader = OpenWebDataset(path, {.columns = {}, .batch_rows = 7});
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->schema().ToString(), "__key__:string, cls:int64?, txt:string?");
    auto batches = ReadAll(**reader);
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_EQ(batches->size(), 3u);
    const Values cls = Column(*batches, "cls");
    ASSERT_EQ(cls.size(), 20u);
    EXPECT_EQ(cls[19], "1");
    EXPECT_EQ(Column(*batches, "txt")[13], "text 13");
    // gzip: the last member's trailer may be left unread after the tar's end.
    EXPECT_GE((*reader)->bytes_read(), static_cast<int64_t>(bytes.size()) - (bytes == tar ? 0 : 8));
    EXPECT_LE((*reader)->bytes_read(), static_cast<int64_t>(bytes.size()));
  }
}

TEST_F(WdsReaderTest, FileShrinkingBetweenPassesIsAStickyError) {
  // Entries larger than the reader's I/O buffer, so later ones are not yet read.
  const std::string big(300000, 'x');
  const std::string path =
      Write("shrink.tar", MakeTar({{"a.bin", big}, {"b.bin", big}, {"c.bin", big}}));
  auto reader = OpenWebDataset(path, {.columns = {}, .batch_rows = 1});
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto first = (*reader)->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  std::filesystem::resize_file(path, 400000);
  auto second = (*reader)->Next();
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("reading WebDataset " + path));
  auto third = (*reader)->Next();
  EXPECT_EQ(third.status(), second.status());
}

bool HaveCommand(const char* cmd) {
  return std::system((std::string("command -v ") + cmd + " >/dev/null 2>&1").c_str()) == 0;
}

TEST_F(WdsReaderTest, LongNamesFromSystemTarAndGzip) {
  if (!HaveCommand("tar") || !HaveCommand("gzip")) GTEST_SKIP() << "no tar/gzip";
  const std::string src = tmp_.Sub("src");
  const std::string dir = std::string(80, 'd') + "/" + std::string(70, 'e');
  std::filesystem::create_directories(src + "/" + dir);
  const std::string key = dir + "/" + std::string(110, '0');  // > 100 chars in the base name alone
  ASSERT_TRUE(TestWriteFile(src + "/" + key + ".txt", "caption").ok());
  ASSERT_TRUE(TestWriteFile(src + "/" + key + ".seg.png", "PNG").ok());
  ASSERT_TRUE(TestWriteFile(src + "/" + dir + "/short.cls", "12").ok());
  for (const char* format : {"gnu", "pax"}) {
    // With the directory's own entry (type '5', ignored) first.
    const std::string out = tmp_.Sub(std::string(format) + ".tar");
    const std::string cmd = "cd '" + src + "' && tar --format=" + format + " --no-recursion -cf '" +
                            out + "' '" + dir + "' '" + key + ".txt' '" + key + ".seg.png' '" +
                            dir + "/short.cls' && gzip -kf '" + out + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    for (const std::string& path : {out, out + ".gz"}) {
      SCOPED_TRACE(path);
      auto reader = OpenWebDataset(path, {});
      ASSERT_TRUE(reader.ok()) << reader.status();
      EXPECT_EQ((*reader)->schema().ToString(),
                "__key__:string, cls:int64?, seg.png:binary?, txt:string?");
      auto batches = ReadAll(**reader);
      ASSERT_TRUE(batches.ok()) << batches.status();
      EXPECT_THAT(Column(*batches, "__key__"), ElementsAre(key, dir + "/short"));
      EXPECT_THAT(Column(*batches, "txt"), ElementsAre("caption", std::nullopt));
      EXPECT_THAT(Column(*batches, "seg.png"), ElementsAre("PNG", std::nullopt));
      EXPECT_THAT(Column(*batches, "cls"), ElementsAre(std::nullopt, "12"));
    }
  }
}

// ---- OpenFiles ----

class FilesReaderTest : public ::testing::Test {
 protected:
  void Put(const std::string& rel, std::string_view data) {
    const std::filesystem::path p = std::filesystem::path(tmp_.path()) / "root" / rel;
    std::filesystem::create_directories(p.parent_path());
    ASSERT_TRUE(TestWriteFile(p.string(), data).ok());
  }
  std::string Root() const { return tmp_.Sub("root"); }

  io::TempDir tmp_{"fw_files_test"};
};

Result<std::vector<RecordBatch>> ReadAllFiles(const std::string& dir,
                                              const FilesReadOptions& options) {
  FW_ASSIGN_OR_RETURN(auto reader, OpenFiles(dir, options));
  if (reader->schema().ToString() != "path:string, bytes:binary")
    return absl::InternalError("schema");
  std::vector<RecordBatch> out;
  for (;;) {
    FW_ASSIGN_OR_RETURN(auto batch, reader->Next());
    if (!batch.has_value()) break;
    FW_RETURN_IF_ERROR(batch->Validate());
    out.push_back(std::move(*batch));
  }
  return out;
}

TEST_F(FilesReaderTest, NestedSortedRegularFilesOnlySymlinksNotFollowed) {
  Put("b/c.txt", "c");
  Put("a.jpg", "jpeg");
  Put("b/a/x.bin", std::string("\0\1\2", 3));
  Put("b.txt", "bt");
  Put("empty.txt", "");
  // Outside the root: reachable only through symlinks.
  const std::string outside = tmp_.Sub("outside");
  std::filesystem::create_directories(outside);
  ASSERT_TRUE(TestWriteFile(outside + "/secret.txt", "secret").ok());
  std::filesystem::create_symlink(outside + "/secret.txt", Root() + "/link.txt");
  std::filesystem::create_directory_symlink(outside, Root() + "/linkdir");
  ASSERT_EQ(::mkfifo((Root() + "/fifo.txt").c_str(), 0600), 0);

  auto batches = ReadAllFiles(Root(), {.batch_rows = 2});
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 3u);
  EXPECT_EQ((*batches)[0].num_rows, 2);
  EXPECT_EQ((*batches)[2].num_rows, 1);
  EXPECT_THAT(Column(*batches, "path"),
              ElementsAre("a.jpg", "b.txt", "b/a/x.bin", "b/c.txt", "empty.txt"));
  EXPECT_THAT(Column(*batches, "bytes"),
              ElementsAre("jpeg", "bt", std::string("\0\1\2", 3), "c", ""));

  // Trailing slash on the directory, and an extension filter.
  auto txt = ReadAllFiles(Root() + "/", {.batch_rows = 256, .extensions = {".txt", ".bin"}});
  ASSERT_TRUE(txt.ok()) << txt.status();
  EXPECT_THAT(Column(*txt, "path"), ElementsAre("b.txt", "b/a/x.bin", "b/c.txt", "empty.txt"));
}

TEST_F(FilesReaderTest, ErrorsNameTheDirectoryOrFile) {
  auto missing = OpenFiles(tmp_.Sub("nope"), {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));
  Put("f.txt", "x");
  auto not_dir = OpenFiles(Root() + "/f.txt", {});
  EXPECT_EQ(not_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_dir.status().message(), HasSubstr("not a directory"));
  EXPECT_EQ(OpenFiles(Root(), {.batch_rows = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A file removed between the walk and the read.
  Put("g.txt", "y");
  auto reader = OpenFiles(Root(), {});
  ASSERT_TRUE(reader.ok());
  std::filesystem::remove(Root() + "/g.txt");
  auto batch = (*reader)->Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(batch.status().message(), HasSubstr("g.txt"));
}

TEST_F(FilesReaderTest, EmptyDirectory) {
  std::filesystem::create_directories(Root() + "/only/dirs");
  auto batches = ReadAllFiles(Root(), {});
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_TRUE(batches->empty());
}

}  // namespace
}  // namespace flywheel::interop::internal_wds

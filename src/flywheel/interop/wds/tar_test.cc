#include "flywheel/interop/wds/tar.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/io/memory_cap_testing.h"
#include "flywheel/io/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::interop::internal_wds {

// A minimal tar writer for tests, shared with wds_reader_test.cc (same
// binary). Writes one ustar header (octal size, correct checksum unless
// `checksum_delta`) plus the data and its padding.
std::string TestTarHeader(std::string_view name, uint64_t size, char type, std::string_view link,
                          int checksum_delta = 0, bool base256_size = false) {
  std::string h(kTarBlock, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 100, "0000644", 7);
  std::memcpy(h.data() + 108, "0001750", 7);
  std::memcpy(h.data() + 116, "0001750", 7);
  if (base256_size) {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>((size >> (8 * i)) & 0xff);
  } else {
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  }
  std::snprintf(h.data() + 136, 12, "%011o", 1700000000u);
  h[156] = type;
  std::memcpy(h.data() + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  sum = static_cast<unsigned>(static_cast<int>(sum) + checksum_delta);
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

std::string TestPadded(std::string_view data) {
  std::string out(data);
  out.append((kTarBlock - data.size() % kTarBlock) % kTarBlock, '\0');
  return out;
}

std::string TestTarFile(std::string_view name, std::string_view data, char type = '0',
                        std::string_view link = "") {
  return TestTarHeader(name, data.size(), type, link) + TestPadded(data);
}

std::string TestTarEnd() { return std::string(2 * kTarBlock, '\0'); }

// gzip (one member) of `data`.
std::string TestGzip(std::string_view data) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

Status TestWriteFile(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  return f ? absl::OkStatus() : absl::InternalError("write " + path);
}

std::string TestReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {

using ::testing::ElementsAre;

// One pax record "<len> key=value\n" (len counts the whole record).
std::string PaxRecord(std::string_view key, std::string_view value) {
  const size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) ++len;
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}
using ::testing::HasSubstr;

struct Got {
  std::string name;
  char type;
  std::string data;
  uint64_t offset;
};

// Reads every entry with its data.
Result<std::vector<Got>> ReadAll(std::unique_ptr<ByteSource> source) {
  TarReader tar(std::move(source));
  std::vector<Got> out;
  for (;;) {
    FW_ASSIGN_OR_RETURN(const TarEntry* e, tar.Next());
    if (e == nullptr) break;
    Got g{e->name, e->type, "", e->offset};
    FW_RETURN_IF_ERROR(tar.ReadData(&g.data));
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::vector<Got>> ReadAll(std::string_view bytes) { return ReadAll(NewMemorySource(bytes)); }

Result<std::vector<Got>> ReadFileAll(const std::string& path) {
  FW_ASSIGN_OR_RETURN(auto file,
                      io::PosixFileSystem()->OpenRead(path, io::FileOpenOptions{.mmap = false}));
  FW_ASSIGN_OR_RETURN(auto stream, OpenTarStream(std::move(file)));
  return ReadAll(std::move(stream));
}

std::vector<std::string> Names(const std::vector<Got>& v) {
  std::vector<std::string> out;
  for (const auto& g : v) out.push_back(g.name);
  return out;
}

TEST(ParseTarNumberTest, OctalForms) {
  EXPECT_EQ(*ParseTarNumber(std::string_view("0000644\0", 8)), 0644u);
  EXPECT_EQ(*ParseTarNumber("   17 "), 017u);
  EXPECT_EQ(*ParseTarNumber(std::string_view("\0\0\0\0", 4)), 0u);
  EXPECT_EQ(*ParseTarNumber("77777777777"), 077777777777u);
  EXPECT_FALSE(ParseTarNumber("0008").ok());
  EXPECT_FALSE(ParseTarNumber("12 3").ok());
  EXPECT_FALSE(ParseTarNumber("7777777777777777777777").ok());  // > INT64_MAX
}

TEST(ParseTarNumberTest, Base256) {
  std::string f(12, '\0');
  f[0] = static_cast<char>(0x80);
  f[7] = 0x01;  // 2^32
  f[11] = 0x05;
  EXPECT_EQ(*ParseTarNumber(f), (uint64_t{1} << 32) + 5);
  f[0] = static_cast<char>(0xff);  // negative
  EXPECT_FALSE(ParseTarNumber(f).ok());
  std::string big(12, static_cast<char>(0x7f));
  big[0] = static_cast<char>(0x80);
  big[1] = static_cast<char>(0x80);  // > INT64_MAX
  EXPECT_FALSE(ParseTarNumber(big).ok());
}

TEST(ParsePaxRecordsTest, PathSizeLinkAndSparse) {
  EXPECT_EQ(PaxRecord("path", "a"), "9 path=a\n");
  auto r = ParsePaxRecords(PaxRecord("path", "a/very/long") + PaxRecord("size", "42") +
                           PaxRecord("linkpath", "x/y") + PaxRecord("GNU.sparse.major", "1"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path, "a/very/long");
  EXPECT_EQ(r->size, 42u);
  EXPECT_EQ(r->link_path, "x/y");
  EXPECT_TRUE(r->sparse);
  // Unknown keys ignored; values may contain '=' and spaces.
  auto r2 = ParsePaxRecords(PaxRecord("path", "a=b c.d") +
                            PaxRecord("mtime", "1700000000.123456789") + std::string(20, '\0'));
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->path, "a=b c.d");
  EXPECT_FALSE(r2->size.has_value());
}

TEST(ParsePaxRecordsTest, MalformedRecordsAreErrors) {
  EXPECT_THAT(ParsePaxRecords("12 path=abc").status().message(), HasSubstr("bad length"));
  EXPECT_THAT(ParsePaxRecords("9 path=ab\n").status().message(), HasSubstr("no newline"));
  EXPECT_THAT(ParsePaxRecords("6 abc\n").status().message(), HasSubstr("no key"));
  EXPECT_THAT(ParsePaxRecords("x path=a\n").status().message(), HasSubstr("bad length"));
  EXPECT_THAT(ParsePaxRecords(" 9 path=a\n").status().message(), HasSubstr("no length"));
  EXPECT_THAT(ParsePaxRecords("99999999999999999999 a=b\n").status().message(),
              HasSubstr("bad length"));
  EXPECT_THAT(ParsePaxRecords("12 size=1x3\n").status().message(), HasSubstr("size"));
  EXPECT_FALSE(ParsePaxRecords("1 \n").ok());
}

TEST(TarReaderTest, ReadsEntriesDataAndSkipsUnreadData) {
  const std::string tar = TestTarFile("a/1.txt", "hello") + TestTarFile("dir/", "", '5') +
                          TestTarFile("a/2.bin", std::string(1000, 'x')) +
                          TestTarFile("a/3.txt", "") + TestTarEnd();
  auto all = ReadAll(tar);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_THAT(Names(*all), ElementsAre("a/1.txt", "dir/", "a/2.bin", "a/3.txt"));
  EXPECT_EQ((*all)[0].data, "hello");
  EXPECT_EQ((*all)[1].type, '5');
  EXPECT_EQ((*all)[2].data, std::string(1000, 'x'));
  EXPECT_EQ((*all)[2].offset, 1024u + 512);
  EXPECT_EQ((*all)[3].offset, 1024u + 512 + 512 + 1024);

  // Not reading the data: Next skips it (and its padding).
  TarReader tar2(NewMemorySource(tar));
  std::vector<std::string> names;
  for (;;) {
    auto e = tar2.Next();
    ASSERT_TRUE(e.ok()) << e.status();
    if (*e == nullptr) break;
    names.push_back((*e)->name);
  }
  EXPECT_THAT(names, ElementsAre("a/1.txt", "dir/", "a/2.bin", "a/3.txt"));
  EXPECT_EQ(tar2.offset(), tar.size());
}

TEST(TarReaderTest, ReadDataTwiceIsAnError) {
  const std::string tar = TestTarFile("a.txt", "x") + TestTarEnd();
  TarReader r(NewMemorySource(tar));
  ASSERT_TRUE(r.Next().ok());
  std::string d;
  ASSERT_TRUE(r.ReadData(&d).ok());
  EXPECT_EQ(r.ReadData(&d).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TarReaderTest, UstarPrefixJoinsName) {
  std::string h = TestTarHeader("file.txt", 2, '0', "");
  std::memcpy(h.data() + 345, "some/prefix/dir", 15);
  // Recompute the checksum over the changed header.
  std::memset(h.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  auto all = ReadAll(h + TestPadded("hi") + TestTarEnd());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(Names(*all), ElementsAre("some/prefix/dir/file.txt"));
}

TEST(TarReaderTest, Base256Size) {
  const std::string data(700, 'z');
  const std::string tar = TestTarHeader("big.bin", data.size(), '0', "", 0, /*base256_size=*/true) +
                          TestPadded(data) + TestTarEnd();
  auto all = ReadAll(tar);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].data, data);
}

TEST(TarReaderTest, GnuLongNameAndPaxPathAndSize) {
  const std::string long_name = std::string(150, 'n') + "/" + std::string(120, 'm') + ".txt";
  const std::string pax_name = "p/" + std::string(200, 'q') + ".json";
  const std::string pax_body = PaxRecord("path", pax_name);
  ASSERT_EQ(std::stoul(pax_body.substr(0, pax_body.find(' '))), pax_body.size());
  const std::string size_rec = PaxRecord("size", "3");
  const std::string tar =
      TestTarFile("././@LongLink", long_name + '\0', 'L') + TestTarFile("truncated-name", "one") +
      TestTarFile("PaxHeaders/x", pax_body, 'x') + TestTarFile("short", "two") +
      // pax size= overrides the header's size (header says 0).
      TestTarFile("PaxHeaders/y", size_rec, 'x') + TestTarHeader("sized", 0, '0', "") +
      TestPadded("abc") + TestTarFile("pax_global_header", PaxRecord("comment", "ignored"), 'g') +
      TestTarFile("after.txt", "4") + TestTarEnd();
  auto all = ReadAll(tar);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].name, long_name);
  EXPECT_EQ((*all)[0].data, "one");
  EXPECT_EQ((*all)[1].name, pax_name);
  EXPECT_EQ((*all)[1].data, "two");
  EXPECT_EQ((*all)[2].name, "sized");
  EXPECT_EQ((*all)[2].data, "abc");
  EXPECT_EQ((*all)[3].name, "after.txt");
}

TEST(TarReaderTest, LinkTargetsAndHeaderOnlyTypes) {
  const std::string tar = TestTarFile("l", "", '2', "target/x") +
                          TestTarFile("././@LongLink", std::string(130, 't'), 'K') +
                          TestTarFile("h", "", '1', "short") + TestTarEnd();
  TarReader r(NewMemorySource(tar));
  auto e = r.Next();
  ASSERT_TRUE(e.ok() && *e != nullptr);
  EXPECT_EQ((*e)->type, '2');
  EXPECT_EQ((*e)->link_name, "target/x");
  e = r.Next();
  ASSERT_TRUE(e.ok() && *e != nullptr);
  EXPECT_EQ((*e)->type, '1');
  EXPECT_EQ((*e)->link_name, std::string(130, 't'));
  EXPECT_EQ((*e)->size, 0u);
}

TEST(TarReaderTest, ChecksumMismatchNamesEntryAndOffset) {
  const std::string tar = TestTarFile("a.txt", "x") + TestTarHeader("b.txt", 1, '0', "", 5) +
                          TestPadded("y") + TestTarEnd();
  auto all = ReadAll(tar);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(all.status().message(), HasSubstr("tar entry 1 at offset 1024"));
  EXPECT_THAT(all.status().message(), HasSubstr("checksum mismatch"));
}

TEST(TarReaderTest, NotATar) {
  auto all = ReadAll(std::string(600, 'A'));
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("tar entry 0 at offset 0"));
}

TEST(TarReaderTest, EndOfArchiveForms) {
  const std::string body = TestTarFile("a.txt", "x") + TestTarFile("b.txt", "y");
  for (const std::string& tar : {body, body + std::string(512, '\0'), body + TestTarEnd(),
                                 body + TestTarEnd() + "garbage after the end is never read"}) {
    auto all = ReadAll(tar);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(Names(*all), ElementsAre("a.txt", "b.txt"));
  }
  // A lone zero block followed by another header (e.g. `cat a.tar b.tar`).
  auto all = ReadAll(body + std::string(512, '\0') + TestTarFile("c.txt", "z") + TestTarEnd());
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("single zero block"));
  // Empty archives.
  for (const std::string& tar : {std::string(), TestTarEnd()}) {
    auto empty = ReadAll(tar);
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_TRUE(empty->empty());
  }
}

TEST(TarReaderTest, MetadataWithoutEntryIsAnError) {
  auto all = ReadAll(TestTarFile("././@LongLink", "name.txt", 'L'));
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("after a metadata header"));
  auto all2 = ReadAll(TestTarFile("././@LongLink", "name.txt", 'L') + TestTarEnd());
  ASSERT_FALSE(all2.ok());
}

TEST(TarReaderTest, OversizedMetadataIsAnError) {
  const std::string tar =
      TestTarHeader("././@LongLink", kMaxTarMetadataSize + 1, 'L', "") + TestTarEnd();
  auto all = ReadAll(tar);
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("exceeds the limit"));
}

TEST(TarReaderTest, HugeSizeInSmallArchiveIsTruncationNotAllocation) {
  const std::string tar = TestTarHeader("x.bin", uint64_t{1} << 50, '0', "", 0, true) + "abc";
  auto all = ReadAll(tar);
  ASSERT_FALSE(all.ok());
  EXPECT_THAT(all.status().message(), HasSubstr("truncated in entry data"));
  // The same under a 256 MB address-space cap (the crafted-input suite):
  // sizes of 1 GB and 2^50 bytes claimed by a 515-byte archive.
  for (uint64_t claim : {uint64_t{1} << 30, uint64_t{1} << 50}) {
    const std::string lying = TestTarHeader("x.bin", claim, '0', "", 0, true) + "abc";
    const std::string got = io::UnderMemoryCap(256, [&]() -> std::string {
      auto r = ReadAll(lying);
      return r.ok() ? "ok" : "error: " + std::string(r.status().message());
    });
    EXPECT_THAT(got, HasSubstr("truncated in entry data")) << claim;
  }
}

// Every prefix of an archive either reads cleanly (it ends on an entry
// boundary) or fails with an error; nothing crashes.
TEST(TarReaderTest, TruncationAtEveryOffset) {
  const std::string full = TestTarFile("a.txt", "hello") +
                           TestTarFile("././@LongLink", std::string(120, 'l') + ".bin", 'L') +
                           TestTarFile("ignored", std::string(600, 'b')) +
                           TestTarFile("c.txt", "") + TestTarEnd();
  const std::vector<size_t> boundaries = {
      0, 1024, 1024 + 1024 + 512 + 1024, full.size() - 1024, full.size() - 512, full.size()};
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    auto all = ReadAll(std::string_view(full).substr(0, cut));
    // A cut inside the second end-of-archive block loses nothing.
    const bool boundary =
        std::find(boundaries.begin(), boundaries.end(), cut) != boundaries.end() ||
        cut > full.size() - 512;
    EXPECT_EQ(all.ok(), boundary) << "cut at " << cut << ": " << all.status();
    if (!all.ok()) {
      EXPECT_EQ(all.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(all.status().message(),
                  ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("metadata")))
          << "cut at " << cut;
    }
  }
}

class TarFileTest : public ::testing::Test {
 protected:
  io::TempDir tmp_{"fw_tar_test"};
};

TEST_F(TarFileTest, GzipSingleAndMultiMember) {
  const std::string tar = TestTarFile("a.txt", "alpha") +
                          TestTarFile("b.bin", std::string(3000, 'b')) +
                          TestTarFile("c.txt", "gamma") + TestTarEnd();
  const std::string single = tmp_.Sub("one.tar.gz");
  ASSERT_TRUE(TestWriteFile(single, TestGzip(tar)).ok());
  auto one = ReadFileAll(single);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(Names(*one), ElementsAre("a.txt", "b.bin", "c.txt"));
  EXPECT_EQ((*one)[1].data, std::string(3000, 'b'));

  // Members split at arbitrary bytes of the tar stream, with zero padding
  // after the last member.
  const std::string multi = tmp_.Sub("multi.tar.gz");
  ASSERT_TRUE(TestWriteFile(multi, TestGzip(tar.substr(0, 700)) + TestGzip(tar.substr(700, 1500)) +
                                       TestGzip(tar.substr(2200)) + std::string(100, '\0'))
                  .ok());
  auto many = ReadFileAll(multi);
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_THAT(Names(*many), ElementsAre("a.txt", "b.bin", "c.txt"));
  EXPECT_EQ((*many)[2].data, "gamma");
}

TEST_F(TarFileTest, GzipErrors) {
  const std::string tar = TestTarFile("a.txt", std::string(5000, 'a')) + TestTarFile("b.txt", "b");
  const std::string gz = TestGzip(tar);
  const std::string path = tmp_.Sub("bad.tar.gz");
  // Truncated compressed stream.
  for (size_t cut : {size_t{2}, size_t{10}, gz.size() / 2, gz.size() - 1}) {
    ASSERT_TRUE(TestWriteFile(path, gz.substr(0, cut)).ok());
    auto all = ReadFileAll(path);
    ASSERT_FALSE(all.ok()) << "cut " << cut;
    EXPECT_THAT(all.status().message(),
                ::testing::AnyOf(HasSubstr("gzip"), HasSubstr("truncated")));
  }
  // Garbage after a member, where the tar still needs bytes.
  ASSERT_TRUE(TestWriteFile(path, TestGzip(tar.substr(0, 1024)) + "garbage").ok());
  auto garbage = ReadFileAll(path);
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("unexpected data after a gzip member"));
  EXPECT_THAT(garbage.status().message(), HasSubstr("tar entry 0 at offset 0"));
  // Corrupt deflate data.
  std::string corrupt = gz;
  for (size_t i = 20; i < 40 && i < corrupt.size(); ++i) corrupt[i] = static_cast<char>(0xff);
  ASSERT_TRUE(TestWriteFile(path, corrupt).ok());
  auto bad = ReadFileAll(path);
  ASSERT_FALSE(bad.ok());
}

bool HaveCommand(const char* cmd) {
  return std::system((std::string("command -v ") + cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// Archives written by GNU tar: gnu (long names as 'L'), pax ('x' headers),
// ustar (prefix field), and gzip-compressed.
TEST_F(TarFileTest, ReadsArchivesWrittenBySystemTar) {
  if (!HaveCommand("tar") || !HaveCommand("gzip")) GTEST_SKIP() << "no tar/gzip";
  const std::string src = tmp_.Sub("src");
  const std::string deep = "d1/" + std::string(60, 'x') + "/" + std::string(60, 'y');
  std::filesystem::create_directories(src + "/" + deep);
  const std::string long_file = deep + "/" + std::string(90, 'k') + ".txt";
  ASSERT_TRUE(TestWriteFile(src + "/" + long_file, "long").ok());
  ASSERT_TRUE(TestWriteFile(src + "/small.txt", "small").ok());
  for (const char* format : {"gnu", "pax", "ustar"}) {
    SCOPED_TRACE(format);
    const std::string out = tmp_.Sub(std::string(format) + ".tar");
    const std::string cmd = "cd '" + src + "' && tar --format=" + format + " -cf '" + out + "' " +
                            long_file + " small.txt 2>/dev/null";
    if (std::string(format) == "ustar") {
      // ustar splits at a '/' into prefix (155) and name (100).
      ASSERT_LT(long_file.size(), 256u);
    }
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto all = ReadFileAll(out);
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_THAT(Names(*all), ElementsAre(long_file, "small.txt"));
    EXPECT_EQ((*all)[0].data, "long");
    EXPECT_EQ((*all)[1].data, "small");
    ASSERT_EQ(std::system(("gzip -kf '" + out + "'").c_str()), 0);
    auto gz = ReadFileAll(out + ".gz");
    ASSERT_TRUE(gz.ok()) << gz.status();
    EXPECT_THAT(Names(*gz), ElementsAre(long_file, "small.txt"));
  }
}

}  // namespace
}  // namespace flywheel::interop::internal_wds

#include "flywheel/interop/parquet/compression.h"

#include <gtest/gtest.h>
#include <lz4.h>

#include <random>
#include <string>
#include <vector>

namespace flywheel::interop::parquet {
namespace {

std::string Sample(size_t n, uint32_t seed) {
  // Half text-like (compressible), half random bytes.
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(n);
  const std::string words[] = {"flywheel ", "parquet ", "page ", "column ", "row group "};
  while (s.size() < n / 2) s += words[rng() % 5];
  while (s.size() < n) s.push_back(static_cast<char>(rng()));
  s.resize(n);
  return s;
}

const CompressionCodec kWritable[] = {CompressionCodec::kUncompressed, CompressionCodec::kSnappy,
                                      CompressionCodec::kGzip,         CompressionCodec::kBrotli,
                                      CompressionCodec::kZstd,         CompressionCodec::kLz4Raw};

TEST(CompressionTest, EveryWritableCodecRoundTrips) {
  for (CompressionCodec c : kWritable) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{300000}}) {
      const std::string src = Sample(n, static_cast<uint32_t>(n));
      std::string packed = "prefix";  // Compress appends
      ASSERT_TRUE(Compress(c, reinterpret_cast<const uint8_t*>(src.data()), n, &packed).ok()) << CodecName(c);
      ASSERT_EQ(packed.substr(0, 6), "prefix");
      std::vector<uint8_t> out(n);
      Status s = Decompress(c, reinterpret_cast<const uint8_t*>(packed.data()) + 6, packed.size() - 6,
                            out.data(), n);
      ASSERT_TRUE(s.ok()) << CodecName(c) << " n=" << n << ": " << s;
      EXPECT_EQ(std::string(out.begin(), out.end()), src) << CodecName(c);
    }
  }
}

TEST(CompressionTest, WrongUncompressedSizeIsDataLoss) {
  const std::string src = Sample(5000, 1);
  for (CompressionCodec c : kWritable) {
    std::string packed;
    ASSERT_TRUE(Compress(c, reinterpret_cast<const uint8_t*>(src.data()), src.size(), &packed).ok());
    for (size_t want : {src.size() - 1, src.size() + 1}) {
      std::vector<uint8_t> out(want);
      Status s = Decompress(c, reinterpret_cast<const uint8_t*>(packed.data()), packed.size(), out.data(), want);
      EXPECT_TRUE(absl::IsDataLoss(s)) << CodecName(c) << " want=" << want << ": " << s;
      EXPECT_NE(std::string(s.message()).find(CodecName(c)), std::string::npos) << s;
    }
  }
}

TEST(CompressionTest, CorruptOrTruncatedInputIsAnErrorNeverACrash) {
  const std::string src = Sample(20000, 2);
  for (CompressionCodec c : kWritable) {
    if (c == CompressionCodec::kUncompressed) continue;
    std::string packed;
    ASSERT_TRUE(Compress(c, reinterpret_cast<const uint8_t*>(src.data()), src.size(), &packed).ok());
    std::vector<uint8_t> out(src.size());
    // Truncations.
    for (size_t cut : {size_t{0}, size_t{1}, packed.size() / 2, packed.size() - 1}) {
      Status s = Decompress(c, reinterpret_cast<const uint8_t*>(packed.data()), cut, out.data(), out.size());
      EXPECT_FALSE(s.ok()) << CodecName(c) << " cut at " << cut;
    }
    // Flipped bytes: any outcome but a crash (some codecs cannot detect all).
    std::mt19937 rng(3);
    for (int i = 0; i < 50; ++i) {
      std::string bad = packed;
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
      (void)Decompress(c, reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), out.data(), out.size());
    }
  }
}

TEST(CompressionTest, HadoopFramedLz4WithSeveralBlocksAndTheRawFallback) {
  const std::string a = Sample(3000, 4), b = Sample(5000, 5);
  auto block = [](const std::string& raw, std::string* out) {
    std::vector<char> buf(LZ4_compressBound(static_cast<int>(raw.size())));
    const int len = LZ4_compress_default(raw.data(), buf.data(), static_cast<int>(raw.size()),
                                         static_cast<int>(buf.size()));
    auto be32 = [&](uint32_t v) {
      for (int sh : {24, 16, 8, 0}) out->push_back(static_cast<char>((v >> sh) & 0xff));
    };
    be32(static_cast<uint32_t>(raw.size()));
    be32(static_cast<uint32_t>(len));
    out->append(buf.data(), static_cast<size_t>(len));
  };
  std::string framed;
  block(a, &framed);
  block(b, &framed);
  std::vector<uint8_t> out(a.size() + b.size());
  ASSERT_TRUE(Decompress(CompressionCodec::kLz4, reinterpret_cast<const uint8_t*>(framed.data()), framed.size(),
                         out.data(), out.size())
                  .ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), a + b);
  // A bare LZ4 block under the LZ4 codec (what some writers produced).
  std::string raw;
  const std::string both = a + b;
  ASSERT_TRUE(Compress(CompressionCodec::kLz4Raw, reinterpret_cast<const uint8_t*>(both.data()), both.size(), &raw)
                  .ok());
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(Decompress(CompressionCodec::kLz4, reinterpret_cast<const uint8_t*>(raw.data()), raw.size(),
                         out.data(), out.size())
                  .ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), both);
}

TEST(CompressionTest, ConcatenatedGzipMembersDecodeAsOne) {
  const std::string a = Sample(4000, 6), b = Sample(7000, 7);
  std::string packed;
  ASSERT_TRUE(Compress(CompressionCodec::kGzip, reinterpret_cast<const uint8_t*>(a.data()), a.size(), &packed).ok());
  ASSERT_TRUE(Compress(CompressionCodec::kGzip, reinterpret_cast<const uint8_t*>(b.data()), b.size(), &packed).ok());
  std::vector<uint8_t> out(a.size() + b.size());
  ASSERT_TRUE(Decompress(CompressionCodec::kGzip, reinterpret_cast<const uint8_t*>(packed.data()), packed.size(),
                         out.data(), out.size())
                  .ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), a + b);
}

TEST(CompressionTest, WritableCodecsParseByName) {
  EXPECT_EQ(*ParseWritableCodec("none"), CompressionCodec::kUncompressed);
  EXPECT_EQ(*ParseWritableCodec("zstd"), CompressionCodec::kZstd);
  EXPECT_EQ(*ParseWritableCodec("lz4_raw"), CompressionCodec::kLz4Raw);
  auto bad = ParseWritableCodec("lzo");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(std::string(bad.status().message()).find("snappy"), std::string::npos);
}

TEST(CompressionTest, LzoAndUnknownCodecsAreRefusedByName) {
  uint8_t out[4];
  const uint8_t in[4] = {1, 2, 3, 4};
  Status s = Decompress(CompressionCodec::kLzo, in, 4, out, 4);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(std::string(s.message()).find("LZO"), std::string::npos);
  s = Decompress(static_cast<CompressionCodec>(42), in, 4, out, 4);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(std::string(s.message()).find("42"), std::string::npos);
  std::string packed;
  EXPECT_TRUE(absl::IsUnimplemented(Compress(CompressionCodec::kLz4, in, 4, &packed)));
}

}  // namespace
}  // namespace flywheel::interop::parquet

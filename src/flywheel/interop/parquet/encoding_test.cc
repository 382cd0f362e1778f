#include "flywheel/interop/parquet/encoding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace flywheel::interop::parquet {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (const int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

const uint8_t* U8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::vector<std::string> Strings(const ByteArrays& a) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < a.size(); ++i) {
    out.push_back(a.data.substr(static_cast<size_t>(a.offsets[i]),
                                static_cast<size_t>(a.offsets[i + 1] - a.offsets[i])));
  }
  return out;
}

ByteArrays MakeByteArrays(const std::vector<std::string>& values) {
  ByteArrays a;
  for (const std::string& v : values) a.Append(v.data(), v.size());
  return a;
}

// Decodes `n` hybrid values the slow way, bit by bit, as an independent
// check on the word-load kernels and on what the encoder writes.
std::vector<uint32_t> ReferenceDecodeHybrid(const std::string& s, int w, int64_t n) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (static_cast<int64_t>(out.size()) < n) {
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(s.at(pos++));
      header |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) break;
    }
    if (header & 1) {
      const uint64_t values = (header >> 1) * 8;
      for (uint64_t v = 0; v < values; ++v) {
        uint32_t value = 0;
        for (int k = 0; k < w; ++k) {
          const uint64_t bit = pos * 8 + v * static_cast<uint64_t>(w) + static_cast<uint64_t>(k);
          value |= static_cast<uint32_t>((static_cast<uint8_t>(s.at(bit / 8)) >> (bit % 8)) & 1)
                   << k;
        }
        if (static_cast<int64_t>(out.size()) < n) out.push_back(value);
      }
      pos += (header >> 1) * static_cast<uint64_t>(w);
    } else {
      uint32_t value = 0;
      for (int b = 0; b < (w + 7) / 8; ++b) {
        value |= uint32_t{static_cast<uint8_t>(s.at(pos++))} << (8 * b);
      }
      for (uint64_t i = 0; i < (header >> 1) && static_cast<int64_t>(out.size()) < n; ++i) {
        out.push_back(value);
      }
    }
  }
  return out;
}

// Every proper prefix of a valid stream must be rejected, never crash.
void ExpectEveryTruncationFails(const std::string& stream,
                                const std::function<bool(const uint8_t*, size_t)>& decode_ok) {
  for (size_t len = 0; len < stream.size(); ++len) {
    // An exact-size copy, so that a sanitizer build sees any overread.
    std::vector<uint8_t> prefix(stream.begin(), stream.begin() + static_cast<ptrdiff_t>(len));
    EXPECT_FALSE(decode_ok(prefix.data(), prefix.size())) << "prefix of " << len << " bytes";
  }
}

// --- BitWidth ----------------------------------------------------------------

TEST(BitWidthTest, CountsBitsOfTheMaximum) {
  EXPECT_EQ(BitWidth(0), 0);
  EXPECT_EQ(BitWidth(1), 1);
  EXPECT_EQ(BitWidth(2), 2);
  EXPECT_EQ(BitWidth(7), 3);
  EXPECT_EQ(BitWidth(8), 4);
  EXPECT_EQ(BitWidth(0xffffffffu), 32);
  EXPECT_EQ(BitWidth(uint64_t{1} << 32), 33);
  EXPECT_EQ(BitWidth(std::numeric_limits<uint64_t>::max()), 64);
}

// --- RLE / bit-packed hybrid ------------------------------------------------------

TEST(RleBitPackedTest, DecodesSpecBitPackingExample) {
  // Encodings.md: 0..7 with bit width 3 pack to 10001000 11000110 11111010;
  // header 0x03 is one group of 8, bit-packed.
  const std::string s = Bytes({0x03, 0x88, 0xc6, 0xfa});
  std::vector<uint32_t> out(8);
  auto consumed = DecodeRleBitPacked(U8(s), s.size(), 3, 8, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 4u);
  EXPECT_THAT(out, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(RleBitPackedTest, EncodesSpecBitPackingExample) {
  const std::vector<uint32_t> values = {0, 1, 2, 3, 4, 5, 6, 7};
  std::string s;
  EncodeRleBitPacked(values.data(), 8, 3, &s);
  EXPECT_EQ(s, Bytes({0x03, 0x88, 0xc6, 0xfa}));
}

TEST(RleBitPackedTest, DecodesRleRunsWithValueInRoundedUpBytes) {
  // Run of 10 fives (header 10 << 1 = 0x14), then 300 copies of 0x1234 at
  // width 13 (header 600 = 0xd8 0x04, value in 2 bytes LE), then a run of 3
  // at width 13 in a second call below.
  {
    const std::string s = Bytes({0x14, 0x05});
    std::vector<uint32_t> out(10);
    auto consumed = DecodeRleBitPacked(U8(s), s.size(), 3, 10, out.data());
    ASSERT_TRUE(consumed.ok()) << consumed.status();
    EXPECT_EQ(*consumed, 2u);
    EXPECT_THAT(out, ElementsAreArray(std::vector<uint32_t>(10, 5)));
  }
  {
    const std::string s = Bytes({0xd8, 0x04, 0x34, 0x12});
    std::vector<uint32_t> out(300);
    auto consumed = DecodeRleBitPacked(U8(s), s.size(), 13, 300, out.data());
    ASSERT_TRUE(consumed.ok()) << consumed.status();
    EXPECT_EQ(*consumed, 4u);
    EXPECT_THAT(out, ElementsAreArray(std::vector<uint32_t>(300, 0x1234)));
  }
  {
    // Width 32: the value takes 4 bytes.
    const std::string s = Bytes({0x06, 0x78, 0x56, 0x34, 0xf2});
    std::vector<uint32_t> out(3);
    auto consumed = DecodeRleBitPacked(U8(s), s.size(), 32, 3, out.data());
    ASSERT_TRUE(consumed.ok()) << consumed.status();
    EXPECT_EQ(*consumed, 5u);
    EXPECT_THAT(out, ElementsAre(0xf2345678u, 0xf2345678u, 0xf2345678u));
  }
}

TEST(RleBitPackedTest, DecodesMixedRunsAndStopsAtTheRunHoldingTheLastValue) {
  // RLE 4 x 1, bit-packed group (2,0,1,3,...), RLE 5 x 2, then a run that
  // is never reached because n ends inside the third run.
  const std::string s = Bytes({0x08, 0x01, 0x03, 0x12, 0x33, 0x0a, 0x02, 0x08, 0x03});
  std::vector<uint32_t> out(15);
  auto consumed = DecodeRleBitPacked(U8(s), s.size(), 2, 15, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 7u);
  EXPECT_THAT(out, ElementsAre(1, 1, 1, 1, 2, 0, 1, 0, 3, 0, 3, 0, 2, 2, 2));
}

TEST(RleBitPackedTest, PaddingInTheLastBitPackedGroupIsIgnoredButConsumed) {
  // Two groups at width 4 declared; only 3 values wanted. The padding holds
  // non-zero junk, which is allowed.
  const std::string s = Bytes({0x05, 0x21, 0xf3, 0xff, 0xff, 0xee, 0xee, 0xee, 0xee});
  std::vector<uint32_t> out(3);
  auto consumed = DecodeRleBitPacked(U8(s), s.size(), 4, 3, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 9u);
  EXPECT_THAT(out, ElementsAre(1, 2, 3));
}

TEST(RleBitPackedTest, EncoderPadsTheLastGroupWithZeros) {
  const std::vector<uint32_t> values = {1, 2, 3};
  std::string s;
  EncodeRleBitPacked(values.data(), 3, 2, &s);
  // One group: 01 | 10 << 2 | 11 << 4 = 0x39, then the padded byte.
  EXPECT_EQ(s, Bytes({0x03, 0x39, 0x00}));
}

TEST(RleBitPackedTest, EncoderUsesRleRunsForRepeatsOfEightOrMore) {
  std::vector<uint32_t> values(100, 7);
  std::string s;
  EncodeRleBitPacked(values.data(), 100, 3, &s);
  EXPECT_EQ(s, Bytes({0xc8, 0x01, 0x07}));  // 100 << 1 = 200

  // A literal group, then the rest of a long run as one RLE run.
  values.assign({1, 2, 3});
  values.insert(values.end(), 20, 5);
  s.clear();
  EncodeRleBitPacked(values.data(), static_cast<int64_t>(values.size()), 3, &s);
  // Group: 1,2,3,5,5,5,5,5 at width 3; then 15 x 5 (header 30).
  EXPECT_EQ(s, Bytes({0x03, 0xd1, 0xda, 0xb6, 0x1e, 0x05}));
  std::vector<uint32_t> back(values.size());
  ASSERT_TRUE(
      DecodeRleBitPacked(U8(s), s.size(), 3, static_cast<int64_t>(back.size()), back.data()).ok());
  EXPECT_EQ(back, values);
}

TEST(RleBitPackedTest, BitWidthZeroReadsNoValueBytes) {
  // An RLE run of 8 zeros is its header alone; so is a bit-packed run.
  const std::string s = Bytes({0x10, 0x03});
  std::vector<uint32_t> out(16, 99);
  auto consumed = DecodeRleBitPacked(U8(s), s.size(), 0, 16, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 2u);
  EXPECT_THAT(out, ElementsAreArray(std::vector<uint32_t>(16, 0)));

  std::vector<uint32_t> zeros(1000, 0);
  std::string e;
  EncodeRleBitPacked(zeros.data(), 1000, 0, &e);
  EXPECT_EQ(e, Bytes({0xd0, 0x0f}));  // one RLE run of 1000, no value byte
}

TEST(RleBitPackedTest, ZeroValuesConsumeNothing) {
  auto consumed = DecodeRleBitPacked(nullptr, 0, 5, 0, nullptr);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 0u);
}

TEST(RleBitPackedTest, ZeroLengthRunsAreSkipped) {
  // Out of spec (runs hold at least one value) but harmless: each costs its
  // header byte, so it cannot loop, and older writers are said to emit them.
  const std::string s = Bytes({0x00, 0x07, 0x01, 0x04, 0x07});
  std::vector<uint32_t> out(2);
  auto consumed = DecodeRleBitPacked(U8(s), s.size(), 3, 2, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 5u);
  EXPECT_THAT(out, ElementsAre(7, 7));
}

TEST(RleBitPackedTest, RoundTripsRandomDataAtEveryBitWidth) {
  std::mt19937_64 rng(42);
  for (int w = 0; w <= 32; ++w) {
    const uint64_t limit = w == 0 ? 1 : uint64_t{1} << w;
    for (const int64_t n : {1, 7, 8, 9, 31, 32, 33, 100, 1000, 4099}) {
      std::vector<uint32_t> values(static_cast<size_t>(n));
      for (size_t i = 0; i < values.size();) {
        // Mix literal stretches and runs of varied length.
        const uint32_t v = static_cast<uint32_t>(rng() % limit);
        const size_t len = rng() % 3 == 0 ? 1 + rng() % 40 : 1;
        for (size_t k = 0; k < len && i < values.size(); ++k) values[i++] = v;
      }
      std::string s;
      EncodeRleBitPacked(values.data(), n, w, &s);
      // Decode from an exact-size buffer so that the kernels' tail paths run.
      std::vector<uint8_t> exact(s.begin(), s.end());
      std::vector<uint32_t> back(values.size());
      auto consumed = DecodeRleBitPacked(exact.data(), exact.size(), w, n, back.data());
      ASSERT_TRUE(consumed.ok()) << "w=" << w << " n=" << n << ": " << consumed.status();
      EXPECT_EQ(*consumed, s.size()) << "w=" << w << " n=" << n;
      ASSERT_EQ(back, values) << "w=" << w << " n=" << n;
      ASSERT_EQ(ReferenceDecodeHybrid(s, w, n), values) << "w=" << w << " n=" << n;
    }
  }
}

TEST(RleBitPackedTest, LongBitPackedRunsMatchTheReferenceAtEveryWidth) {
  // Purely random values: almost no runs, so the 32-value kernels do the work.
  std::mt19937_64 rng(7);
  for (int w = 1; w <= 32; ++w) {
    const int64_t n = 5000;
    std::vector<uint32_t> values(static_cast<size_t>(n));
    for (uint32_t& v : values) v = static_cast<uint32_t>(rng() & ((uint64_t{1} << w) - 1));
    std::string s;
    EncodeRleBitPacked(values.data(), n, w, &s);
    std::vector<uint32_t> back(values.size());
    ASSERT_TRUE(DecodeRleBitPacked(U8(s), s.size(), w, n, back.data()).ok());
    ASSERT_EQ(back, values) << "w=" << w;
    ASSERT_EQ(ReferenceDecodeHybrid(s, w, n), values) << "w=" << w;
    // A decoder asked for fewer values stops inside the run without error.
    std::vector<uint32_t> head(77);
    ASSERT_TRUE(DecodeRleBitPacked(U8(s), s.size(), w, 77, head.data()).ok());
    EXPECT_TRUE(std::equal(head.begin(), head.end(), values.begin())) << "w=" << w;
  }
}

TEST(RleBitPackedTest, EveryTruncationFails) {
  std::mt19937_64 rng(3);
  for (const int w : {0, 1, 3, 8, 13, 32}) {
    std::vector<uint32_t> values(70);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = i >= 20 && i < 40 ? 1 : static_cast<uint32_t>(rng() % (uint64_t{1} << w));
    }
    std::string s;
    EncodeRleBitPacked(values.data(), 70, w, &s);
    ExpectEveryTruncationFails(s, [&](const uint8_t* d, size_t n) {
      std::vector<uint32_t> out(70);
      return DecodeRleBitPacked(d, n, w, 70, out.data()).ok();
    });
  }
}

TEST(RleBitPackedTest, RejectsLyingHeadersAndBadArguments) {
  std::vector<uint32_t> out(64);
  // Bit-packed run claiming 2^40 groups.
  std::string s = Bytes({0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0x00});
  auto r = DecodeRleBitPacked(U8(s), s.size(), 3, 64, out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("RLE: bit-packed run at byte 0"));

  // RLE value 9 does not fit in 3 bits.
  s = Bytes({0x10, 0x09});
  r = DecodeRleBitPacked(U8(s), s.size(), 3, 8, out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("run value 9 at byte 1 does not fit in 3 bits"));

  // A header varint of 11 bytes overflows.
  s = std::string(10, '\xff') + Bytes({0x01});
  r = DecodeRleBitPacked(U8(s), s.size(), 3, 8, out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("overflows 64 bits at byte 0"));

  s = Bytes({0x10, 0x01});
  r = DecodeRleBitPacked(U8(s), s.size(), 33, 8, out.data());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = DecodeRleBitPacked(U8(s), s.size(), -1, 8, out.data());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = DecodeRleBitPacked(U8(s), s.size(), 3, -1, out.data());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Deprecated BIT_PACKED ---------------------------------------------------------

TEST(BitPackedLegacyTest, DecodesSpecExampleMostSignificantBitFirst) {
  const std::string s = Bytes({0x05, 0x39, 0x77});
  std::vector<uint32_t> out(8);
  auto consumed = DecodeBitPackedLegacy(U8(s), s.size(), 3, 8, out.data());
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 3u);
  EXPECT_THAT(out, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(BitPackedLegacyTest, ConsumesPartialLastByteAndMatchesBitwiseReference) {
  // The spec's 30 values of 2 bits take 8 bytes.
  std::mt19937_64 rng(5);
  for (const int w : {1, 2, 5, 12, 17, 31, 32}) {
    const int64_t n = 301;
    std::string s(static_cast<size_t>((n * w + 7) / 8), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    std::vector<uint32_t> out(static_cast<size_t>(n));
    std::vector<uint8_t> exact(s.begin(), s.end());
    auto consumed = DecodeBitPackedLegacy(exact.data(), exact.size(), w, n, out.data());
    ASSERT_TRUE(consumed.ok()) << consumed.status();
    EXPECT_EQ(*consumed, s.size());
    for (int64_t i = 0; i < n; ++i) {
      uint32_t expected = 0;
      for (int k = 0; k < w; ++k) {
        const int64_t bit = i * w + k;
        expected = (expected << 1) | ((static_cast<uint8_t>(s[bit / 8]) >> (7 - bit % 8)) & 1);
      }
      ASSERT_EQ(out[static_cast<size_t>(i)], expected) << "w=" << w << " i=" << i;
    }
  }
  std::vector<uint32_t> out(30);
  const std::string eight(8, '\0');
  auto consumed = DecodeBitPackedLegacy(U8(eight), 8, 2, 30, out.data());
  ASSERT_TRUE(consumed.ok());
  EXPECT_EQ(*consumed, 8u);
}

TEST(BitPackedLegacyTest, RejectsShortInputAndHugeCounts) {
  std::vector<uint32_t> out(8);
  const std::string s = Bytes({0x05, 0x39});
  auto r = DecodeBitPackedLegacy(U8(s), s.size(), 3, 8, out.data());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("BIT_PACKED"));
  r = DecodeBitPackedLegacy(U8(s), s.size(), 32, std::numeric_limits<int64_t>::max(), nullptr);
  EXPECT_FALSE(r.ok());
  r = DecodeBitPackedLegacy(U8(s), s.size(), 40, 1, out.data());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// --- PLAIN -----------------------------------------------------------------------------

TEST(PlainBooleanTest, PacksLeastSignificantBitFirst) {
  const std::vector<uint8_t> values = {1, 0, 1, 1, 0, 0, 0, 0, 1};
  std::string s;
  EncodePlainBoolean(values.data(), 9, &s);
  EXPECT_EQ(s, Bytes({0x0d, 0x01}));
  std::vector<uint8_t> back(9);
  auto consumed = DecodePlainBoolean(U8(s), s.size(), 9, back.data());
  ASSERT_TRUE(consumed.ok());
  EXPECT_EQ(*consumed, 2u);
  EXPECT_EQ(back, values);
}

TEST(PlainBooleanTest, RoundTripsRandomAndRejectsShortInput) {
  std::mt19937_64 rng(9);
  std::vector<uint8_t> values(1001);
  for (uint8_t& v : values) v = rng() & 1;
  std::string s;
  EncodePlainBoolean(values.data(), 1001, &s);
  ASSERT_EQ(s.size(), 126u);
  std::vector<uint8_t> back(1001);
  ASSERT_TRUE(DecodePlainBoolean(U8(s), s.size(), 1001, back.data()).ok());
  EXPECT_EQ(back, values);
  ExpectEveryTruncationFails(s, [&](const uint8_t* d, size_t n) {
    return DecodePlainBoolean(d, n, 1001, back.data()).ok();
  });
}

TEST(PlainByteArrayTest, DecodesLengthPrefixedValuesIncludingEmpty) {
  const std::string s = Bytes({0x02, 0, 0, 0, 'h', 'i', 0, 0, 0, 0, 0x01, 0, 0, 0, 'x', 0x77});
  ByteArrays out;
  auto consumed = DecodePlainByteArray(U8(s), s.size(), 3, &out);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, 15u);
  EXPECT_THAT(Strings(out), ElementsAre("hi", "", "x"));
  std::string back;
  EncodePlainByteArray(out, &back);
  EXPECT_EQ(back, s.substr(0, 15));
}

TEST(PlainByteArrayTest, TruncationsAndLyingLengthsFailWithoutTouchingOutput) {
  const ByteArrays values = MakeByteArrays({"alpha", "", "gamma", "d"});
  std::string s;
  EncodePlainByteArray(values, &s);
  ExpectEveryTruncationFails(s, [&](const uint8_t* d, size_t n) {
    ByteArrays out = MakeByteArrays({"keep"});
    const bool ok = DecodePlainByteArray(d, n, 4, &out).ok();
    if (!ok) {
      EXPECT_THAT(Strings(out), ElementsAre("keep"));
    }
    return ok;
  });
  ByteArrays out;
  const std::string liar = Bytes({0xff, 0xff, 0xff, 0xff, 'a'});
  auto r = DecodePlainByteArray(U8(liar), liar.size(), 1, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("value 0 of 4294967295 bytes at byte 0 runs past the end"));
  r = DecodePlainByteArray(U8(liar), liar.size(), int64_t{1} << 40, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(out.size(), 0);
}

// --- DELTA_BINARY_PACKED -------------------------------------------------------

std::vector<int64_t> DecodeDelta(const std::string& s, int64_t max_values = 1 << 20) {
  std::vector<int64_t> out;
  auto consumed = DecodeDeltaBinaryPacked(U8(s), s.size(), max_values, &out);
  EXPECT_TRUE(consumed.ok()) << consumed.status();
  if (consumed.ok()) {
    EXPECT_EQ(*consumed, s.size());
  }
  return out;
}

TEST(DeltaBinaryPackedTest, DecodesSpecExample1WithAValidBlockSize) {
  // Example 1 (1..5) with the spec's block size 8 raised to 128, 1 miniblock:
  // header 128, 1, 5, zigzag(1); block: min delta zigzag(1), width 0, no data.
  const std::string s = Bytes({0x80, 0x01, 0x01, 0x05, 0x02, 0x02, 0x00});
  EXPECT_THAT(DecodeDelta(s), ElementsAre(1, 2, 3, 4, 5));
}

TEST(DeltaBinaryPackedTest, RejectsSpecExampleBlockSizeOfEight) {
  // Verbatim Example 1: the spec notes block size 8 is invalid in practice.
  const std::string s = Bytes({0x08, 0x01, 0x05, 0x02, 0x02, 0x00});
  std::vector<int64_t> out;
  auto r = DecodeDeltaBinaryPacked(U8(s), s.size(), 100, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("DELTA_BINARY_PACKED: block size 8 is not a positive multiple of 128"));
}

TEST(DeltaBinaryPackedTest, DecodesSpecExample2) {
  // 7,5,3,1,2,3,4,5: min delta -2 (zigzag 3), relative 0,0,0,3,3,3,3 at
  // width 2: bytes 0xc0 0x3f. Block 128 of 4 miniblocks of 32 (8 bytes at
  // width 2); the three unused miniblocks have junk widths and no bytes,
  // which readers must accept.
  const std::string s = Bytes(
      {0x80, 0x01, 0x04, 0x08, 0x0e, 0x03, 0x02, 0xff, 0x41, 0x07, 0xc0, 0x3f, 0, 0, 0, 0, 0, 0});
  EXPECT_THAT(DecodeDelta(s), ElementsAre(7, 5, 3, 1, 2, 3, 4, 5));

  // The same with one miniblock of 128 values: 32 bytes at width 2.
  std::string one = Bytes({0x80, 0x01, 0x01, 0x08, 0x0e, 0x03, 0x02, 0xc0, 0x3f});
  one.append(30, '\0');
  EXPECT_THAT(DecodeDelta(one), ElementsAre(7, 5, 3, 1, 2, 3, 4, 5));
}

TEST(DeltaBinaryPackedTest, EncoderWritesBlocksOf128InFourMiniblocks) {
  const std::vector<int64_t> values = {1, 2, 3, 4, 5};
  std::string s;
  EncodeDeltaBinaryPacked(values.data(), 5, &s);
  EXPECT_EQ(s, Bytes({0x80, 0x01, 0x04, 0x05, 0x02, 0x02, 0, 0, 0, 0}));

  const std::vector<int64_t> example2 = {7, 5, 3, 1, 2, 3, 4, 5};
  s.clear();
  EncodeDeltaBinaryPacked(example2.data(), 8, &s);
  EXPECT_EQ(
      s, Bytes({0x80, 0x01, 0x04, 0x08, 0x0e, 0x03, 0x02, 0, 0, 0, 0xc0, 0x3f, 0, 0, 0, 0, 0, 0}));
}

TEST(DeltaBinaryPackedTest, HeaderOnlyForZeroAndOneValues) {
  std::string s;
  EncodeDeltaBinaryPacked(nullptr, 0, &s);
  EXPECT_EQ(s, Bytes({0x80, 0x01, 0x04, 0x00, 0x00}));
  EXPECT_TRUE(DecodeDelta(s).empty());
  const int64_t one = -3;
  s.clear();
  EncodeDeltaBinaryPacked(&one, 1, &s);
  EXPECT_EQ(s, Bytes({0x80, 0x01, 0x04, 0x01, 0x05}));
  EXPECT_THAT(DecodeDelta(s), ElementsAre(-3));
}

TEST(DeltaBinaryPackedTest, RoundTripsExtremesWithWraparound) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> values;
  for (int i = 0; i < 300; ++i) values.push_back(i % 2 ? kMax : kMin);
  values.insert(values.end(), {0, -1, kMax, kMax, kMin, kMin, 1, kMin, 0});
  std::string s;
  EncodeDeltaBinaryPacked(values.data(), static_cast<int64_t>(values.size()), &s);
  EXPECT_EQ(DecodeDelta(s), values);
}

TEST(DeltaBinaryPackedTest, RoundTripsRandomDataOfEveryShape) {
  std::mt19937_64 rng(11);
  for (const int64_t n : {2, 31, 32, 33, 127, 128, 129, 257, 1000, 5000}) {
    for (int shape = 0; shape < 5; ++shape) {
      std::vector<int64_t> values(static_cast<size_t>(n));
      int64_t acc = 0;
      for (int64_t& v : values) {
        switch (shape) {
          case 0:
            v = static_cast<int64_t>(rng());
            break;  // any int64
          case 1:
            v = static_cast<int32_t>(rng());
            break;  // int32 range
          case 2:
            v = acc += static_cast<int64_t>(rng() % 100);
            break;  // sorted
          case 3:
            v = 42;
            break;  // constant
          default:
            v = static_cast<int64_t>(rng() >> (rng() % 64));
            break;  // mixed widths
        }
      }
      std::string s;
      EncodeDeltaBinaryPacked(values.data(), n, &s);
      ASSERT_EQ(DecodeDelta(s), values) << "n=" << n << " shape=" << shape;
    }
  }
}

TEST(DeltaBinaryPackedTest, Int32WriterWraparoundKeepsTheLow32Bits) {
  // A writer working in 32 bits stores INT32_MIN, INT32_MAX as first value
  // INT32_MIN and a wrapped delta of -1 (zigzag 1), width 0.
  const std::string s = Bytes({0x80, 0x01, 0x04, 0x02, 0xff, 0xff, 0xff, 0xff, 0x0f,  // header
                               0x01, 0, 0, 0, 0});
  const std::vector<int64_t> out = DecodeDelta(s);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(static_cast<int32_t>(out[0]), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(static_cast<int32_t>(out[1]), std::numeric_limits<int32_t>::max());
}

TEST(DeltaBinaryPackedTest, EveryTruncationFails) {
  std::mt19937_64 rng(13);
  for (const int64_t n : {0, 1, 2, 40, 129, 300}) {
    std::vector<int64_t> values(static_cast<size_t>(n));
    for (int64_t& v : values) v = static_cast<int64_t>(rng() % 1000);
    std::string s;
    EncodeDeltaBinaryPacked(values.data(), n, &s);
    ExpectEveryTruncationFails(s, [&](const uint8_t* d, size_t size) {
      std::vector<int64_t> out = {17};
      const bool ok = DecodeDeltaBinaryPacked(d, size, 1000, &out).ok();
      if (!ok) {
        EXPECT_THAT(out, ElementsAre(17));
      }  // left as it was
      return ok;
    });
  }
}

TEST(DeltaBinaryPackedTest, RejectsLyingHeaders) {
  std::vector<int64_t> out;
  auto error = [&](const std::string& s, int64_t max_values = 1000) {
    auto r = DecodeDeltaBinaryPacked(U8(s), s.size(), max_values, &out);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(out.empty());
    return std::string(r.status().message());
  };
  // 2^62 values against a max of 1000: refused before allocating.
  EXPECT_THAT(
      error(Bytes({0x80, 0x01, 0x04, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x00})),
      HasSubstr("header declares 4611686018427387904 values, more than the 1000 "
                "expected at byte 3"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x05, 0x00}), 4),
              HasSubstr("declares 5 values, more than the 4"));
  // Within max_values, but 2 blocks cannot fit in the 6 bytes that remain.
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x81, 0x02, 0x00, 0, 0, 0, 0, 0, 0})),
              HasSubstr("header declares 257 values in 2 blocks but only 6 bytes remain at "
                        "byte 6"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x03, 0x00, 0x00, 70, 0, 0, 0})),
              HasSubstr("DELTA_BINARY_PACKED: miniblock bit width 70 > 64 at byte 6"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x03, 0x00, 0x00, 1, 0, 0, 0, 0xff})),
              HasSubstr("truncated miniblock: needs 4 bytes, 1 remain at byte 10"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x00, 0x03, 0x00})), HasSubstr("0 miniblocks"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x08, 0x03, 0x00})),
              HasSubstr("8 miniblocks do not split a block of 128 into multiples of 32"));
  EXPECT_THAT(error(Bytes({0x00, 0x01, 0x03, 0x00})), HasSubstr("block size 0"));
  EXPECT_THAT(error(Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x04, 0x03, 0x00})),
              HasSubstr("block size 34359738368"));
  // A three-byte min delta leaves room for only 2 of the 4 bit widths.
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x03, 0x00, 0x80, 0x80, 0x01, 0, 0})),
              HasSubstr("truncated miniblock bit widths: needs 4 bytes, 2 remain at byte 8"));
  EXPECT_THAT(error(Bytes({0x80, 0x01, 0x04, 0x03, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80})),
              HasSubstr("truncated varint min delta at byte 5"));
}

TEST(DeltaBinaryPackedTest, BitWidth64DeltasDecodeExactly) {
  // Deltas spanning the whole uint64 range force width 64 miniblocks.
  std::vector<int64_t> values = {0, std::numeric_limits<int64_t>::min(), 0,
                                 std::numeric_limits<int64_t>::max(), -1};
  for (int i = 0; i < 60; ++i) values.push_back(values[values.size() - 2] ^ (int64_t{1} << i));
  std::string s;
  EncodeDeltaBinaryPacked(values.data(), static_cast<int64_t>(values.size()), &s);
  // Header 5 bytes, min delta zigzag(INT64_MIN) 10 bytes, then widths.
  EXPECT_EQ(static_cast<uint8_t>(s[15]), 64);
  EXPECT_EQ(DecodeDelta(s), values);
}

// --- DELTA_LENGTH_BYTE_ARRAY ---------------------------------------------------------

TEST(DeltaLengthByteArrayTest, DecodesSpecExample) {
  // Lengths 5,5,6,6: first zigzag(5) = 10; deltas 0,1,0, min 0, width 1,
  // bits 0,1,0 = 0x02; then the concatenated bytes.
  const std::string s = Bytes({0x80, 0x01, 0x04, 0x04, 0x0a, 0x00, 0x01, 0, 0, 0, 0x02, 0, 0, 0}) +
                        "HelloWorldFoobarABCDEF";
  ByteArrays out;
  auto consumed = DecodeDeltaLengthByteArray(U8(s), s.size(), 100, &out);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, s.size());
  EXPECT_THAT(Strings(out), ElementsAre("Hello", "World", "Foobar", "ABCDEF"));

  std::string back;
  EncodeDeltaLengthByteArray(out, &back);
  EXPECT_EQ(back, s);
}

TEST(DeltaLengthByteArrayTest, RoundTripsEmptyAndRandomValues) {
  std::mt19937_64 rng(17);
  std::vector<std::string> values = {"", "", "a", "", "bc", ""};
  for (int i = 0; i < 500; ++i) {
    std::string v(rng() % 20, '\0');
    for (char& c : v) c = static_cast<char>(rng());
    values.push_back(v);
  }
  std::string s;
  EncodeDeltaLengthByteArray(MakeByteArrays(values), &s);
  ByteArrays out = MakeByteArrays({"before"});
  auto consumed = DecodeDeltaLengthByteArray(U8(s), s.size(), 1000, &out);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, s.size());
  values.insert(values.begin(), "before");
  EXPECT_EQ(Strings(out), values);
}

TEST(DeltaLengthByteArrayTest, EveryTruncationAndNegativeLengthFails) {
  std::string s;
  EncodeDeltaLengthByteArray(MakeByteArrays({"abc", "", "defgh", "i"}), &s);
  ExpectEveryTruncationFails(s, [](const uint8_t* d, size_t n) {
    ByteArrays out;
    const bool ok = DecodeDeltaLengthByteArray(d, n, 100, &out).ok();
    if (!ok) {
      EXPECT_EQ(out.size(), 0);
    }
    return ok;
  });
  const std::vector<int64_t> lengths = {2, -1};
  std::string neg;
  EncodeDeltaBinaryPacked(lengths.data(), 2, &neg);
  neg += "abc";
  ByteArrays out;
  auto r = DecodeDeltaLengthByteArray(U8(neg), neg.size(), 100, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("DELTA_LENGTH_BYTE_ARRAY: value 1 has length -1"));
}

// --- DELTA_BYTE_ARRAY --------------------------------------------------------------

// Encodings.md front-coding example: prefixes 0,2,0,3; suffix lengths
// 4,2,6,5; suffixes "axislebabbleyhood".
const std::string& SpecDeltaByteArray() {
  static const std::string* s = new std::string(
      // Prefixes: first 0, deltas 2,-2,3, min -2 (zigzag 3), relative
      // 4,0,5 at width 3 = 0x44 0x01.
      Bytes({0x80, 0x01, 0x04, 0x04, 0x00, 0x03, 0x03, 0, 0, 0, 0x44,
             0x01, 0,    0,    0,    0,    0,    0,    0, 0, 0, 0}) +
      // Suffix lengths: first zigzag(4) = 8, deltas -2,4,-1, min -2,
      // relative 0,6,1 at width 3 = 0x70 0x00.
      Bytes({0x80, 0x01, 0x04, 0x04, 0x08, 0x03, 0x03, 0, 0, 0, 0x70,
             0,    0,    0,    0,    0,    0,    0,    0, 0, 0, 0}) +
      "axislebabbleyhood");
  return *s;
}

TEST(DeltaByteArrayTest, DecodesSpecFrontCodingExample) {
  const std::string& s = SpecDeltaByteArray();
  ByteArrays out;
  auto consumed = DecodeDeltaByteArray(U8(s), s.size(), 100, &out);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, s.size());
  EXPECT_THAT(Strings(out), ElementsAre("axis", "axle", "babble", "babyhood"));
}

TEST(DeltaByteArrayTest, EncodesSpecFrontCodingExample) {
  std::string s;
  EncodeDeltaByteArray(MakeByteArrays({"axis", "axle", "babble", "babyhood"}), &s);
  EXPECT_EQ(s, SpecDeltaByteArray());
}

TEST(DeltaByteArrayTest, RoundTripsSharedPrefixesAndEmptyValues) {
  std::mt19937_64 rng(19);
  std::vector<std::string> values = {"", "", "x", "x", "", "xyz", "xy", "xyzzy", ""};
  std::string prev = "common/prefix/";
  for (int i = 0; i < 700; ++i) {
    std::string v = prev.substr(0, rng() % (prev.size() + 1));
    for (size_t k = rng() % 6; k > 0; --k) v.push_back(static_cast<char>('a' + rng() % 3));
    values.push_back(v);
    prev = v.empty() ? "common/" : v;
  }
  std::string s;
  EncodeDeltaByteArray(MakeByteArrays(values), &s);
  ByteArrays out;
  auto consumed = DecodeDeltaByteArray(U8(s), s.size(), 1000, &out);
  ASSERT_TRUE(consumed.ok()) << consumed.status();
  EXPECT_EQ(*consumed, s.size());
  EXPECT_EQ(Strings(out), values);
}

TEST(DeltaByteArrayTest, EveryTruncationFails) {
  ExpectEveryTruncationFails(SpecDeltaByteArray(), [](const uint8_t* d, size_t n) {
    ByteArrays out;
    return DecodeDeltaByteArray(d, n, 100, &out).ok();
  });
}

// Builds a DELTA_BYTE_ARRAY stream from explicit prefix lengths and suffixes.
std::string FrontCoded(const std::vector<int64_t>& prefixes,
                       const std::vector<std::string>& suffixes) {
  std::string s;
  EncodeDeltaBinaryPacked(prefixes.data(), static_cast<int64_t>(prefixes.size()), &s);
  EncodeDeltaLengthByteArray(MakeByteArrays(suffixes), &s);
  return s;
}

TEST(DeltaByteArrayTest, RejectsPrefixLongerThanThePreviousValue) {
  ByteArrays out = MakeByteArrays({"keep"});
  std::string s = FrontCoded({0, 3}, {"ab", "c"});
  auto r = DecodeDeltaByteArray(U8(s), s.size(), 100, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(),
              HasSubstr("value 1 has prefix length 3 but the previous value has 2 bytes"));
  EXPECT_THAT(Strings(out), ElementsAre("keep"));

  s = FrontCoded({1}, {"a"});  // the first value has no predecessor
  EXPECT_FALSE(DecodeDeltaByteArray(U8(s), s.size(), 100, &out).ok());
  s = FrontCoded({0, -1}, {"a", "b"});
  EXPECT_FALSE(DecodeDeltaByteArray(U8(s), s.size(), 100, &out).ok());
}

TEST(DeltaByteArrayTest, RejectsMismatchedCounts) {
  const std::string s = FrontCoded({0, 1, 1}, {"ab", "c"});
  ByteArrays out;
  auto r = DecodeDeltaByteArray(U8(s), s.size(), 100, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("3 prefix lengths but 2 suffix lengths"));
}

TEST(DeltaByteArrayTest, CapsOutputAmplifiedByRepeatedPrefixes) {
  // One 1000-byte value, then 2M values repeating it in full: ~2 GB of
  // output from a stream of about 160 KB.
  constexpr int64_t kN = 2'000'000;
  std::vector<int64_t> prefixes(kN, 1000);
  prefixes[0] = 0;
  std::vector<std::string> suffixes(kN);
  suffixes[0] = std::string(1000, 'z');
  const std::string s = FrontCoded(prefixes, suffixes);
  ASSERT_LT(s.size(), 200'000u);
  ByteArrays out;
  auto r = DecodeDeltaByteArray(U8(s), s.size(), kN, &out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("values decode to more than 1073741824 bytes"));
  EXPECT_EQ(out.size(), 0);
}

// --- BYTE_STREAM_SPLIT --------------------------------------------------------------

TEST(ByteStreamSplitTest, MatchesSpecExample) {
  const std::string plain =
      Bytes({0xaa, 0xbb, 0xcc, 0xdd, 0x00, 0x11, 0x22, 0x33, 0xa3, 0xb4, 0xc5, 0xd6});
  const std::string split =
      Bytes({0xaa, 0x00, 0xa3, 0xbb, 0x11, 0xb4, 0xcc, 0x22, 0xc5, 0xdd, 0x33, 0xd6});
  std::string encoded;
  EncodeByteStreamSplit(U8(plain), 4, 3, &encoded);
  EXPECT_EQ(encoded, split);
  std::string decoded(12, '\0');
  ASSERT_TRUE(DecodeByteStreamSplit(U8(split), split.size(), 4, 3,
                                    reinterpret_cast<uint8_t*>(decoded.data()))
                  .ok());
  EXPECT_EQ(decoded, plain);
}

TEST(ByteStreamSplitTest, RoundTripsEveryWidthAndRejectsShortInput) {
  std::mt19937_64 rng(23);
  for (size_t width = 1; width <= 17; ++width) {
    const int64_t n = 333;
    std::string plain(width * n, '\0');
    for (char& c : plain) c = static_cast<char>(rng());
    std::string encoded;
    EncodeByteStreamSplit(U8(plain), width, n, &encoded);
    ASSERT_EQ(encoded.size(), plain.size());
    std::string decoded(plain.size(), '\0');
    ASSERT_TRUE(DecodeByteStreamSplit(U8(encoded), encoded.size(), width, n,
                                      reinterpret_cast<uint8_t*>(decoded.data()))
                    .ok());
    EXPECT_EQ(decoded, plain) << "width " << width;
    const Status short_input = DecodeByteStreamSplit(U8(encoded), encoded.size() - 1, width, n,
                                                     reinterpret_cast<uint8_t*>(decoded.data()));
    EXPECT_EQ(short_input.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(short_input.message(), HasSubstr("BYTE_STREAM_SPLIT"));
  }
  uint8_t out[1];
  EXPECT_EQ(DecodeByteStreamSplit(out, 1, 0, 1, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DecodeByteStreamSplit(out, 1, 8, std::numeric_limits<int64_t>::max() / 4, out).ok());
}

}  // namespace
}  // namespace flywheel::interop::parquet

namespace flywheel::interop::parquet {
namespace {

TEST(CountRleBitPackedTest, CountsWhatTheRunsHoldWithoutDecoding) {
  // An RLE run of 5 ones, then a bit-packed run of 1 group (8 values) at width 1.
  const std::string s = Bytes({5 << 1, 1, (1 << 1) | 1, 0xAA});
  EXPECT_EQ(*CountRleBitPacked(U8(s), s.size(), 1, 100), 13);
  EXPECT_EQ(*CountRleBitPacked(U8(s), s.size(), 1, 7), 7);  // stops at n
  // A run header claiming two billion repeats holds them (that is RLE), but
  // a stream that ends first holds only what it has.
  const std::string big = Bytes({0xFE, 0xFF, 0xFF, 0xFF, 0x0F, 1});  // (2^31 - 1) ones
  EXPECT_EQ(*CountRleBitPacked(U8(big), big.size(), 1, int64_t{1} << 40), (int64_t{1} << 31) - 1);
  EXPECT_EQ(*CountRleBitPacked(U8(big), big.size() - 1, 1, 10), 0);  // the run's value is missing
  // A bit-packed run past the end is an error, as in the decoder.
  const std::string past = Bytes({(100 << 1) | 1, 0});
  EXPECT_THAT(CountRleBitPacked(U8(past), past.size(), 3, 10).status().message(), HasSubstr("runs past the end"));
  EXPECT_FALSE(CountRleBitPacked(U8(s), s.size(), 33, 1).ok());
}

}  // namespace
}  // namespace flywheel::interop::parquet

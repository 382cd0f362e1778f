// Fuzzes the Parquet page encodings (flywheel/interop/parquet/encoding.h).
// Input layout:
//   byte 0: decoder (mod 8): 0 RLE hybrid, 1 BIT_PACKED, 2 PLAIN BOOLEAN,
//           3 PLAIN BYTE_ARRAY, 4 DELTA_BINARY_PACKED,
//           5 DELTA_LENGTH_BYTE_ARRAY, 6 DELTA_BYTE_ARRAY, 7 BYTE_STREAM_SPLIT
//   byte 1: bit width (mod 34, so 33 tests the argument check) or, for
//           BYTE_STREAM_SPLIT, value width (mod 17, 0 tests the check)
//   bytes 2-3: value count, or max_values for the self-describing decoders
//   rest: the encoded bytes, in a buffer of exactly their size.
// Checks: each decoder returns an error or a result and never reads outside
// the input; bytes consumed never exceed the input; where decoding succeeds,
// re-encoding and decoding again gives the same values (and, for the
// canonical encodings, the same bytes); the hybrid and BIT_PACKED decoders
// agree with bit-by-bit reference decoders written here.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flywheel/interop/parquet/encoding.h"

namespace {

using flywheel::interop::parquet::ByteArrays;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

const uint8_t* U8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The hybrid decoded one bit at a time, trusting a stream the fast decoder
// has already accepted.
std::vector<uint32_t> ReferenceHybrid(const uint8_t* d, int w, int64_t n, size_t* consumed) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (static_cast<int64_t>(out.size()) < n) {
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = d[pos++];
      header |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) break;
    }
    const uint64_t left = static_cast<uint64_t>(n) - out.size();
    if (header & 1) {
      const uint64_t groups = header >> 1;
      const uint64_t take = groups > left / 8 ? left : groups * 8;
      for (uint64_t v = 0; v < take; ++v) {
        uint32_t value = 0;
        for (int k = 0; k < w; ++k) {
          const uint64_t bit = pos * 8 + v * static_cast<uint64_t>(w) + static_cast<uint64_t>(k);
          value |= static_cast<uint32_t>((d[bit / 8] >> (bit % 8)) & 1) << k;
        }
        out.push_back(value);
      }
      pos += groups * static_cast<uint64_t>(w);
    } else {
      uint32_t value = 0;
      for (int b = 0; b < (w + 7) / 8; ++b) value |= uint32_t{d[pos++]} << (8 * b);
      const uint64_t take = (header >> 1) < left ? (header >> 1) : left;
      out.insert(out.end(), take, value);
    }
  }
  *consumed = pos;
  return out;
}

bool SameValues(const ByteArrays& a, const ByteArrays& b) {
  if (a.size() != b.size()) return false;
  for (int64_t i = 0; i < a.size(); ++i) {
    const int64_t la = a.offsets[i + 1] - a.offsets[i];
    const int64_t lb = b.offsets[i + 1] - b.offsets[i];
    if (la != lb) return false;
    if (a.data.compare(static_cast<size_t>(a.offsets[i]), static_cast<size_t>(la), b.data,
                       static_cast<size_t>(b.offsets[i]), static_cast<size_t>(lb)) != 0) {
      return false;
    }
  }
  return true;
}

void FuzzRle(const uint8_t* d, size_t size, int w, int64_t n) {
  std::vector<uint32_t> out(static_cast<size_t>(n));
  auto consumed = flywheel::interop::parquet::DecodeRleBitPacked(d, size, w, n, out.data());
  if (w > 32) return Check(!consumed.ok());
  if (!consumed.ok()) return;
  Check(*consumed <= size);
  size_t ref_consumed = 0;
  Check(ReferenceHybrid(d, w, n, &ref_consumed) == out);
  Check(ref_consumed == *consumed);
  std::string again;
  flywheel::interop::parquet::EncodeRleBitPacked(out.data(), n, w, &again);
  std::vector<uint32_t> back(static_cast<size_t>(n));
  auto again_consumed =
      flywheel::interop::parquet::DecodeRleBitPacked(U8(again), again.size(), w, n, back.data());
  Check(again_consumed.ok() && *again_consumed == again.size() && back == out);
}

void FuzzBitPackedLegacy(const uint8_t* d, size_t size, int w, int64_t n) {
  std::vector<uint32_t> out(static_cast<size_t>(n));
  auto consumed = flywheel::interop::parquet::DecodeBitPackedLegacy(d, size, w, n, out.data());
  if (w > 32) return Check(!consumed.ok());
  if (!consumed.ok()) return;
  Check(*consumed == (static_cast<uint64_t>(n) * static_cast<uint64_t>(w) + 7) / 8);
  Check(*consumed <= size);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t expected = 0;
    for (int k = 0; k < w; ++k) {
      const uint64_t bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(w) + k;
      expected = (expected << 1) | ((d[bit / 8] >> (7 - bit % 8)) & 1);
    }
    Check(out[static_cast<size_t>(i)] == expected);
  }
}

void FuzzPlainBoolean(const uint8_t* d, size_t size, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  auto consumed = flywheel::interop::parquet::DecodePlainBoolean(d, size, n, out.data());
  if (!consumed.ok()) return;
  Check(*consumed == static_cast<size_t>(n + 7) / 8 && *consumed <= size);
  std::string again;
  flywheel::interop::parquet::EncodePlainBoolean(out.data(), n, &again);
  Check(again.size() == *consumed);
  // Only the padding bits of the last byte may differ.
  for (int64_t i = 0; i < n; ++i) {
    Check(((static_cast<uint8_t>(again[i / 8]) ^ d[i / 8]) >> (i % 8) & 1) == 0);
  }
}

void FuzzPlainByteArray(const uint8_t* d, size_t size, int64_t n) {
  ByteArrays out;
  auto consumed = flywheel::interop::parquet::DecodePlainByteArray(d, size, n, &out);
  if (!consumed.ok()) return Check(out.size() == 0 && out.data.empty());
  Check(*consumed <= size && out.size() == n);
  std::string again;
  flywheel::interop::parquet::EncodePlainByteArray(out, &again);
  Check(again.size() == *consumed && std::memcmp(again.data(), d, again.size()) == 0);
}

void FuzzDeltaBinaryPacked(const uint8_t* d, size_t size, int64_t max_values) {
  std::vector<int64_t> out;
  auto consumed = flywheel::interop::parquet::DecodeDeltaBinaryPacked(d, size, max_values, &out);
  if (!consumed.ok()) return Check(out.empty());
  Check(*consumed <= size && static_cast<int64_t>(out.size()) <= max_values);
  std::string again;
  flywheel::interop::parquet::EncodeDeltaBinaryPacked(out.data(), static_cast<int64_t>(out.size()), &again);
  std::vector<int64_t> back;
  auto again_consumed =
      flywheel::interop::parquet::DecodeDeltaBinaryPacked(U8(again), again.size(), max_values, &back);
  Check(again_consumed.ok() && *again_consumed == again.size() && back == out);
}

void FuzzDeltaLengthByteArray(const uint8_t* d, size_t size, int64_t max_values) {
  ByteArrays out;
  auto consumed = flywheel::interop::parquet::DecodeDeltaLengthByteArray(d, size, max_values, &out);
  if (!consumed.ok()) return Check(out.size() == 0 && out.data.empty());
  Check(*consumed <= size && out.size() <= max_values);
  std::string again;
  flywheel::interop::parquet::EncodeDeltaLengthByteArray(out, &again);
  ByteArrays back;
  auto again_consumed =
      flywheel::interop::parquet::DecodeDeltaLengthByteArray(U8(again), again.size(), max_values, &back);
  Check(again_consumed.ok() && *again_consumed == again.size() && SameValues(back, out));
}

void FuzzDeltaByteArray(const uint8_t* d, size_t size, int64_t max_values) {
  ByteArrays out;
  auto consumed = flywheel::interop::parquet::DecodeDeltaByteArray(d, size, max_values, &out);
  if (!consumed.ok()) return Check(out.size() == 0 && out.data.empty());
  Check(*consumed <= size && out.size() <= max_values);
  std::string again;
  flywheel::interop::parquet::EncodeDeltaByteArray(out, &again);
  ByteArrays back;
  auto again_consumed =
      flywheel::interop::parquet::DecodeDeltaByteArray(U8(again), again.size(), max_values, &back);
  Check(again_consumed.ok() && *again_consumed == again.size() && SameValues(back, out));
}

void FuzzByteStreamSplit(const uint8_t* d, size_t size, size_t width, int64_t n) {
  std::vector<uint8_t> out(width * static_cast<size_t>(n));
  const flywheel::Status s =
      flywheel::interop::parquet::DecodeByteStreamSplit(d, size, width, n, out.data());
  if (width == 0) return Check(!s.ok());
  if (!s.ok()) return Check(out.size() > size);
  std::string again;
  flywheel::interop::parquet::EncodeByteStreamSplit(out.data(), width, n, &again);
  Check(again.size() == out.size() && std::memcmp(again.data(), d, again.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int decoder = data[0] % 8;
  const int param = data[1];
  // Byte-array outputs can be max_values times the input (front coding), so
  // their counts stay small enough for the fuzzer's memory limit.
  const int64_t count = data[2] | data[3] << 8;
  const int64_t small_count = count % 4096;
  // libFuzzer's buffer ends exactly at `size`, so ASan catches any read past
  // the encoded bytes.
  const uint8_t* d = data + 4;
  const size_t n = size - 4;
  switch (decoder) {
    case 0:
      FuzzRle(d, n, param % 34, count);
      break;
    case 1:
      FuzzBitPackedLegacy(d, n, param % 34, count);
      break;
    case 2:
      FuzzPlainBoolean(d, n, count);
      break;
    case 3:
      FuzzPlainByteArray(d, n, count);
      break;
    case 4:
      FuzzDeltaBinaryPacked(d, n, count);
      break;
    case 5:
      FuzzDeltaLengthByteArray(d, n, small_count);
      break;
    case 6:
      FuzzDeltaByteArray(d, n, small_count);
      break;
    default:
      FuzzByteStreamSplit(d, n, static_cast<size_t>(param % 17), count);
      break;
  }
  return 0;
}

// Parquet value and level encodings (parquet-format Encodings.md): decoders
// for every encoding a data or dictionary page may use, and the encoders the
// writer needs. docs/format/parquet.md.
//
// Every decoder is bounded by the bytes it is given and by the value count
// its caller expects: a run, block or length that points past the input, a
// bit width above what the encoding allows, or a header claiming more values
// than `max_values` is an InvalidArgument/DataLoss error naming the encoding
// and the offset, never an out-of-bounds read or an unbounded allocation.
// Arguments the caller got wrong (negative counts, a bit width outside the
// encoding's range) are InvalidArgument; anything wrong in the bytes is
// DataLoss. Offsets in messages count from `data`. On error, decoders that
// append leave `out` as it was.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::interop::parquet {

// Variable-length values back to back: value i is
// data[offsets[i], offsets[i + 1]). Decoders append.
struct ByteArrays {
  std::vector<int64_t> offsets{0};
  std::string data;

  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  void Append(const void* p, size_t n) {
    data.append(static_cast<const char*>(p), n);
    offsets.push_back(static_cast<int64_t>(data.size()));
  }
};

// Bits needed to store values in [0, max_value] (0 for 0).
int BitWidth(uint64_t max_value);

// RLE / bit-packed hybrid (levels, dictionary indices, RLE booleans), without
// a length prefix: decodes exactly `n` values of `bit_width` bits (0..32)
// into out[0, n). Bit-packed runs may be padded past n; that is allowed.
// Returns the bytes consumed (the end of the run holding the last value).
Result<size_t> DecodeRleBitPacked(const uint8_t* data, size_t size, int bit_width, int64_t n,
                                  uint32_t* out);

// How many of `n` values the RLE / bit-packed stream really holds (at most
// `n`), read from its run headers alone: nothing is decoded or allocated, so
// a caller checks a header's count against the stream before sizing arrays
// by it. A run that cannot be read (a bit-packed run past the end, a value
// wider than `bit_width`) is an error; running out of bytes is not (the count
// so far is returned).
Result<int64_t> CountRleBitPacked(const uint8_t* data, size_t size, int bit_width, int64_t n);

// The deprecated BIT_PACKED level encoding: `n` values of `bit_width` bits
// packed most significant bit first. Returns bytes consumed
// (ceil(n * bit_width / 8)).
Result<size_t> DecodeBitPackedLegacy(const uint8_t* data, size_t size, int bit_width, int64_t n,
                                     uint32_t* out);

// PLAIN BOOLEAN: `n` values bit-packed LSB first, one output byte (0/1) each.
// Returns bytes consumed (ceil(n / 8)).
Result<size_t> DecodePlainBoolean(const uint8_t* data, size_t size, int64_t n, uint8_t* out);

// PLAIN BYTE_ARRAY: `n` values, each a 4-byte little-endian length then the
// bytes. Returns bytes consumed.
Result<size_t> DecodePlainByteArray(const uint8_t* data, size_t size, int64_t n, ByteArrays* out);

// DELTA_BINARY_PACKED: decodes every value the stream's header declares
// (error if more than `max_values`), appending to `out` as 64-bit values
// (arithmetic wraps modulo 2^64; an INT32 column's values are the low 32 bits
// of the results). Returns bytes consumed (the end of the last miniblock that
// holds a value; later miniblocks of the last block may be absent).
Result<size_t> DecodeDeltaBinaryPacked(const uint8_t* data, size_t size, int64_t max_values,
                                       std::vector<int64_t>* out);

// DELTA_LENGTH_BYTE_ARRAY: lengths (DELTA_BINARY_PACKED) then the
// concatenated bytes. Appends every value (at most `max_values`) to `out`.
// Returns bytes consumed.
Result<size_t> DecodeDeltaLengthByteArray(const uint8_t* data, size_t size, int64_t max_values,
                                          ByteArrays* out);

// Most bytes one DecodeDeltaByteArray call may produce. Front coding lets a
// few input bytes stand for a long repeated prefix, so without a cap a tiny
// page could demand max_values times its own size; no real page decodes to
// anywhere near this.
inline constexpr int64_t kMaxDeltaByteArrayBytes = int64_t{1} << 30;

// DELTA_BYTE_ARRAY (incremental / front coding): prefix lengths
// (DELTA_BINARY_PACKED) then suffixes (DELTA_LENGTH_BYTE_ARRAY); value i is
// the first prefix[i] bytes of value i - 1 followed by suffix i. Appends every
// value (at most `max_values`, at most kMaxDeltaByteArrayBytes in all).
// Returns bytes consumed.
Result<size_t> DecodeDeltaByteArray(const uint8_t* data, size_t size, int64_t max_values,
                                    ByteArrays* out);

// BYTE_STREAM_SPLIT: `n` values of `width` bytes stored as `width` streams of
// n bytes (stream k holds byte k of every value). `size` must be at least
// n * width. Writes n * width bytes to `out`, values in order.
Status DecodeByteStreamSplit(const uint8_t* data, size_t size, size_t width, int64_t n,
                             uint8_t* out);

// --- Encoders (appending to `out`) ----------------------------------------

// RLE / bit-packed hybrid without length prefix: runs of >= 8 equal values
// as RLE runs, the rest bit-packed in groups of 8.
void EncodeRleBitPacked(const uint32_t* values, int64_t n, int bit_width, std::string* out);
void EncodePlainBoolean(const uint8_t* values, int64_t n, std::string* out);
void EncodePlainByteArray(const ByteArrays& values, std::string* out);
// Block size 128, 4 miniblocks (the values parquet-mr and arrow use).
void EncodeDeltaBinaryPacked(const int64_t* values, int64_t n, std::string* out);
void EncodeDeltaLengthByteArray(const ByteArrays& values, std::string* out);
void EncodeDeltaByteArray(const ByteArrays& values, std::string* out);
void EncodeByteStreamSplit(const uint8_t* values, size_t width, int64_t n, std::string* out);

}  // namespace flywheel::interop::parquet

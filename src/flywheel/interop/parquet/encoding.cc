// Parquet value and level encodings. The byte layouts are those of
// parquet-format Encodings.md; docs/format/parquet.md says which pages use
// which.
//
// The decoders share one shape: a Cursor walks the input, every read is
// checked against what remains, and counts from the stream are compared with
// what remains (or with max_values) before anything is allocated. Bit
// unpacking, the hot path of level and dictionary-index decoding, goes 32
// values at a time through kernels generated per bit width whose shifts and
// masks are compile-time constants; each value costs one unaligned 64-bit
// load.
#include "flywheel/interop/parquet/encoding.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flywheel::interop::parquet {
namespace {

constexpr char kRle[] = "RLE";
constexpr char kBitPacked[] = "BIT_PACKED";
constexpr char kPlainBoolean[] = "PLAIN BOOLEAN";
constexpr char kPlainByteArray[] = "PLAIN BYTE_ARRAY";
constexpr char kDeltaBinaryPacked[] = "DELTA_BINARY_PACKED";
constexpr char kDeltaLengthByteArray[] = "DELTA_LENGTH_BYTE_ARRAY";
constexpr char kDeltaByteArray[] = "DELTA_BYTE_ARRAY";
constexpr char kByteStreamSplit[] = "BYTE_STREAM_SPLIT";

// The largest DELTA_BINARY_PACKED block we accept. Writers use 128 or 256;
// the cap keeps block arithmetic (values per miniblock times 64 bits) far
// from overflow.
constexpr uint64_t kMaxDeltaBlockSize = uint64_t{1} << 31;

// RLE run lengths are at most 2^31 - 1 values (Encodings.md, note 3), so a
// bit-packed run holds at most this many groups of 8.
constexpr int64_t kMaxRleRun = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxBitPackedGroups = kMaxRleRun / 8;

// ---------------------------------------------------------------------------
// Reading.

struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t pos;

  size_t remaining() const { return size - pos; }
};

absl::Status Truncated(std::string_view encoding, std::string_view what, uint64_t need,
                       const Cursor& c) {
  return absl::DataLossError(absl::StrCat(AsAbsl(encoding), ": truncated ", AsAbsl(what),
                                          ": needs ", need, " bytes, ", c.remaining(),
                                          " remain at byte ", c.pos));
}

// ULEB128, at most 10 bytes; the tenth may only carry bit 63.
Result<uint64_t> ReadUleb(Cursor& c, std::string_view encoding, std::string_view what) {
  const size_t start = c.pos;
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    if (c.pos >= c.size) {
      return absl::DataLossError(
          absl::StrCat(AsAbsl(encoding), ": truncated varint ", AsAbsl(what), " at byte ", start));
    }
    const uint8_t b = c.data[c.pos++];
    if (shift == 63 && b > 1) {
      return absl::DataLossError(absl::StrCat(AsAbsl(encoding), ": varint ", AsAbsl(what),
                                              " overflows 64 bits at byte ", start));
    }
    value |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return value;
  }
}

uint64_t ZigZagDecode(uint64_t u) { return (u >> 1) ^ (~(u & 1) + 1); }

uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

uint32_t LoadLE32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

// ---------------------------------------------------------------------------
// Bit unpacking, LSB first (the RLE hybrid and DELTA_BINARY_PACKED order).

// A kernel reads up to byte 4 * W + 8 of its input for 32 values of W bits;
// with this much slack past the 4 * W packed bytes it may read in place.
constexpr size_t kUnpackSlack = 16;

template <typename T, int W, size_t I>
inline T ExtractValue(const uint8_t* in) {
  constexpr size_t kBit = I * W;
  constexpr size_t kByte = kBit / 8;
  constexpr int kShift = static_cast<int>(kBit % 8);
  uint64_t v = LoadLE64(in + kByte) >> kShift;
  // Only widths above 56 can straddle nine bytes.
  if constexpr (kShift + W > 64) v |= uint64_t{in[kByte + 8]} << (64 - kShift);
  if constexpr (W < 64) v &= (uint64_t{1} << W) - 1;
  return static_cast<T>(v);
}

template <typename T, int W, size_t... I>
inline void Unpack32Values(const uint8_t* in, T* out, std::index_sequence<I...>) {
  ((out[I] = ExtractValue<T, W, I>(in)), ...);
}

// Unpacks 32 values of W bits from `in` (4 * W bytes plus kUnpackSlack).
template <typename T, int W>
void Unpack32(const uint8_t* in, T* out) {
  if constexpr (W == 0) {
    std::fill_n(out, 32, T{0});
  } else {
    Unpack32Values<T, W>(in, out, std::make_index_sequence<32>{});
  }
}

template <typename T>
using Unpack32Fn = void (*)(const uint8_t*, T*);

template <typename T, size_t... W>
constexpr std::array<Unpack32Fn<T>, sizeof...(W)> MakeUnpackTable(std::index_sequence<W...>) {
  return {&Unpack32<T, static_cast<int>(W)>...};
}

constexpr auto kUnpack32 = MakeUnpackTable<uint32_t>(std::make_index_sequence<33>{});
constexpr auto kUnpack64 = MakeUnpackTable<uint64_t>(std::make_index_sequence<65>{});

// Where the kernel should read `chunk_bytes` packed bytes at `in`: in place
// when the buffer ending at `end` leaves slack after them, else from a zeroed
// copy of the `have` bytes that are really there.
const uint8_t* KernelSource(const uint8_t* in, const uint8_t* end, size_t chunk_bytes, size_t have,
                            uint8_t* scratch) {
  if (static_cast<size_t>(end - in) >= chunk_bytes + kUnpackSlack) return in;
  std::memset(scratch, 0, 4 * 64 + kUnpackSlack);
  std::memcpy(scratch, in, have);
  return scratch;
}

// Unpacks `count` values of `w` bits (0..32) packed from `in`, which holds at
// least ceil(count * w / 8) bytes; bytes up to `end` may be read as slack.
void UnpackU32(const uint8_t* in, const uint8_t* end, int w, int64_t count, uint32_t* out) {
  const Unpack32Fn<uint32_t> kernel = kUnpack32[static_cast<size_t>(w)];
  const size_t chunk_bytes = 4 * static_cast<size_t>(w);
  int64_t i = 0;
  while (count - i >= 32 && static_cast<size_t>(end - in) >= chunk_bytes + kUnpackSlack) {
    kernel(in, out + i);
    in += chunk_bytes;
    i += 32;
  }
  // The tail (or a chunk too near the end of the buffer) goes through a
  // scratch output so that padding values past `count` land nowhere.
  alignas(8) uint8_t scratch[4 * 64 + kUnpackSlack];
  uint32_t values[32];
  while (i < count) {
    const int64_t k = std::min<int64_t>(32, count - i);
    const size_t have = static_cast<size_t>((k * w + 7) / 8);
    kernel(KernelSource(in, end, chunk_bytes, have, scratch), values);
    std::copy_n(values, k, out + i);
    i += k;
    if (i < count) in += chunk_bytes;  // never point past the buffer
  }
}

// ---------------------------------------------------------------------------
// Writing.

void PutUleb(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

uint64_t ZigZagEncode(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

void PutLE32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// Packs values LSB first into `out`, 64 bits at a time.
class BitWriter {
 public:
  explicit BitWriter(std::string* out) : out_(out) {}

  // REQUIRES: 0 <= w <= 64 and v < 2^w.
  void Put(uint64_t v, int w) {
    if (w == 0) return;
    acc_ |= v << bits_;
    if (bits_ + w >= 64) {
      PutBytes(acc_, 8);
      const int used = 64 - bits_;
      acc_ = used == 64 ? 0 : v >> used;
      bits_ = bits_ + w - 64;
    } else {
      bits_ += w;
    }
  }

  // Writes the partial last byte, zero padded.
  void Finish() {
    PutBytes(acc_, (bits_ + 7) / 8);
    acc_ = 0;
    bits_ = 0;
  }

 private:
  void PutBytes(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<char>(v >> (8 * i)));
  }

  std::string* out_;
  uint64_t acc_ = 0;
  int bits_ = 0;  // always < 64 between calls
};

// ---------------------------------------------------------------------------
// DELTA_BINARY_PACKED core, shared by the byte-array encodings, which embed
// streams at an offset; messages therefore name offsets in the outer buffer.

Status DecodeDeltaBlocks(Cursor& c, uint64_t block_size, uint64_t miniblocks, uint64_t total,
                         uint64_t last, int64_t* dst) {
  const uint64_t per_miniblock = block_size / miniblocks;
  const uint8_t* end = c.data + c.size;
  alignas(8) uint8_t scratch[4 * 64 + kUnpackSlack];
  uint64_t deltas[32];
  dst[0] = static_cast<int64_t>(last);
  uint64_t written = 1;
  while (written < total) {
    FW_ASSIGN_OR_RETURN(const uint64_t min_zz, ReadUleb(c, kDeltaBinaryPacked, "min delta"));
    const uint64_t min_delta = ZigZagDecode(min_zz);
    if (c.remaining() < miniblocks) {
      return Truncated(kDeltaBinaryPacked, "miniblock bit widths", miniblocks, c);
    }
    const size_t widths_at = c.pos;
    c.pos += miniblocks;
    // Stop at the last value: the miniblocks after it may be absent and
    // their widths are allowed to be garbage.
    for (uint64_t m = 0; m < miniblocks && written < total; ++m) {
      const int w = c.data[widths_at + m];
      if (w > 64) {
        return absl::DataLossError(absl::StrCat(kDeltaBinaryPacked, ": miniblock bit width ", w,
                                                " > 64 at byte ", widths_at + m));
      }
      const uint64_t bytes = per_miniblock * static_cast<uint64_t>(w) / 8;
      if (c.remaining() < bytes) return Truncated(kDeltaBinaryPacked, "miniblock", bytes, c);
      const Unpack32Fn<uint64_t> kernel = kUnpack64[static_cast<size_t>(w)];
      const size_t chunk_bytes = 4 * static_cast<size_t>(w);
      const uint64_t take = std::min(per_miniblock, total - written);
      const uint8_t* in = c.data + c.pos;
      // Values are unsigned 64-bit throughout so that overflowing deltas
      // wrap the way the writer's did (Encodings.md requires it).
      for (uint64_t i = 0; i < take; i += 32) {
        kernel(KernelSource(in, end, chunk_bytes, chunk_bytes, scratch), deltas);
        const uint64_t k = std::min<uint64_t>(32, take - i);
        int64_t* o = dst + written + i;
        for (uint64_t j = 0; j < k; ++j) {
          last += min_delta + deltas[j];
          o[j] = static_cast<int64_t>(last);
        }
        in += chunk_bytes;
      }
      written += take;
      c.pos += bytes;
    }
  }
  return absl::OkStatus();
}

Status DecodeDelta(Cursor& c, int64_t max_values, std::vector<int64_t>* out) {
  if (max_values < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kDeltaBinaryPacked, ": negative max_values ", max_values));
  }
  size_t at = c.pos;
  FW_ASSIGN_OR_RETURN(const uint64_t block_size, ReadUleb(c, kDeltaBinaryPacked, "block size"));
  if (block_size == 0 || block_size % 128 != 0 || block_size > kMaxDeltaBlockSize) {
    return absl::DataLossError(absl::StrCat(kDeltaBinaryPacked, ": block size ", block_size,
                                            " is not a positive multiple of 128 up to ",
                                            kMaxDeltaBlockSize, " at byte ", at));
  }
  at = c.pos;
  FW_ASSIGN_OR_RETURN(const uint64_t miniblocks,
                      ReadUleb(c, kDeltaBinaryPacked, "miniblock count"));
  if (miniblocks == 0 || block_size % miniblocks != 0 || (block_size / miniblocks) % 32 != 0) {
    return absl::DataLossError(absl::StrCat(kDeltaBinaryPacked, ": ", miniblocks,
                                            " miniblocks do not split a block of ", block_size,
                                            " into multiples of 32 values at byte ", at));
  }
  at = c.pos;
  FW_ASSIGN_OR_RETURN(const uint64_t total, ReadUleb(c, kDeltaBinaryPacked, "value count"));
  if (total > static_cast<uint64_t>(max_values)) {
    return absl::DataLossError(absl::StrCat(kDeltaBinaryPacked, ": header declares ", total,
                                            " values, more than the ", max_values,
                                            " expected at byte ", at));
  }
  FW_ASSIGN_OR_RETURN(const uint64_t first, ReadUleb(c, kDeltaBinaryPacked, "first value"));
  if (total == 0) return absl::OkStatus();
  // Every block takes at least a min-delta byte and its bit widths, so a
  // count the remaining bytes cannot hold is a lie caught before allocating.
  const uint64_t blocks = (total - 1) / block_size + ((total - 1) % block_size != 0);
  if (blocks > c.remaining() / (1 + miniblocks)) {
    return absl::DataLossError(absl::StrCat(kDeltaBinaryPacked, ": header declares ", total,
                                            " values in ", blocks, " blocks but only ",
                                            c.remaining(), " bytes remain at byte ", c.pos));
  }
  const size_t base = out->size();
  out->resize(base + total);
  Status s =
      DecodeDeltaBlocks(c, block_size, miniblocks, total, ZigZagDecode(first), out->data() + base);
  if (!s.ok()) out->resize(base);
  return s;
}

// Checks that `lengths` are valid byte-array lengths whose bytes all lie
// within the cursor; returns their sum.
Result<uint64_t> CheckLengths(const std::vector<int64_t>& lengths, const Cursor& c,
                              std::string_view encoding) {
  uint64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t len = lengths[i];
    if (len < 0 || static_cast<uint64_t>(len) > c.remaining() - total) {
      return absl::DataLossError(absl::StrCat(AsAbsl(encoding), ": value ", i, " has length ", len,
                                              " but ", c.remaining() - total,
                                              " bytes remain at byte ", c.pos + total));
    }
    total += static_cast<uint64_t>(len);
  }
  return total;
}

// Appends values whose bytes lie back to back at the cursor.
void AppendConcatenated(const std::vector<int64_t>& lengths, uint64_t total, Cursor& c,
                        ByteArrays* out) {
  int64_t offset = static_cast<int64_t>(out->data.size());
  out->data.append(reinterpret_cast<const char*>(c.data + c.pos), total);
  out->offsets.reserve(out->offsets.size() + lengths.size());
  for (const int64_t len : lengths) {
    offset += len;
    out->offsets.push_back(offset);
  }
  c.pos += total;
}

// The lengths of `values`, for the encoders.
std::vector<int64_t> Lengths(const ByteArrays& values) {
  std::vector<int64_t> lengths(static_cast<size_t>(values.size()));
  for (size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = values.offsets[i + 1] - values.offsets[i];
  }
  return lengths;
}

// A value of `values` as a view.
std::string_view Value(const ByteArrays& values, int64_t i) {
  const size_t begin = static_cast<size_t>(values.offsets[static_cast<size_t>(i)]);
  const size_t end = static_cast<size_t>(values.offsets[static_cast<size_t>(i) + 1]);
  return std::string_view(values.data).substr(begin, end - begin);
}

// 8 output bytes (0 or 1) for each byte of PLAIN BOOLEAN input.
constexpr std::array<std::array<uint8_t, 8>, 256> MakeBoolTable() {
  std::array<std::array<uint8_t, 8>, 256> table{};
  for (int b = 0; b < 256; ++b) {
    for (int k = 0; k < 8; ++k) table[b][k] = static_cast<uint8_t>((b >> k) & 1);
  }
  return table;
}
constexpr auto kBoolTable = MakeBoolTable();

template <size_t W>
void UnsplitFixed(const uint8_t* data, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < W; ++k) out[i * W + k] = data[k * n + i];
  }
}

}  // namespace

int BitWidth(uint64_t max_value) { return static_cast<int>(std::bit_width(max_value)); }

// The arguments DecodeRleBitPacked and CountRleBitPacked share.
static Status CheckRleArgs(int bit_width, int64_t n) {
  if (bit_width < 0 || bit_width > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRle, ": bit width ", bit_width, " outside [0, 32]"));
  }
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(kRle, ": negative count ", n));
  return absl::OkStatus();
}

Result<size_t> DecodeRleBitPacked(const uint8_t* data, size_t size, int bit_width, int64_t n,
                                  uint32_t* out) {
  FW_RETURN_IF_ERROR(CheckRleArgs(bit_width, n));
  Cursor c{data, size, 0};
  const size_t value_bytes = static_cast<size_t>(bit_width + 7) / 8;
  const uint64_t width = static_cast<uint64_t>(bit_width);
  int64_t done = 0;
  // Every run consumes at least its header byte, so this loop ends within
  // `size` iterations even on zero-length runs, which carry no values and
  // are skipped rather than rejected.
  while (done < n) {
    const size_t run_at = c.pos;
    FW_ASSIGN_OR_RETURN(const uint64_t header, ReadUleb(c, kRle, "run header"));
    const uint64_t left = static_cast<uint64_t>(n - done);
    if (header & 1) {
      const uint64_t groups = header >> 1;
      if (width > 0 && groups > c.remaining() / width) {
        return absl::DataLossError(
            absl::StrCat(kRle, ": bit-packed run at byte ", run_at, " of ", groups, " groups of ",
                         width, " bytes runs past the end (", c.remaining(), " bytes remain)"));
      }
      const uint64_t take = groups > left / 8 ? left : groups * 8;
      UnpackU32(data + c.pos, data + size, bit_width, static_cast<int64_t>(take), out + done);
      c.pos += groups * width;
      done += static_cast<int64_t>(take);
    } else {
      if (c.remaining() < value_bytes) return Truncated(kRle, "run value", value_bytes, c);
      uint32_t value = 0;
      for (size_t b = 0; b < value_bytes; ++b) value |= uint32_t{data[c.pos + b]} << (8 * b);
      if (bit_width < 32 && (value >> bit_width) != 0) {
        return absl::DataLossError(absl::StrCat(kRle, ": run value ", value, " at byte ", c.pos,
                                                " does not fit in ", bit_width, " bits"));
      }
      c.pos += value_bytes;
      const uint64_t take = std::min(header >> 1, left);
      std::fill_n(out + done, take, value);
      done += static_cast<int64_t>(take);
    }
  }
  return c.pos;
}

Result<int64_t> CountRleBitPacked(const uint8_t* data, size_t size, int bit_width, int64_t n) {
  FW_RETURN_IF_ERROR(CheckRleArgs(bit_width, n));
  Cursor c{data, size, 0};
  const size_t value_bytes = static_cast<size_t>(bit_width + 7) / 8;
  const uint64_t width = static_cast<uint64_t>(bit_width);
  int64_t done = 0;
  while (done < n && c.remaining() > 0) {
    const size_t run_at = c.pos;
    FW_ASSIGN_OR_RETURN(const uint64_t header, ReadUleb(c, kRle, "run header"));
    const uint64_t left = static_cast<uint64_t>(n - done);
    if (header & 1) {
      const uint64_t groups = header >> 1;
      if (width > 0 && groups > c.remaining() / width) {
        return absl::DataLossError(
            absl::StrCat(kRle, ": bit-packed run at byte ", run_at, " of ", groups, " groups of ",
                         width, " bytes runs past the end (", c.remaining(), " bytes remain)"));
      }
      c.pos += groups * width;
      done += static_cast<int64_t>(groups > left / 8 ? left : groups * 8);
    } else {
      if (c.remaining() < value_bytes) return done;
      c.pos += value_bytes;
      done += static_cast<int64_t>(std::min(header >> 1, left));
    }
  }
  return done;
}

Result<size_t> DecodeBitPackedLegacy(const uint8_t* data, size_t size, int bit_width, int64_t n,
                                     uint32_t* out) {
  if (bit_width < 0 || bit_width > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(kBitPacked, ": bit width ", bit_width, " outside [0, 32]"));
  }
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(kBitPacked, ": negative count ", n));
  if (bit_width == 0) {
    std::fill_n(out, n, 0u);
    return size_t{0};
  }
  const uint64_t width = static_cast<uint64_t>(bit_width);
  // n * width bits must fit in size bytes; divide so that nothing overflows.
  const uint64_t max_bits = size > std::numeric_limits<uint64_t>::max() / 8
                                ? std::numeric_limits<uint64_t>::max()
                                : static_cast<uint64_t>(size) * 8;
  if (static_cast<uint64_t>(n) > max_bits / width) {
    return absl::DataLossError(absl::StrCat(kBitPacked, ": ", n, " values of ", bit_width,
                                            " bits need more than the ", size, " bytes given"));
  }
  const size_t bytes = static_cast<size_t>((static_cast<uint64_t>(n) * width + 7) / 8);
  // MSB first: value i is the `width` bits after bit i * width counted from
  // the top of byte 0. A big-endian word load at its first byte holds it
  // whole (at most 7 + 32 bits).
  int64_t i = 0;
  for (; i < n; ++i) {
    const uint64_t bit = static_cast<uint64_t>(i) * width;
    const size_t byte = static_cast<size_t>(bit / 8);
    if (byte + 8 > size) break;
    uint64_t word;
    std::memcpy(&word, data + byte, 8);
    if constexpr (std::endian::native == std::endian::little) word = __builtin_bswap64(word);
    out[i] = static_cast<uint32_t>((word << (bit % 8)) >> (64 - width));
  }
  for (; i < n; ++i) {
    const uint64_t bit = static_cast<uint64_t>(i) * width;
    const size_t byte = static_cast<size_t>(bit / 8);
    uint64_t word = 0;
    for (size_t b = 0; b < 8; ++b) {
      word = (word << 8) | (byte + b < size ? data[byte + b] : 0);
    }
    out[i] = static_cast<uint32_t>((word << (bit % 8)) >> (64 - width));
  }
  return bytes;
}

Result<size_t> DecodePlainBoolean(const uint8_t* data, size_t size, int64_t n, uint8_t* out) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kPlainBoolean, ": negative count ", n));
  }
  const uint64_t count = static_cast<uint64_t>(n);
  const uint64_t bytes = count / 8 + (count % 8 != 0);
  if (bytes > size) {
    return absl::DataLossError(absl::StrCat(kPlainBoolean, ": ", n, " values need ", bytes,
                                            " bytes, only ", size, " given"));
  }
  const size_t full = static_cast<size_t>(count / 8);
  for (size_t b = 0; b < full; ++b) std::memcpy(out + 8 * b, kBoolTable[data[b]].data(), 8);
  for (size_t k = 0; k < count % 8; ++k) out[8 * full + k] = (data[full] >> k) & 1;
  return static_cast<size_t>(bytes);
}

Result<size_t> DecodePlainByteArray(const uint8_t* data, size_t size, int64_t n, ByteArrays* out) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kPlainByteArray, ": negative count ", n));
  }
  if (static_cast<uint64_t>(n) > size / 4) {
    return absl::DataLossError(absl::StrCat(kPlainByteArray, ": ", n, " values need at least ", n,
                                            " * 4 bytes, only ", size, " given"));
  }
  // Validate every length first so that `out` grows once and only on success.
  Cursor c{data, size, 0};
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (c.remaining() < 4) return Truncated(kPlainByteArray, "length", 4, c);
    const uint32_t len = LoadLE32(data + c.pos);
    c.pos += 4;
    if (len > c.remaining()) {
      return absl::DataLossError(absl::StrCat(kPlainByteArray, ": value ", i, " of ", len,
                                              " bytes at byte ", c.pos - 4, " runs past the end (",
                                              c.remaining(), " bytes remain)"));
    }
    c.pos += len;
    total += len;
  }
  size_t at = out->data.size();
  out->data.resize(at + total);
  out->offsets.reserve(out->offsets.size() + static_cast<size_t>(n));
  char* dst = out->data.data();
  size_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t len = LoadLE32(data + pos);
    std::memcpy(dst + at, data + pos + 4, len);
    pos += 4 + len;
    at += len;
    out->offsets.push_back(static_cast<int64_t>(at));
  }
  return c.pos;
}

Result<size_t> DecodeDeltaBinaryPacked(const uint8_t* data, size_t size, int64_t max_values,
                                       std::vector<int64_t>* out) {
  Cursor c{data, size, 0};
  FW_RETURN_IF_ERROR(DecodeDelta(c, max_values, out));
  return c.pos;
}

Result<size_t> DecodeDeltaLengthByteArray(const uint8_t* data, size_t size, int64_t max_values,
                                          ByteArrays* out) {
  Cursor c{data, size, 0};
  std::vector<int64_t> lengths;
  FW_RETURN_IF_ERROR_CTX(DecodeDelta(c, max_values, &lengths), kDeltaLengthByteArray, " lengths");
  FW_ASSIGN_OR_RETURN(const uint64_t total, CheckLengths(lengths, c, kDeltaLengthByteArray));
  AppendConcatenated(lengths, total, c, out);
  return c.pos;
}

Result<size_t> DecodeDeltaByteArray(const uint8_t* data, size_t size, int64_t max_values,
                                    ByteArrays* out) {
  Cursor c{data, size, 0};
  std::vector<int64_t> prefixes;
  FW_RETURN_IF_ERROR_CTX(DecodeDelta(c, max_values, &prefixes), kDeltaByteArray, " prefix lengths");
  const size_t suffixes_at = c.pos;
  std::vector<int64_t> suffixes;
  FW_RETURN_IF_ERROR_CTX(DecodeDelta(c, max_values, &suffixes), kDeltaByteArray, " suffix lengths");
  if (prefixes.size() != suffixes.size()) {
    return absl::DataLossError(absl::StrCat(kDeltaByteArray, ": ", prefixes.size(),
                                            " prefix lengths but ", suffixes.size(),
                                            " suffix lengths at byte ", suffixes_at));
  }
  FW_ASSIGN_OR_RETURN(const uint64_t suffix_bytes, CheckLengths(suffixes, c, kDeltaByteArray));
  // Size the output before writing it: each prefix must come from the value
  // before, and the sum is capped because prefixes repeat bytes for free.
  uint64_t total = 0;
  int64_t previous = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (prefixes[i] < 0 || prefixes[i] > previous) {
      return absl::DataLossError(absl::StrCat(kDeltaByteArray, ": value ", i, " has prefix length ",
                                              prefixes[i], " but the previous value has ", previous,
                                              " bytes (prefix lengths at byte 0)"));
    }
    previous = prefixes[i] + suffixes[i];
    total += static_cast<uint64_t>(previous);
    if (total > static_cast<uint64_t>(kMaxDeltaByteArrayBytes)) {
      return absl::DataLossError(absl::StrCat(kDeltaByteArray, ": values decode to more than ",
                                              kMaxDeltaByteArrayBytes, " bytes"));
    }
  }
  size_t at = out->data.size();
  out->data.resize(at + total);
  out->offsets.reserve(out->offsets.size() + prefixes.size());
  char* dst = out->data.data();
  const uint8_t* suffix = data + c.pos;
  size_t previous_at = at;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const size_t p = static_cast<size_t>(prefixes[i]);
    const size_t s = static_cast<size_t>(suffixes[i]);
    std::memcpy(dst + at, dst + previous_at, p);  // earlier bytes: no overlap
    std::memcpy(dst + at + p, suffix, s);
    suffix += s;
    previous_at = at;
    at += p + s;
    out->offsets.push_back(static_cast<int64_t>(at));
  }
  c.pos += suffix_bytes;
  return c.pos;
}

Status DecodeByteStreamSplit(const uint8_t* data, size_t size, size_t width, int64_t n,
                             uint8_t* out) {
  if (width == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kByteStreamSplit, ": value width 0"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kByteStreamSplit, ": negative count ", n));
  }
  const size_t count = static_cast<size_t>(n);
  if (count > size / width) {
    return absl::DataLossError(absl::StrCat(kByteStreamSplit, ": ", n, " values of ", width,
                                            " bytes need more than the ", size, " bytes given"));
  }
  switch (width) {
    case 2:
      UnsplitFixed<2>(data, count, out);
      break;
    case 4:
      UnsplitFixed<4>(data, count, out);
      break;
    case 8:
      UnsplitFixed<8>(data, count, out);
      break;
    default:
      for (size_t k = 0; k < width; ++k) {
        const uint8_t* stream = data + k * count;
        for (size_t i = 0; i < count; ++i) out[i * width + k] = stream[i];
      }
  }
  return absl::OkStatus();
}

// --- Encoders ---------------------------------------------------------------

void EncodeRleBitPacked(const uint32_t* values, int64_t n, int bit_width, std::string* out) {
  const uint32_t mask = bit_width >= 32 ? ~0u : (1u << bit_width) - 1;
  const size_t value_bytes = static_cast<size_t>(bit_width + 7) / 8;
  // Values [literal_start, i) wait to be bit-packed. Literal stretches grow
  // by whole groups of 8, so only the last one in the stream needs padding.
  int64_t literal_start = 0;
  auto flush_literals = [&](int64_t end) {
    while (literal_start < end) {
      const int64_t count = std::min(end - literal_start, kMaxBitPackedGroups * 8);
      const int64_t groups = (count + 7) / 8;
      PutUleb(static_cast<uint64_t>(groups) << 1 | 1, out);
      BitWriter writer(out);
      for (int64_t j = 0; j < count; ++j) writer.Put(values[literal_start + j] & mask, bit_width);
      for (int64_t j = count; j < groups * 8; ++j) writer.Put(0, bit_width);
      writer.Finish();
      literal_start += count;
    }
  };
  int64_t i = 0;
  while (i < n) {
    const uint32_t v = values[i] & mask;
    int64_t run = 1;
    while (i + run < n && (values[i + run] & mask) == v) ++run;
    if (run >= 8) {
      flush_literals(i);
      for (int64_t left = run; left > 0;) {
        const int64_t len = std::min(left, kMaxRleRun);
        PutUleb(static_cast<uint64_t>(len) << 1, out);
        for (size_t b = 0; b < value_bytes; ++b) out->push_back(static_cast<char>(v >> (8 * b)));
        left -= len;
      }
      i += run;
      literal_start = i;
    } else {
      i = std::min(i + 8, n);
    }
  }
  flush_literals(n);
}

void EncodePlainBoolean(const uint8_t* values, int64_t n, std::string* out) {
  for (int64_t i = 0; i < n; i += 8) {
    uint8_t byte = 0;
    for (int64_t k = 0; k < 8 && i + k < n; ++k) byte |= (values[i + k] != 0) << k;
    out->push_back(static_cast<char>(byte));
  }
}

void EncodePlainByteArray(const ByteArrays& values, std::string* out) {
  for (int64_t i = 0; i < values.size(); ++i) {
    const std::string_view v = Value(values, i);
    PutLE32(static_cast<uint32_t>(v.size()), out);
    out->append(v.data(), v.size());
  }
}

void EncodeDeltaBinaryPacked(const int64_t* values, int64_t n, std::string* out) {
  constexpr int64_t kBlock = 128;
  constexpr int kMiniblocks = 4;
  constexpr int64_t kPerMiniblock = kBlock / kMiniblocks;
  PutUleb(kBlock, out);
  PutUleb(kMiniblocks, out);
  PutUleb(static_cast<uint64_t>(n), out);
  PutUleb(ZigZagEncode(n > 0 ? values[0] : 0), out);
  uint64_t deltas[kBlock];
  for (int64_t start = 1; start < n; start += kBlock) {
    const int64_t count = std::min(kBlock, n - start);
    // Unsigned differences wrap exactly as the decoder's sums will.
    int64_t min_delta = std::numeric_limits<int64_t>::max();
    for (int64_t j = 0; j < count; ++j) {
      deltas[j] =
          static_cast<uint64_t>(values[start + j]) - static_cast<uint64_t>(values[start + j - 1]);
      min_delta = std::min(min_delta, static_cast<int64_t>(deltas[j]));
    }
    for (int64_t j = 0; j < count; ++j) deltas[j] -= static_cast<uint64_t>(min_delta);
    std::fill(deltas + count, deltas + kBlock, 0);
    PutUleb(ZigZagEncode(min_delta), out);
    const int used = static_cast<int>((count + kPerMiniblock - 1) / kPerMiniblock);
    int widths[kMiniblocks] = {};
    for (int m = 0; m < used; ++m) {
      uint64_t max = 0;
      for (int64_t j = m * kPerMiniblock; j < (m + 1) * kPerMiniblock; ++j) {
        max = std::max(max, deltas[j]);
      }
      widths[m] = BitWidth(max);
    }
    for (const int w : widths) out->push_back(static_cast<char>(w));
    for (int m = 0; m < used; ++m) {
      BitWriter writer(out);
      for (int64_t j = m * kPerMiniblock; j < (m + 1) * kPerMiniblock; ++j) {
        writer.Put(deltas[j], widths[m]);
      }
      writer.Finish();
    }
  }
}

void EncodeDeltaLengthByteArray(const ByteArrays& values, std::string* out) {
  const std::vector<int64_t> lengths = Lengths(values);
  EncodeDeltaBinaryPacked(lengths.data(), static_cast<int64_t>(lengths.size()), out);
  const size_t begin = static_cast<size_t>(values.offsets.front());
  const size_t end = static_cast<size_t>(values.offsets.back());
  out->append(values.data, begin, end - begin);
}

void EncodeDeltaByteArray(const ByteArrays& values, std::string* out) {
  const int64_t n = values.size();
  std::vector<int64_t> prefixes(static_cast<size_t>(n));
  ByteArrays suffixes;
  std::string_view previous;
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view v = Value(values, i);
    const size_t limit = std::min(v.size(), previous.size());
    size_t p = 0;
    while (p < limit && v[p] == previous[p]) ++p;
    prefixes[static_cast<size_t>(i)] = static_cast<int64_t>(p);
    suffixes.Append(v.data() + p, v.size() - p);
    previous = v;
  }
  EncodeDeltaBinaryPacked(prefixes.data(), n, out);
  EncodeDeltaLengthByteArray(suffixes, out);
}

void EncodeByteStreamSplit(const uint8_t* values, size_t width, int64_t n, std::string* out) {
  const size_t count = static_cast<size_t>(n);
  const size_t at = out->size();
  out->resize(at + width * count);
  char* dst = out->data() + at;
  for (size_t k = 0; k < width; ++k) {
    for (size_t i = 0; i < count; ++i)
      dst[k * count + i] = static_cast<char>(values[i * width + k]);
  }
}

}  // namespace flywheel::interop::parquet

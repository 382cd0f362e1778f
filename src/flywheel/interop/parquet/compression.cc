#include "flywheel/interop/parquet/compression.h"

#include <brotli/decode.h>
#include <brotli/encode.h>
#include <lz4.h>
#include <snappy.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_decompressBound (exported by libzstd 1.4.10+)
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace flywheel::interop::parquet {
namespace {

Status SizeMismatch(CompressionCodec codec, size_t got, size_t want) {
  return absl::DataLossError(absl::StrCat(AsAbsl(CodecName(codec)), " data decodes to ", got,
                                          " bytes, the page header says ", want));
}

Status Corrupt(CompressionCodec codec, std::string_view why) {
  return absl::DataLossError(absl::StrCat("corrupt ", AsAbsl(CodecName(codec)), " data: ", AsAbsl(why)));
}

uint32_t LoadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// GZIP pages are gzip members (zlib streams are accepted too: inflate's
// automatic header detection). Several concatenated members decode as one.
Status Inflate(const uint8_t* src, size_t n, uint8_t* dst, size_t dst_size) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) return absl::InternalError("zlib: inflateInit2 failed");
  uint8_t none = 0;  // zlib refuses a null output pointer, even for 0 bytes
  z.next_in = const_cast<Bytef*>(src);
  z.next_out = dst_size > 0 ? dst : &none;
  // zlib counts in uInt; pages are far below 4 GiB (the header sizes are i32).
  z.avail_in = static_cast<uInt>(n);
  z.avail_out = static_cast<uInt>(dst_size);
  Status s;
  while (true) {
    const int rc = inflate(&z, Z_FINISH);
    if (rc == Z_STREAM_END) {
      // Another member may follow (skip zero padding some writers leave).
      while (z.avail_in > 0 && *z.next_in == 0) {
        ++z.next_in;
        --z.avail_in;
      }
      if (z.avail_in == 0) break;
      if (inflateReset(&z) != Z_OK) {
        s = Corrupt(CompressionCodec::kGzip, "cannot reset between members");
        break;
      }
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_out == 0) {
      s = absl::DataLossError(absl::StrCat("GZIP data decodes to more than the ", dst_size,
                                           " bytes the page header says"));
      break;
    }
    s = Corrupt(CompressionCodec::kGzip,
                z.msg ? z.msg : (rc == Z_BUF_ERROR ? "truncated" : "inflate failed"));
    break;
  }
  const size_t produced = dst_size - z.avail_out;
  inflateEnd(&z);
  FW_RETURN_IF_ERROR(s);
  if (produced != dst_size) return SizeMismatch(CompressionCodec::kGzip, produced, dst_size);
  return absl::OkStatus();
}

// The deprecated LZ4 codec as Hadoop frames it: blocks of [uncompressed
// size: u32 BE][compressed size: u32 BE][raw LZ4 block]. Returns false
// (without an error) when the input is not in that framing.
bool TryHadoopLz4(const uint8_t* src, size_t n, uint8_t* dst, size_t dst_size) {
  size_t in = 0, out = 0;
  while (in < n) {
    if (n - in < 8) return false;
    const uint32_t raw = LoadBigEndian32(src + in);
    const uint32_t stored = LoadBigEndian32(src + in + 4);
    in += 8;
    if (stored > n - in || raw > dst_size - out) return false;
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(src + in),
                                        reinterpret_cast<char*>(dst + out), static_cast<int>(stored),
                                        static_cast<int>(raw));
    if (got < 0 || static_cast<uint32_t>(got) != raw) return false;
    in += stored;
    out += raw;
  }
  return out == dst_size;
}

Status Lz4Raw(CompressionCodec codec, const uint8_t* src, size_t n, uint8_t* dst, size_t dst_size) {
  if (n > static_cast<size_t>(LZ4_MAX_INPUT_SIZE) || dst_size > static_cast<size_t>(INT32_MAX)) {
    return Corrupt(codec, "block larger than LZ4 allows");
  }
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst),
                                      static_cast<int>(n), static_cast<int>(dst_size));
  if (got < 0) return Corrupt(codec, "malformed LZ4 block (or larger than the page header says)");
  if (static_cast<size_t>(got) != dst_size) return SizeMismatch(codec, static_cast<size_t>(got), dst_size);
  return absl::OkStatus();
}

// Incremental BROTLI decode into `out`, growing it as bytes come, never past
// `claimed`.
Status BrotliBounded(const uint8_t* src, size_t n, size_t claimed, std::vector<uint8_t>* out) {
  BrotliDecoderState* st = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  if (st == nullptr) return absl::ResourceExhaustedError("brotli: cannot create a decoder");
  size_t avail_in = n;
  const uint8_t* next_in = src;
  size_t produced = 0;
  out->resize(std::min<size_t>(claimed, std::max<size_t>(n * 4, 4096)));
  Status s;
  while (true) {
    size_t avail_out = out->size() - produced;
    uint8_t* next_out = out->data() + produced;
    const BrotliDecoderResult r =
        BrotliDecoderDecompressStream(st, &avail_in, &next_in, &avail_out, &next_out, nullptr);
    produced = static_cast<size_t>(next_out - out->data());
    if (r == BROTLI_DECODER_RESULT_SUCCESS) break;
    if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
      if (out->size() >= claimed) {
        s = absl::DataLossError(absl::StrCat("BROTLI data decodes to more than the ", claimed,
                                             " bytes the page header says"));
        break;
      }
      out->resize(std::min(claimed, std::max<size_t>(out->size() * 2, 4096)));
      continue;
    }
    s = Corrupt(CompressionCodec::kBrotli, r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT ? "truncated" : "malformed stream");
    break;
  }
  BrotliDecoderDestroyInstance(st);
  FW_RETURN_IF_ERROR(s);
  if (produced != claimed) return SizeMismatch(CompressionCodec::kBrotli, produced, claimed);
  out->resize(produced);
  return absl::OkStatus();
}

}  // namespace

Status DecompressPage(CompressionCodec codec, const uint8_t* src, size_t n, int64_t claimed,
                      std::vector<uint8_t>* out) {
  if (claimed < 0) return absl::DataLossError(absl::StrCat("the page header claims ", claimed, " decoded bytes"));
  const uint64_t want = static_cast<uint64_t>(claimed);
  uint64_t most = 0;  // what n stored bytes can decode to
  switch (codec) {
    case CompressionCodec::kUncompressed:
      most = n;
      if (want != n) return SizeMismatch(codec, n, want);
      break;
    case CompressionCodec::kSnappy: {
      size_t len = 0;
      if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(src), n, &len)) {
        return Corrupt(codec, "bad length preamble");
      }
      if (len != want) return SizeMismatch(codec, len, want);
      most = len;
      break;
    }
    case CompressionCodec::kGzip:
      most = uint64_t{n} * 1032 + 1024;
      break;
    case CompressionCodec::kZstd: {
      const unsigned long long bound = ZSTD_decompressBound(src, n);
      if (bound == ZSTD_CONTENTSIZE_ERROR) return Corrupt(codec, "not a zstd frame");
      most = bound;
      break;
    }
    case CompressionCodec::kLz4:
    case CompressionCodec::kLz4Raw:
      most = uint64_t{n} * 255 + 64;
      break;
    case CompressionCodec::kBrotli:
      return BrotliBounded(src, n, static_cast<size_t>(want), out);
    case CompressionCodec::kLzo:
      return absl::UnimplementedError("LZO-compressed Parquet pages are not supported");
  }
  if (want > most) {
    return absl::DataLossError(absl::StrCat("the page header claims ", want, " decoded bytes; ", n, " bytes of ",
                                            AsAbsl(CodecName(codec)), " data decode to at most ", most));
  }
  out->resize(static_cast<size_t>(want));
  return Decompress(codec, src, n, out->data(), out->size());
}

std::string_view CodecName(CompressionCodec codec) {
  switch (codec) {
    case CompressionCodec::kUncompressed: return "UNCOMPRESSED";
    case CompressionCodec::kSnappy: return "SNAPPY";
    case CompressionCodec::kGzip: return "GZIP";
    case CompressionCodec::kLzo: return "LZO";
    case CompressionCodec::kBrotli: return "BROTLI";
    case CompressionCodec::kLz4: return "LZ4";
    case CompressionCodec::kZstd: return "ZSTD";
    case CompressionCodec::kLz4Raw: return "LZ4_RAW";
  }
  return "unknown codec";
}

Result<CompressionCodec> ParseWritableCodec(std::string_view name) {
  if (name == "none" || name == "uncompressed") return CompressionCodec::kUncompressed;
  if (name == "snappy") return CompressionCodec::kSnappy;
  if (name == "gzip") return CompressionCodec::kGzip;
  if (name == "brotli") return CompressionCodec::kBrotli;
  if (name == "zstd") return CompressionCodec::kZstd;
  if (name == "lz4_raw") return CompressionCodec::kLz4Raw;
  return absl::InvalidArgumentError(absl::StrCat("codec '", AsAbsl(name),
                                                 "': expected none, snappy, gzip, brotli, zstd or lz4_raw"));
}

Status Decompress(CompressionCodec codec, const uint8_t* src, size_t n, uint8_t* dst, size_t dst_size) {
  switch (codec) {
    case CompressionCodec::kUncompressed:
      if (n != dst_size) return SizeMismatch(codec, n, dst_size);
      if (n > 0) std::memcpy(dst, src, n);
      return absl::OkStatus();
    case CompressionCodec::kSnappy: {
      size_t len = 0;
      if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(src), n, &len)) {
        return Corrupt(codec, "bad length preamble");
      }
      if (len != dst_size) return SizeMismatch(codec, len, dst_size);
      if (!snappy::RawUncompress(reinterpret_cast<const char*>(src), n, reinterpret_cast<char*>(dst))) {
        return Corrupt(codec, "malformed stream");
      }
      return absl::OkStatus();
    }
    case CompressionCodec::kGzip:
      return Inflate(src, n, dst, dst_size);
    case CompressionCodec::kBrotli: {
      size_t len = dst_size;
      const BrotliDecoderResult r = BrotliDecoderDecompress(n, src, &len, dst);
      if (r != BROTLI_DECODER_RESULT_SUCCESS) {
        return Corrupt(codec, "malformed stream (or larger than the page header says)");
      }
      if (len != dst_size) return SizeMismatch(codec, len, dst_size);
      return absl::OkStatus();
    }
    case CompressionCodec::kZstd: {
      const size_t r = ZSTD_decompress(dst, dst_size, src, n);
      if (ZSTD_isError(r)) return Corrupt(codec, ZSTD_getErrorName(r));
      if (r != dst_size) return SizeMismatch(codec, r, dst_size);
      return absl::OkStatus();
    }
    case CompressionCodec::kLz4Raw:
      return Lz4Raw(codec, src, n, dst, dst_size);
    case CompressionCodec::kLz4:
      // Hadoop framing first (parquet-mr); files that wrote a bare block
      // under this name decode as LZ4_RAW.
      if (TryHadoopLz4(src, n, dst, dst_size)) return absl::OkStatus();
      return Lz4Raw(codec, src, n, dst, dst_size);
    case CompressionCodec::kLzo:
      return absl::UnimplementedError("LZO-compressed Parquet pages are not supported");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown Parquet compression codec ", static_cast<int>(codec)));
}

Status Compress(CompressionCodec codec, const uint8_t* src, size_t n, std::string* out, int level) {
  const size_t base = out->size();
  switch (codec) {
    case CompressionCodec::kUncompressed:
      out->append(reinterpret_cast<const char*>(src), n);
      return absl::OkStatus();
    case CompressionCodec::kSnappy: {
      out->resize(base + snappy::MaxCompressedLength(n));
      size_t len = 0;
      snappy::RawCompress(reinterpret_cast<const char*>(src), n, out->data() + base, &len);
      out->resize(base + len);
      return absl::OkStatus();
    }
    case CompressionCodec::kGzip: {
      z_stream z{};
      if (deflateInit2(&z, level < 0 ? Z_DEFAULT_COMPRESSION : level, Z_DEFLATED, 15 + 16, 8,
                       Z_DEFAULT_STRATEGY) != Z_OK) {
        return absl::InvalidArgumentError(absl::StrCat("GZIP: bad level ", level));
      }
      const uLong bound = deflateBound(&z, static_cast<uLong>(n)) + 32;
      out->resize(base + bound);
      z.next_in = const_cast<Bytef*>(src);
      z.avail_in = static_cast<uInt>(n);
      z.next_out = reinterpret_cast<Bytef*>(out->data() + base);
      z.avail_out = static_cast<uInt>(bound);
      const int rc = deflate(&z, Z_FINISH);
      const size_t len = bound - z.avail_out;
      deflateEnd(&z);
      if (rc != Z_STREAM_END) return absl::InternalError("GZIP: deflate did not finish");
      out->resize(base + len);
      return absl::OkStatus();
    }
    case CompressionCodec::kBrotli: {
      size_t len = BrotliEncoderMaxCompressedSize(n);
      if (len == 0) len = n + 1024;
      out->resize(base + len);
      if (!BrotliEncoderCompress(level < 0 ? 5 : level, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC, n, src,
                                 &len, reinterpret_cast<uint8_t*>(out->data() + base))) {
        return absl::InternalError("BROTLI: compression failed");
      }
      out->resize(base + len);
      return absl::OkStatus();
    }
    case CompressionCodec::kZstd: {
      const size_t bound = ZSTD_compressBound(n);
      out->resize(base + bound);
      const size_t r = ZSTD_compress(out->data() + base, bound, src, n, level < 0 ? ZSTD_CLEVEL_DEFAULT : level);
      if (ZSTD_isError(r)) return absl::InternalError(absl::StrCat("ZSTD: ", ZSTD_getErrorName(r)));
      out->resize(base + r);
      return absl::OkStatus();
    }
    case CompressionCodec::kLz4Raw: {
      if (n > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
        return absl::InvalidArgumentError("LZ4_RAW: page larger than LZ4 allows");
      }
      const int bound = LZ4_compressBound(static_cast<int>(n));
      out->resize(base + static_cast<size_t>(bound));
      const int len = LZ4_compress_default(reinterpret_cast<const char*>(src), out->data() + base,
                                           static_cast<int>(n), bound);
      if (len <= 0 && n > 0) return absl::InternalError("LZ4_RAW: compression failed");
      out->resize(base + static_cast<size_t>(len));
      return absl::OkStatus();
    }
    case CompressionCodec::kLz4:
    case CompressionCodec::kLzo:
      return absl::UnimplementedError(
          absl::StrCat("writing ", AsAbsl(CodecName(codec)), " is not supported (use LZ4_RAW, ZSTD or SNAPPY)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown Parquet compression codec ", static_cast<int>(codec)));
}

}  // namespace flywheel::interop::parquet

#include "flywheel/format/codec.h"

#include <lz4.h>
#include <zstd.h>

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace flywheel::format {

std::string_view CodecName(Codec c) {
  switch (c) {
    case Codec::kNone: return "none";
    case Codec::kLz4: return "lz4";
    case Codec::kZstd: return "zstd";
  }
  return "unknown";
}

Result<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "lz4") return Codec::kLz4;
  if (name == "zstd") return Codec::kZstd;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec '", AsAbsl(name), "' (expected none, lz4 or zstd)"));
}

Status Compress(Codec codec, int level, const void* src, size_t n, std::string* out) {
  const size_t start = out->size();
  switch (codec) {
    case Codec::kLz4: {
      if (n > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
        return absl::InvalidArgumentError("page too large for lz4");
      }
      const int bound = LZ4_compressBound(static_cast<int>(n));
      out->resize(start + static_cast<size_t>(bound));
      const int w = LZ4_compress_default(static_cast<const char*>(src), out->data() + start,
                                         static_cast<int>(n), bound);
      if (w <= 0) return absl::InternalError("lz4 compression failed");
      out->resize(start + static_cast<size_t>(w));
      return absl::OkStatus();
    }
    case Codec::kZstd: {
      const size_t bound = ZSTD_compressBound(n);
      out->resize(start + bound);
      const size_t w = ZSTD_compress(out->data() + start, bound, src, n, level);
      if (ZSTD_isError(w)) {
        return absl::InternalError(absl::StrCat("zstd compression failed: ", ZSTD_getErrorName(w)));
      }
      out->resize(start + w);
      return absl::OkStatus();
    }
    case Codec::kNone: break;
  }
  return absl::InvalidArgumentError("Compress called with codec none");
}

uint64_t MaxDecompressedSize(Codec codec, uint64_t stored_size) {
  // Saturate rather than overflow for absurd stored sizes.
  auto scaled = [&](uint64_t ratio, uint64_t slack) {
    if (stored_size > (UINT64_MAX - slack) / ratio) return UINT64_MAX;
    return stored_size * ratio + slack;
  };
  switch (codec) {
    case Codec::kNone: return stored_size;
    case Codec::kLz4: return scaled(256, 1024);
    case Codec::kZstd: return scaled(uint64_t{1} << 15, 1024);
  }
  return 0;
}

Status Decompress(Codec codec, const void* src, size_t n, void* dst, size_t dst_size) {
  switch (codec) {
    case Codec::kNone:
      return absl::InvalidArgumentError("Decompress called with codec none");
    case Codec::kLz4: {
      if (n > INT_MAX || dst_size > INT_MAX) return absl::DataLossError("lz4 page too large");
      const int r = LZ4_decompress_safe(static_cast<const char*>(src), static_cast<char*>(dst),
                                        static_cast<int>(n), static_cast<int>(dst_size));
      if (r < 0 || static_cast<size_t>(r) != dst_size) {
        return absl::DataLossError(absl::StrCat("lz4 data is corrupt (got ", r, " bytes, expected ",
                                                dst_size, ")"));
      }
      return absl::OkStatus();
    }
    case Codec::kZstd: {
      const size_t r = ZSTD_decompress(dst, dst_size, src, n);
      if (ZSTD_isError(r)) {
        return absl::DataLossError(absl::StrCat("zstd data is corrupt: ", ZSTD_getErrorName(r)));
      }
      if (r != dst_size) {
        return absl::DataLossError(
            absl::StrCat("zstd data decoded to ", r, " bytes, expected ", dst_size));
      }
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(absl::StrCat("unknown codec ", static_cast<int>(codec)));
}

}  // namespace flywheel::format

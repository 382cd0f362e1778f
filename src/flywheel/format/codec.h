// Page compression codecs of the shard format.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"

namespace flywheel::format {

enum class Codec : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };

std::string_view CodecName(Codec c);
Result<Codec> ParseCodec(std::string_view name);  // "none", "lz4", "zstd"

// Appends the compressed form of `src` to `out`. REQUIRES: codec != kNone.
Status Compress(Codec codec, int level, const void* src, size_t n, std::string* out);
// An upper bound on the bytes that `stored_size` bytes of `codec` data can
// decode to (lz4: 255:1 plus slack; zstd: 32768:1, one 4-byte RLE block per
// 128 KiB). Readers reject page sizes above it before allocating.
uint64_t MaxDecompressedSize(Codec codec, uint64_t stored_size);
// Decompresses exactly `dst_size` bytes into `dst`; DataLoss if the input is
// corrupt or does not produce exactly that many bytes.
Status Decompress(Codec codec, const void* src, size_t n, void* dst, size_t dst_size);

}  // namespace flywheel::format

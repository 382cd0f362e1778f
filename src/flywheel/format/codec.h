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
// Decompresses exactly `dst_size` bytes into `dst`; DataLoss if the input is
// corrupt or does not produce exactly that many bytes.
Status Decompress(Codec codec, const void* src, size_t n, void* dst, size_t dst_size);

}  // namespace flywheel::format

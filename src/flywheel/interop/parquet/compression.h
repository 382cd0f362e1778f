// Parquet page compression codecs: UNCOMPRESSED, SNAPPY, GZIP, BROTLI, ZSTD,
// LZ4_RAW and the deprecated Hadoop-framed LZ4 (with the raw-block fallback
// other readers apply to files that wrote raw LZ4 under that name). LZO is
// refused with an Unimplemented error. docs/format/parquet.md, "Codecs".
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/interop/parquet/metadata.h"

namespace flywheel::interop::parquet {

std::string_view CodecName(CompressionCodec codec);
// A codec the writer can use, by its lower-case name: none (or
// uncompressed), snappy, gzip, brotli, zstd, lz4_raw. InvalidArgument
// listing them otherwise.
Result<CompressionCodec> ParseWritableCodec(std::string_view name);

// Decompresses `n` bytes into exactly `dst_size` bytes (the page header's
// uncompressed size); DataLoss when the input is corrupt or decodes to a
// different size.
Status Decompress(CompressionCodec codec, const uint8_t* src, size_t n, uint8_t* dst,
                  size_t dst_size);

// Decompresses a page whose header claims `claimed` decoded bytes into
// `out` (resized to exactly that), refusing a claim the stored bytes cannot
// justify before allocating anything for it: UNCOMPRESSED must be equal,
// SNAPPY's length preamble must agree, ZSTD must be within
// ZSTD_decompressBound, GZIP within deflate's 1032:1 and LZ4 within 255:1.
// BROTLI, whose ratio has no useful bound, is decoded incrementally, so
// memory follows the bytes it really produces. DataLoss naming the claim.
Status DecompressPage(CompressionCodec codec, const uint8_t* src, size_t n, int64_t claimed,
                      std::vector<uint8_t>* out);

// Appends the compressed form of [src, src + n) to `out` (LZ4: LZ4_RAW only;
// the writer never emits the deprecated framing). level < 0: the codec's
// default.
Status Compress(CompressionCodec codec, const uint8_t* src, size_t n, std::string* out,
                int level = -1);

}  // namespace flywheel::interop::parquet

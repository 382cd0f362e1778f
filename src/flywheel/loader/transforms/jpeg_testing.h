// JPEG encoding helpers for tests, benchmarks and fuzz seed corpora: encode
// known pixels with libjpeg-turbo, and a synthetic corpus of photo-sized
// images whose pixels bench/jpeg_pil_baseline.py can reproduce exactly.
//
// Not for production paths (they allocate freely). Thread-safety: pure
// functions; each call uses its own TurboJPEG handle.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::loader::testing_util {

enum class JpegColor {
  kRgb,   // 3 bytes per pixel, stored as YCbCr
  kGray,  // 1 byte per pixel
  kCmyk,  // 4 bytes per pixel, inverted (Adobe) convention: 255 = no ink;
          // stored as YCCK
};

struct EncodeOptions {
  int quality = 90;       // 1..100
  bool subsample = true;  // 4:2:0 chroma (false: 4:4:4); ignored for gray
  bool progressive = false;
};

// Encodes `pixels` (height rows of width * channels bytes) as a JPEG.
Result<std::vector<uint8_t>> EncodeJpeg(std::span<const uint8_t> pixels, int width, int height,
                                        JpegColor color, const EncodeOptions& options = {});

// Size of synthetic image i: width, height in [224, 288] ("256x256-ish").
void SyntheticSize(uint64_t i, int* width, int* height);
// RGB pixels of synthetic image i: diagonal gradients, a solid rectangle and
// hash noise, so it compresses like a photo (~30-40 KB at quality 90):
//   r = (x * (1 + i % 3) + y * (2 + i % 5) + 85 * c + 37 * i) mod 256, then
//   inside the rectangle [w/4, w/2) x [h/3, 2h/3): r = (60 * c + 50 * i) mod 256,
//   then + (Mix64(i * 2^32 + (y * w + x) * 3 + c) mod 24), clamped to 255.
// bench/jpeg_pil_baseline.py implements the same formula.
std::vector<uint8_t> SyntheticImage(uint64_t i, int width, int height);
// Images [first, first + n) of the synthetic corpus, as JPEG bytes
// (quality 90, 4:2:0 unless `options` says otherwise).
std::vector<std::vector<uint8_t>> SyntheticJpegCorpus(int n, uint64_t first = 0,
                                                      const EncodeOptions& options = {});

}  // namespace flywheel::loader::testing_util

#include "flywheel/loader/transforms/jpeg_testing.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"

namespace flywheel::loader::testing_util {

Result<std::vector<uint8_t>> EncodeJpeg(std::span<const uint8_t> pixels, int width, int height,
                                        JpegColor color, const EncodeOptions& options) {
  const int channels = color == JpegColor::kRgb ? 3 : color == JpegColor::kGray ? 1 : 4;
  if (width < 1 || height < 1 || pixels.size() < static_cast<size_t>(width) * height * channels) {
    return absl::InvalidArgumentError(
        "EncodeJpeg: pixel buffer smaller than width*height*channels");
  }
  tjhandle h = tjInitCompress();
  if (h == nullptr) return absl::InternalError("tjInitCompress failed");
  const int pf = color == JpegColor::kRgb    ? TJPF_RGB
                 : color == JpegColor::kGray ? TJPF_GRAY
                                             : TJPF_CMYK;
  const int samp = color == JpegColor::kGray ? TJSAMP_GRAY
                   : options.subsample       ? TJSAMP_420
                                             : TJSAMP_444;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int flags = TJFLAG_ACCURATEDCT | (options.progressive ? TJFLAG_PROGRESSIVE : 0);
  const int rc = tjCompress2(h, pixels.data(), width, width * channels, height, pf, &out, &size,
                             samp, options.quality, flags);
  Status status;
  std::vector<uint8_t> bytes;
  if (rc != 0) {
    status = absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(h)));
  } else {
    bytes.assign(out, out + size);
  }
  tjFree(out);
  tjDestroy(h);
  if (!status.ok()) return status;
  return bytes;
}

void SyntheticSize(uint64_t i, int* width, int* height) {
  *width = 224 + static_cast<int>(Mix64(2 * i) % 65);
  *height = 224 + static_cast<int>(Mix64(2 * i + 1) % 65);
}

std::vector<uint8_t> SyntheticImage(uint64_t i, int width, int height) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool rect = x >= width / 4 && x < width / 2 && y >= height / 3 && y < 2 * height / 3;
      for (int c = 0; c < 3; ++c) {
        const uint64_t flat = static_cast<uint64_t>(y * width + x) * 3 + c;
        uint64_t v = rect ? (60 * c + 50 * i) % 256
                          : (x * (1 + i % 3) + y * (2 + i % 5) + 85 * c + 37 * i) % 256;
        v += Mix64((i << 32) + flat) % 24;
        px[flat] = static_cast<uint8_t>(std::min<uint64_t>(v, 255));
      }
    }
  }
  return px;
}

std::vector<std::vector<uint8_t>> SyntheticJpegCorpus(int n, uint64_t first,
                                                      const EncodeOptions& options) {
  std::vector<std::vector<uint8_t>> out;
  out.reserve(n);
  for (int k = 0; k < n; ++k) {
    const uint64_t i = first + k;
    int w = 0, h = 0;
    SyntheticSize(i, &w, &h);
    auto jpeg = EncodeJpeg(SyntheticImage(i, w, h), w, h, JpegColor::kRgb, options);
    if (!jpeg.ok()) std::abort();  // only on allocation failure
    out.push_back(std::move(jpeg).value());
  }
  return out;
}

}  // namespace flywheel::loader::testing_util

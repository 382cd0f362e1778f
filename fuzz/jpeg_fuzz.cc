// Fuzzes the loader's JPEG pipeline (flywheel/loader/transforms/image.h):
// header parsing, TurboJPEG decoding at every scale, the crop/resize/flip
// and the writers, on arbitrary bytes.
//
// Beyond "no crash": an error is DataLoss or InvalidArgument with a message;
// a success wrote a crop inside the declared image, a decode scale <= 1, and
// (float32) finite values within the normalized range; the same input and
// key give identical bytes again (no state leaks between images, e.g. from
// an earlier error).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "flywheel/loader/transforms/image.h"

namespace {

using flywheel::loader::CropMode;
using flywheel::loader::ImageLayout;
using flywheel::loader::ImageOptions;
using flywheel::loader::ImagePipeline;
using flywheel::loader::PixelType;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Pipelines {
  std::vector<std::unique_ptr<ImagePipeline>> p;
  Pipelines() {
    // Small outputs and a 4 Mpixel cap keep each run fast and small.
    auto make = [&](CropMode crop, int h, int w, ImageLayout layout, PixelType dtype) {
      ImageOptions o;
      o.crop = crop;
      o.height = h;
      o.width = w;
      o.layout = layout;
      o.dtype = dtype;
      o.max_pixels = int64_t{1} << 22;
      p.push_back(ImagePipeline::Create(o).value());
    };
    make(CropMode::kRandomResized, 16, 16, ImageLayout::kHWC, PixelType::kUint8);
    make(CropMode::kCenter, 7, 13, ImageLayout::kCHW, PixelType::kFloat32);
    make(CropMode::kFull, 40, 3, ImageLayout::kHWC, PixelType::kFloat32);
    // The fast paths: merged upsampling and the fast IDCT, with crop decoding.
    ImageOptions fast;
    fast.height = fast.width = 24;
    fast.fast_upsample = true;
    fast.fast_dct = true;
    fast.max_pixels = int64_t{1} << 22;
    p.push_back(ImagePipeline::Create(fast).value());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Pipelines pipelines;
  const std::span<const uint8_t> jpeg(data, size);
  uint64_t key = size;
  if (size >= 8) std::memcpy(&key, data + size - 8, 8);
  for (auto& p : pipelines.p) {
    std::vector<float> out(p->output_bytes() / 4 + 1);
    std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(out.data()), p->output_bytes());
    const auto status = p->Run(jpeg, key, dst);
    if (!status.ok()) {
      Check(status.code() == absl::StatusCode::kDataLoss ||
            status.code() == absl::StatusCode::kInvalidArgument);
      Check(!status.message().empty());
      continue;
    }
    const auto& t = p->last();
    Check(t.info.width >= 1 && t.info.height >= 1);
    Check(int64_t{t.info.width} * t.info.height <= p->options().max_pixels);
    Check(t.crop.x >= 0 && t.crop.y >= 0 && t.crop.width >= 1 && t.crop.height >= 1);
    Check(t.crop.x + t.crop.width <= t.info.width && t.crop.y + t.crop.height <= t.info.height);
    Check(t.scale_num >= 1 && t.scale_num <= t.scale_denom);
    if (p->options().dtype == PixelType::kFloat32) {
      const size_t n = p->output_bytes() / 4;
      for (size_t i = 0; i < n; ++i)
        Check(std::isfinite(out[i]) && out[i] >= -1e-3f && out[i] <= 1.001f);
    }
    std::vector<float> again(out.size());
    Check(p->Run(jpeg, key, {reinterpret_cast<uint8_t*>(again.data()), p->output_bytes()}).ok());
    Check(std::memcmp(out.data(), again.data(), p->output_bytes()) == 0);
  }
  return 0;
}

// The loader's JPEG pipeline: decode (libjpeg-turbo's libjpeg API), crop
// (random-resized-crop for training, a centred crop for evaluation), flip,
// resize, and write uint8 or normalized float32 pixels, HWC or CHW, straight
// into a caller-provided buffer (the loader's batch slot).
//
// Randomness is a pure function of the caller's 64-bit key (the loader
// passes one derived from (seed, epoch, sample index)), so the output for a
// sample never depends on which thread ran it or when. The exact semantics
// (crop sampling, resize filter, flip, normalization, limits and errors) are
// specified in docs/transforms.md; the sections are named below.
//
// Thread-safety: ImageOptions, SampleCrop and SampleFlip are pure. An
// ImagePipeline is not thread-safe: it owns a libjpeg decompressor and reusable
// scratch buffers, so the loader keeps one per decode thread. Distinct
// pipelines may run concurrently.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "flywheel/base/status.h"

namespace flywheel::loader {

class JpegIndexCache;

// Memory layout of one output image.
enum class ImageLayout {
  kHWC,  // [height][width][3]: what numpy/PIL use
  kCHW,  // [3][height][width]: what PyTorch models take
};

// Element type of the output.
enum class PixelType {
  kUint8,    // 0..255, rounded to nearest; mean/std are ignored
  kFloat32,  // (v / 255 - mean[c]) / std[c]  (torchvision ToTensor + Normalize)
};

// Which region of the source image becomes the output
// (docs/transforms.md#crop).
enum class CropMode {
  // Training: torchvision RandomResizedCrop — area fraction uniform in
  // [min_scale, max_scale], aspect ratio log-uniform in [min_ratio,
  // max_ratio], up to max_attempts tries, then a centred fallback crop.
  kRandomResized,
  // Evaluation: the largest centred box with the output's aspect ratio,
  // shrunk by center_fraction (0.875 with a square output = torchvision's
  // Resize(256) + CenterCrop(224) up to resampling). Deterministic.
  kCenter,
  // The whole image, stretched to the output size.
  kFull,
};

// ImageNet's per-channel mean/std in [0, 1] units (torchvision's values).
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

struct ImageOptions {
  // Output size in pixels. 1..16384 each.
  int height = 224;
  int width = 224;

  CropMode crop = CropMode::kRandomResized;
  // kRandomResized: area fraction range. 0 < min_scale <= max_scale <= 1.
  double min_scale = 0.08;
  double max_scale = 1.0;
  // kRandomResized: aspect ratio (width / height) range. 0 < min <= max.
  double min_ratio = 3.0 / 4.0;
  double max_ratio = 4.0 / 3.0;
  // kRandomResized: tries before the centred fallback. >= 1.
  int max_attempts = 10;
  // kCenter: side of the crop as a fraction of the largest centred box with
  // the output's aspect ratio. (0, 1].
  double center_fraction = 0.875;

  // Probability of a horizontal flip, drawn per key. [0, 1]; 0 = never
  // (use this for evaluation), 1 = always.
  double flip_probability = 0.5;

  ImageLayout layout = ImageLayout::kHWC;
  PixelType dtype = PixelType::kUint8;
  // kFloat32 only: per-channel (R, G, B) mean and std in [0, 1] units.
  // Default: no normalization beyond /255 (values in [0, 1]); use
  // kImageNetMean / kImageNetStd for the usual ImageNet models. std > 0.
  std::array<float, 3> mean = {0.0f, 0.0f, 0.0f};
  std::array<float, 3> std = {1.0f, 1.0f, 1.0f};

  // Images whose header declares more than this many pixels (width *
  // height) are refused before anything is allocated: a 20-byte header can
  // claim 65535 x 65535. Default 2^28 (e.g. 16384 x 16384). >= 1.
  int64_t max_pixels = int64_t{1} << 28;
  // Decode at the smallest libjpeg-turbo scale (1/8, 1/4, 3/8, 1/2, 1) that
  // still leaves the crop at least as large as the output, instead of full
  // size: the IDCT does most of the downscaling for a fraction of the cost.
  // false = always decode at full size.
  bool scaled_decode = true;
  // Use the fast integer IDCT (JDCT_IFAST): a little faster, slightly
  // less accurate. Default false (the accurate IDCT, as PIL uses).
  bool fast_dct = false;
  // Upsample chroma by repeating samples, merged with the colour conversion
  // (libjpeg's merged upsampler), instead of the smoothing ("fancy")
  // triangle filter: faster for 4:2:0 and 4:2:2 images; pixels differ a
  // little at colour edges, which the resize to the output smooths. Default
  // false (the fancy filter, as PIL uses).
  bool fast_upsample = false;
  // Decode only the part of the (scaled) image the resize reads: the crop's
  // rows and columns, widened to libjpeg's iMCU column boundaries
  // (jpeg_crop_scanline), skipping the rows above (jpeg_skip_scanlines:
  // entropy decoding only) and stopping after the crop's last row. The
  // output is the same as a full decode (docs/transforms.md#steps), except
  // that data below the crop is never read, so corruption there goes
  // unnoticed (the pixels produced all come from real data). false = decode
  // every row and column (for comparison and benchmarks).
  bool crop_decode = true;
  // libjpeg warnings (premature end of data, extraneous bytes before a
  // marker, ...) mean the pixels may be partly made up. false (default):
  // they are errors, and decoding stops at the first one. true: accepted,
  // as PIL does; a truncated image then decodes with its missing rows grey.
  bool allow_warnings = false;
  // Huffman-decode with flywheel's decoder (jpeg_index.h) instead of
  // libjpeg-turbo's, for the JPEGs it supports (baseline, 8-bit, one scan,
  // no restart markers; others always use libjpeg's): the same
  // coefficients, so the same pixels; random crops ~1.2x faster. false:
  // libjpeg's everywhere (indexed crops then go through a spliced JPEG).
  bool fast_huffman = true;
  // Entropy indexes (jpeg_index.h): from the second time an image is seen,
  // remember where each 16x16 block group starts in its coded data, so
  // later decodes of a crop Huffman-decode only the blocks under it, with
  // flywheel's faster Huffman decoder (random-resized crops ~1.35x faster;
  // docs/transforms.md, "Entropy index"). The output is the same bytes
  // either way. The indexes live in one process-wide cache of at
  // most this many MiB (the largest value any pipeline asks for; 14 bytes
  // per 16x16 pixels of 4:2:0 image, e.g. 3.6 KB for 256x256); images past
  // the budget decode as before. 0 = off. Needs crop_decode.
  int64_t index_cache_mb = 256;

  // OK, or InvalidArgument naming the first bad field.
  Status Validate() const;
  // Bytes of one output image: height * width * 3 * (1 or 4).
  size_t OutputBytes() const;
};

// A region of the source image, in source pixels. The result of SampleCrop
// always lies inside the image: 0 <= x, 0 < width, x + width <= image width
// (same for y/height).
struct CropBox {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

// The crop `options.crop` picks for an image of `image_height` x
// `image_width` and this key (docs/transforms.md#crop). Pure.
// REQUIRES: options.Validate().ok(), image dimensions >= 1.
CropBox SampleCrop(int image_height, int image_width, uint64_t key, const ImageOptions& options);
// Whether the image for this key is flipped. Pure, and independent of the
// crop's draws (changing flip_probability never changes the crop).
bool SampleFlip(uint64_t key, const ImageOptions& options);

// What a JPEG header declares.
struct JpegInfo {
  int width = 0;
  int height = 0;
  // "rgb", "ycbcr", "gray", "cmyk" or "ycck".
  std::string colorspace;
};

// What one Run did, for tests and statistics.
struct ImageTrace {
  JpegInfo info;
  CropBox crop;  // in source pixels
  bool flipped = false;
  int scale_num = 1;  // the decode ran at scale_num / scale_denom
  int scale_denom = 1;
  int decoded_width = 0;  // size of the (scaled) image
  int decoded_height = 0;
  // The part of the scaled image that was decoded (all of it unless
  // crop_decode), in scaled pixels.
  CropBox decoded_region;
  // Decoded through the image's entropy index: only the MCUs around the
  // crop were Huffman-decoded (index_cache_mb).
  bool indexed = false;
};

// Decodes and transforms JPEG images into caller-provided buffers.
class ImagePipeline {
 public:
  // InvalidArgument if the options are invalid; Internal if libjpeg
  // cannot allocate a decompressor.
  static Result<std::unique_ptr<ImagePipeline>> Create(const ImageOptions& options);
  // With its own index cache instead of the process-wide one (null: none).
  static Result<std::unique_ptr<ImagePipeline>> Create(const ImageOptions& options,
                                                       std::shared_ptr<JpegIndexCache> cache);
  virtual ~ImagePipeline() = default;

  virtual const ImageOptions& options() const = 0;
  // = options().OutputBytes().
  virtual size_t output_bytes() const = 0;

  // Decodes `jpeg`, applies the transforms for `key`, and writes one image
  // (options().layout / dtype) to dst. Grayscale and CMYK/YCCK images come
  // out as RGB. On error dst may hold partial output.
  // Errors: InvalidArgument for an empty input, a dst smaller than
  // output_bytes() or (kFloat32) not 4-byte aligned, or a header declaring
  // more than max_pixels pixels; DataLoss naming the problem for bytes that
  // are not a decodable JPEG (bad header, zero width or height, corrupt or truncated
  // data, and, unless allow_warnings, libjpeg warnings such as "premature end
  // of data").
  // Never crashes on any input (fuzz/jpeg_fuzz.cc).
  virtual Status Run(std::span<const uint8_t> jpeg, uint64_t key, std::span<uint8_t> dst) = 0;

  // What the last successful Run did.
  virtual const ImageTrace& last() const = 0;

  // Reads only the header. Errors as Run.
  virtual Result<JpegInfo> ReadHeader(std::span<const uint8_t> jpeg) = 0;
};

}  // namespace flywheel::loader

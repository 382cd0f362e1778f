#include "flywheel/loader/transforms/image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "flywheel/base/rng.h"
#include "flywheel/loader/transforms/jpeg_testing.h"

namespace flywheel::loader {
namespace {

using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::EncodeOptions;
using testing_util::JpegColor;

std::vector<uint8_t> Solid(int w, int h, int channels, std::vector<uint8_t> value) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (size_t i = 0; i < px.size(); ++i) px[i] = value[i % channels];
  return px;
}

// R = x, G = y, B = 128 (smooth, so JPEG keeps it close).
std::vector<uint8_t> Gradient(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = 128;
    }
  }
  return px;
}

std::vector<uint8_t> Jpeg(const std::vector<uint8_t>& px, int w, int h,
                          JpegColor color = JpegColor::kRgb,
                          EncodeOptions eo = {95, false, false}) {
  auto r = EncodeJpeg(px, w, h, color, eo);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<uint8_t>{};
}

std::unique_ptr<ImagePipeline> Pipeline(const ImageOptions& o) {
  auto p = ImagePipeline::Create(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(p).value();
}

ImageOptions Small(CropMode crop, int size = 32) {
  ImageOptions o;
  o.height = o.width = size;
  o.crop = crop;
  o.flip_probability = 0;
  return o;
}

TEST(ImagePipelineTest, SolidColourDecodesWithinJpegTolerance) {
  const auto jpeg = Jpeg(Solid(200, 150, 3, {200, 40, 90}), 200, 150);
  for (CropMode mode : {CropMode::kRandomResized, CropMode::kCenter, CropMode::kFull}) {
    auto p = Pipeline(Small(mode));
    std::vector<uint8_t> out(p->output_bytes());
    for (uint64_t key = 0; key < 20; ++key) {
      ASSERT_TRUE(p->Run(jpeg, key, out).ok());
      for (size_t i = 0; i < out.size(); i += 3) {
        ASSERT_NEAR(out[i], 200, 3);
        ASSERT_NEAR(out[i + 1], 40, 3);
        ASSERT_NEAR(out[i + 2], 90, 3);
      }
    }
  }
}

TEST(ImagePipelineTest, FullModeAtSourceSizeReproducesTheDecodedGradient) {
  const int w = 96, h = 64;
  const auto src = Gradient(w, h);
  ImageOptions o = Small(CropMode::kFull);
  o.width = w;
  o.height = h;
  auto p = Pipeline(o);
  std::vector<uint8_t> out(p->output_bytes());
  ASSERT_TRUE(p->Run(Jpeg(src, w, h), 7, out).ok());
  EXPECT_EQ(p->last().scale_num, 1);
  EXPECT_EQ(p->last().scale_denom, 1);
  int worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - src[i]));
  EXPECT_LE(worst, 6);
}

TEST(ImagePipelineTest, RandomCropStaysInBoundsAndIsDeterministicPerKey) {
  ImageOptions o;
  for (auto [h, w] : std::vector<std::pair<int, int>>{
           {256, 256}, {480, 640}, {1, 1}, {1, 1000}, {1000, 1}, {3, 7}, {65535, 2}}) {
    int distinct = 0;
    CropBox prev;
    for (uint64_t key = 0; key < 500; ++key) {
      const CropBox c = SampleCrop(h, w, key, o);
      ASSERT_GE(c.x, 0);
      ASSERT_GE(c.y, 0);
      ASSERT_GE(c.width, 1);
      ASSERT_GE(c.height, 1);
      ASSERT_LE(c.x + c.width, w);
      ASSERT_LE(c.y + c.height, h);
      ASSERT_EQ(c, SampleCrop(h, w, key, o));
      distinct += !(c == prev);
      prev = c;
    }
    if (h * w > 100 && h < 10 * w && w < 10 * h) {
      EXPECT_GT(distinct, 400) << h << "x" << w;
    }
  }
}

TEST(ImagePipelineTest, RandomCropAreaAndRatioFollowTheOptions) {
  ImageOptions o;
  const int h = 1000, w = 1000;
  for (uint64_t key = 0; key < 2000; ++key) {
    const CropBox c = SampleCrop(h, w, key, o);
    const double area = static_cast<double>(c.width) * c.height / (h * w);
    const double ratio = static_cast<double>(c.width) / c.height;
    // Rounding of each side moves these a little off the sampled values.
    EXPECT_GE(area, 0.08 * 0.99);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(ratio, 0.75 * 0.99);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.01);
  }
}

TEST(ImagePipelineTest, RandomCropFallsBackToCentreWhenNoAttemptFits) {
  ImageOptions o;
  // Extreme aspect ratios never fit the default ratio range.
  EXPECT_EQ(SampleCrop(1, 1000, 9, o), (CropBox{499, 0, 1, 1}));
  EXPECT_EQ(SampleCrop(1000, 3, 9, o), (CropBox{0, 498, 3, 4}));
  o.min_scale = o.max_scale = 1.0;  // full area with ratio >= 2 never fits a square
  o.min_ratio = 2.0;
  o.max_ratio = 3.0;
  EXPECT_EQ(SampleCrop(100, 100, 42, o), (CropBox{0, 25, 100, 50}));
  o.min_ratio = 0.25;
  o.max_ratio = 0.5;
  EXPECT_EQ(SampleCrop(100, 100, 42, o), (CropBox{25, 0, 50, 100}));
}

TEST(ImagePipelineTest, CenterCropTakesTheCentredFractionOfTheShorterSide) {
  ImageOptions o = Small(CropMode::kCenter, 64);
  EXPECT_EQ(SampleCrop(200, 300, 1, o), (CropBox{62, 12, 175, 175}));
  EXPECT_EQ(SampleCrop(200, 300, 2, o), SampleCrop(200, 300, 1, o));  // no randomness
  o.width = 128;  // 2:1 output on a 3:2 image: full width, half height
  EXPECT_EQ(SampleCrop(200, 300, 1, o), (CropBox{18, 34, 263, 131}));
}

TEST(ImagePipelineTest, FlipMirrorsTheUnflippedOutputExactly) {
  const auto jpeg = Jpeg(Gradient(120, 90), 120, 90);
  for (ImageLayout layout : {ImageLayout::kHWC, ImageLayout::kCHW}) {
    for (PixelType dtype : {PixelType::kUint8, PixelType::kFloat32}) {
      ImageOptions o = Small(CropMode::kRandomResized, 24);
      o.layout = layout;
      o.dtype = dtype;
      o.flip_probability = 0;
      auto plain = Pipeline(o);
      o.flip_probability = 1;
      auto flipped = Pipeline(o);
      const size_t es = dtype == PixelType::kUint8 ? 1 : 4;
      std::vector<float> a(plain->output_bytes() / 4 + 1), b(a.size());
      std::span<uint8_t> sa(reinterpret_cast<uint8_t*>(a.data()), plain->output_bytes());
      std::span<uint8_t> sb(reinterpret_cast<uint8_t*>(b.data()), plain->output_bytes());
      for (uint64_t key = 0; key < 10; ++key) {
        ASSERT_TRUE(plain->Run(jpeg, key, sa).ok());
        ASSERT_TRUE(flipped->Run(jpeg, key, sb).ok());
        EXPECT_FALSE(plain->last().flipped);
        EXPECT_TRUE(flipped->last().flipped);
        EXPECT_EQ(plain->last().crop, flipped->last().crop);
        const int W = 24, H = 24;
        for (int c = 0; c < 3; ++c) {
          for (int y = 0; y < H; ++y) {
            for (int x = 0; x < W; ++x) {
              auto at = [&](int xx) {
                return layout == ImageLayout::kHWC ? ((y * W + xx) * 3 + c) * es
                                                   : ((c * H + y) * W + xx) * es;
              };
              ASSERT_EQ(std::memcmp(&sa[at(x)], &sb[at(W - 1 - x)], es), 0);
            }
          }
        }
      }
    }
  }
}

TEST(ImagePipelineTest, FlipHappensForAboutHalfOfTheKeys) {
  ImageOptions o;
  int flips = 0;
  for (uint64_t key = 0; key < 10000; ++key) flips += SampleFlip(key, o);
  EXPECT_GT(flips, 4700);
  EXPECT_LT(flips, 5300);
  o.flip_probability = 0;
  EXPECT_FALSE(SampleFlip(3, o));
  o.flip_probability = 1;
  EXPECT_TRUE(SampleFlip(3, o));
}

TEST(ImagePipelineTest, Float32NormalizesWithMeanAndStd) {
  const auto jpeg = Jpeg(Solid(64, 64, 3, {255, 128, 0}), 64, 64);
  ImageOptions o = Small(CropMode::kCenter, 16);
  o.dtype = PixelType::kFloat32;
  o.mean = kImageNetMean;
  o.std = kImageNetStd;
  auto p = Pipeline(o);
  std::vector<float> out(16 * 16 * 3);
  ASSERT_TRUE(p->Run(jpeg, 0, {reinterpret_cast<uint8_t*>(out.data()), out.size() * 4}).ok());
  const float want[3] = {(1.0f - 0.485f) / 0.229f, (128 / 255.0f - 0.456f) / 0.224f,
                         (0.0f - 0.406f) / 0.225f};
  const float tol = 3.0f / 255 / 0.224f;  // 3 levels of JPEG error
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i % 3], tol) << i;

  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  auto unit = Pipeline(o);
  ASSERT_TRUE(unit->Run(jpeg, 0, {reinterpret_cast<uint8_t*>(out.data()), out.size() * 4}).ok());
  EXPECT_NEAR(out[0], 1.0f, 3.0f / 255);
  EXPECT_NEAR(out[1], 128 / 255.0f, 3.0f / 255);
  EXPECT_NEAR(out[2], 0.0f, 3.0f / 255);
}

TEST(ImagePipelineTest, ChwHoldsTheSamePixelsAsHwcTransposed) {
  const auto jpeg = Jpeg(Gradient(100, 80), 100, 80);
  ImageOptions o = Small(CropMode::kRandomResized, 20);
  o.flip_probability = 0.5;
  auto hwc = Pipeline(o);
  o.layout = ImageLayout::kCHW;
  auto chw = Pipeline(o);
  std::vector<uint8_t> a(hwc->output_bytes()), b(chw->output_bytes());
  for (uint64_t key = 0; key < 8; ++key) {
    ASSERT_TRUE(hwc->Run(jpeg, key, a).ok());
    ASSERT_TRUE(chw->Run(jpeg, key, b).ok());
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 20 * 20; ++i) ASSERT_EQ(a[i * 3 + c], b[c * 400 + i]);
    }
  }
}

TEST(ImagePipelineTest, GrayscaleJpegComesOutAsRgb) {
  const auto jpeg = Jpeg(Solid(50, 40, 1, {77}), 50, 40, JpegColor::kGray);
  auto p = Pipeline(Small(CropMode::kFull, 8));
  ASSERT_EQ(p->ReadHeader(jpeg)->colorspace, "gray");
  std::vector<uint8_t> out(p->output_bytes());
  ASSERT_TRUE(p->Run(jpeg, 0, out).ok());
  for (uint8_t v : out) ASSERT_NEAR(v, 77, 2);
}

TEST(ImagePipelineTest, CmykJpegComesOutAsRgb) {
  // Inverted (Adobe) CMYK: C=255, M=0, Y=0, K=255 is pure red.
  const auto jpeg = Jpeg(Solid(48, 48, 4, {255, 0, 0, 255}), 48, 48, JpegColor::kCmyk);
  auto p = Pipeline(Small(CropMode::kFull, 8));
  ASSERT_EQ(p->ReadHeader(jpeg)->colorspace, "ycck");
  std::vector<uint8_t> out(p->output_bytes());
  ASSERT_TRUE(p->Run(jpeg, 0, out).ok());
  for (size_t i = 0; i < out.size(); i += 3) {
    ASSERT_NEAR(out[i], 255, 4);
    ASSERT_NEAR(out[i + 1], 0, 4);
    ASSERT_NEAR(out[i + 2], 0, 4);
  }
}

TEST(ImagePipelineTest, ProgressiveAndSubsampledJpegsDecode) {
  const auto jpeg =
      Jpeg(Solid(70, 50, 3, {10, 220, 130}), 70, 50, JpegColor::kRgb, {90, true, true});
  auto p = Pipeline(Small(CropMode::kRandomResized, 16));
  std::vector<uint8_t> out(p->output_bytes());
  ASSERT_TRUE(p->Run(jpeg, 5, out).ok());
  EXPECT_NEAR(out[0], 10, 4);
  EXPECT_NEAR(out[1], 220, 4);
  EXPECT_NEAR(out[2], 130, 4);
}

TEST(ImagePipelineTest, ScaledDecodePicksTheSmallestSufficientScale) {
  const auto jpeg = Jpeg(Gradient(256, 256), 256, 256);
  ImageOptions o = Small(CropMode::kFull, 32);
  auto scaled = Pipeline(o);
  o.scaled_decode = false;
  auto full = Pipeline(o);
  std::vector<uint8_t> a(scaled->output_bytes()), b(full->output_bytes());
  ASSERT_TRUE(scaled->Run(jpeg, 0, a).ok());
  ASSERT_TRUE(full->Run(jpeg, 0, b).ok());
  EXPECT_EQ(scaled->last().scale_num, 1);
  EXPECT_EQ(scaled->last().scale_denom, 8);
  EXPECT_EQ(scaled->last().decoded_width, 32);
  EXPECT_EQ(full->last().scale_num, full->last().scale_denom);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::abs(a[i] - b[i]);
  EXPECT_LT(diff / a.size(), 2.0);

  // A centred 64x64 crop of the 256x256 image needs scale 1/2 for a 32x32
  // output (64 * 1/2 = 32; 3/8 would leave 24).
  ImageOptions c = Small(CropMode::kCenter, 32);
  c.center_fraction = 0.25;
  auto center = Pipeline(c);
  ASSERT_TRUE(center->Run(jpeg, 0, a).ok());
  EXPECT_EQ(center->last().crop, (CropBox{96, 96, 64, 64}));
  EXPECT_EQ(center->last().scale_num * 2, center->last().scale_denom);
}

// Decoding only the crop's region (jpeg_crop_scanline / jpeg_skip_scanlines,
// stopping after the crop) gives the same bytes as decoding everything: the
// region covers every pixel the resize reads, plus a column of margin so
// that chroma upsampling never sees a region edge. Covers 4:2:0 (fancy
// upsampling at scale 1), 4:4:4, progressive, grayscale and YCCK, at every
// decode scale, uint8 and float32.
TEST(ImagePipelineTest, CropDecodeGivesTheSameBytesAsAFullDecode) {
  std::vector<std::vector<uint8_t>> jpegs;
  for (const EncodeOptions& eo : {EncodeOptions{90, true, false}, EncodeOptions{90, false, false},
                                  EncodeOptions{85, true, true}}) {
    for (auto& j : testing_util::SyntheticJpegCorpus(3, 0, eo)) jpegs.push_back(std::move(j));
  }
  {
    int w = 0, h = 0;
    testing_util::SyntheticSize(7, &w, &h);
    const auto rgb = testing_util::SyntheticImage(7, w, h);
    std::vector<uint8_t> gray(static_cast<size_t>(w) * h), cmyk(gray.size() * 4);
    for (size_t i = 0; i < gray.size(); ++i) {
      gray[i] = rgb[3 * i + 1];
      for (int c = 0; c < 3; ++c) cmyk[4 * i + c] = rgb[3 * i + c];
      cmyk[4 * i + 3] = static_cast<uint8_t>(255 - rgb[3 * i] / 4);
    }
    jpegs.push_back(Jpeg(gray, w, h, JpegColor::kGray));
    jpegs.push_back(Jpeg(cmyk, w, h, JpegColor::kCmyk));
  }
  int scales_seen = 0;
  for (int size : {16, 40, 64, 200}) {
    for (PixelType dtype : {PixelType::kUint8, PixelType::kFloat32}) {
      ImageOptions o;
      o.height = o.width = size;
      o.dtype = dtype;
      auto crop = Pipeline(o);
      // The reference: every pixel, libjpeg's own Huffman decoder.
      o.crop_decode = false;
      o.fast_huffman = false;
      auto full = Pipeline(o);
      std::vector<uint8_t> a(crop->output_bytes()), b(a.size());
      for (size_t j = 0; j < jpegs.size(); ++j) {
        for (uint64_t key = 0; key < 12; ++key) {
          ASSERT_TRUE(crop->Run(jpegs[j], key, a).ok());
          ASSERT_TRUE(full->Run(jpegs[j], key, b).ok());
          ASSERT_EQ(a, b) << "image " << j << " key " << key << " size " << size;
          const ImageTrace& t = crop->last();
          EXPECT_EQ(full->last().decoded_region,
                    (CropBox{0, 0, t.decoded_width, t.decoded_height}));
          scales_seen |= 1 << (8 * t.scale_num / t.scale_denom);
        }
      }
    }
  }
  EXPECT_EQ(scales_seen, (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 8));
}

TEST(ImagePipelineTest, FastUpsampleStaysCloseToTheDefaultAndCropDecodesExactly) {
  std::vector<std::vector<uint8_t>> jpegs;
  for (const EncodeOptions& eo : {EncodeOptions{90, true, false}, EncodeOptions{90, false, false},
                                  EncodeOptions{85, true, true}}) {
    for (auto& j : testing_util::SyntheticJpegCorpus(3, 0, eo)) jpegs.push_back(std::move(j));
  }
  for (int size : {16, 64, 200}) {
    ImageOptions o;
    o.height = o.width = size;
    auto exact = Pipeline(o);
    o.fast_upsample = true;
    o.fast_dct = true;
    auto fast = Pipeline(o);
    o.crop_decode = false;
    auto fast_full = Pipeline(o);
    std::vector<uint8_t> a(exact->output_bytes()), b(a.size()), c(a.size());
    for (size_t j = 0; j < jpegs.size(); ++j) {
      for (uint64_t key = 0; key < 8; ++key) {
        ASSERT_TRUE(exact->Run(jpegs[j], key, a).ok());
        ASSERT_TRUE(fast->Run(jpegs[j], key, b).ok());
        ASSERT_TRUE(fast_full->Run(jpegs[j], key, c).ok());
        // Crop decoding changes nothing with the merged upsampler either.
        ASSERT_EQ(b, c) << "image " << j << " key " << key << " size " << size;
        double diff = 0;
        for (size_t i = 0; i < a.size(); ++i) diff += std::abs(int{a[i]} - int{b[i]});
        // Noisy synthetic images: about 3 levels of 255 on average.
        EXPECT_LT(diff / static_cast<double>(a.size()), 6.0) << "image " << j << " key " << key << " size " << size;
      }
    }
  }
}

TEST(ImagePipelineTest, CropDecodeDecodesOnlyAroundTheCrop) {
  const auto jpeg = Jpeg(Gradient(256, 256), 256, 256);
  ImageOptions o = Small(CropMode::kCenter, 32);
  o.center_fraction = 0.25;  // crop {96, 96, 64, 64}, decoded at 1/2
  o.index_cache_mb = 0;      // the region of an ordinary decode
  auto p = Pipeline(o);
  std::vector<uint8_t> out(p->output_bytes());
  ASSERT_TRUE(p->Run(jpeg, 0, out).ok());
  const ImageTrace& t = p->last();
  ASSERT_EQ(t.crop, (CropBox{96, 96, 64, 64}));
  ASSERT_EQ(t.decoded_width, 128);
  // The scaled crop is [48, 80) and maps 1:1 onto the output, so each
  // output pixel has one tap (the tent's neighbours weigh 0 and are
  // dropped). Columns: [48, 80), a 1 px margin, then widened left to an
  // iMCU boundary (4 scaled px: 4:4:4 at 1/2): [44, 81). Rows: exactly the
  // taps' [48, 80).
  EXPECT_EQ(t.decoded_region, (CropBox{44, 48, 37, 32}));
}

// Data below the crop is never read with crop_decode, so a file truncated
// below the crop decodes (every pixel produced comes from real data); a
// full decode reports the truncation.
TEST(ImagePipelineTest, CropDecodeDoesNotReadBelowTheCrop) {
  const auto jpeg = testing_util::SyntheticJpegCorpus(1)[0];
  const std::vector<uint8_t> head(jpeg.begin(), jpeg.begin() + jpeg.size() * 6 / 10);
  ImageOptions o = Small(CropMode::kRandomResized, 16);
  auto p = Pipeline(o);
  std::vector<uint8_t> out(p->output_bytes());
  // A key whose crop ends in the top half.
  uint64_t key = 0;
  for (;; ++key) {
    ASSERT_LT(key, 1000u);
    ASSERT_TRUE(p->Run(jpeg, key, out).ok());
    const CropBox c = p->last().crop;
    if ((c.y + c.height) * 2 < p->last().info.height) break;
  }
  EXPECT_TRUE(p->Run(head, key, out).ok());
  o.crop_decode = false;
  EXPECT_EQ(Pipeline(o)->Run(head, key, out).code(), absl::StatusCode::kDataLoss);
}

TEST(ImagePipelineTest, SameKeyGivesIdenticalBytesAcrossPipelines) {
  const auto corpus = testing_util::SyntheticJpegCorpus(3);
  ImageOptions o;
  o.height = o.width = 64;
  auto p1 = Pipeline(o);
  auto p2 = Pipeline(o);
  std::vector<uint8_t> a(p1->output_bytes()), b(a.size()), c(a.size());
  for (size_t i = 0; i < corpus.size(); ++i) {
    ASSERT_TRUE(p1->Run(corpus[i], 1000 + i, a).ok());
    ASSERT_TRUE(p2->Run(corpus[(i + 1) % 3], 99, c).ok());  // different history
    ASSERT_TRUE(p2->Run(corpus[i], 1000 + i, b).ok());
    EXPECT_EQ(a, b);
    ASSERT_TRUE(p2->Run(corpus[i], 2000 + i, b).ok());
    EXPECT_NE(a, b);
  }
}

TEST(ImagePipelineTest, TruncatedJpegIsDataLoss) {
  const auto jpeg = testing_util::SyntheticJpegCorpus(1)[0];
  auto p = Pipeline(Small(CropMode::kRandomResized));
  std::vector<uint8_t> out(p->output_bytes());
  const std::span<const uint8_t> half(jpeg.data(), jpeg.size() / 2);
  const Status s = p->Run(half, 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("corrupt JPEG"));
  // allow_warnings accepts it (grey fill), as PIL does.
  ImageOptions lax = Small(CropMode::kRandomResized);
  lax.allow_warnings = true;
  EXPECT_TRUE(Pipeline(lax)->Run(half, 0, out).ok());
}

// Offset of the first byte of the scan's coded data (after the SOS segment).
size_t ScanData(const std::vector<uint8_t>& jpeg) {
  size_t at = 2;
  while (at + 4 <= jpeg.size()) {
    const size_t len = static_cast<size_t>(jpeg[at + 2] << 8 | jpeg[at + 3]);
    if (jpeg[at + 1] == 0xDA) return at + 2 + len;
    at += 2 + len;
  }
  return jpeg.size();
}

TEST(ImagePipelineTest, FastHuffmanGivesLibjpegsBytesAndErrors) {
  // Valid images, then damaged ones: flipped bytes in the coded data, cut
  // short, bytes left over after the last block, no EOI. flywheel's
  // Huffman decoder must give libjpeg's pixels when the image decodes, and
  // libjpeg's verdict and message when it does not.
  std::vector<std::vector<uint8_t>> jpegs;
  for (const EncodeOptions& eo : {EncodeOptions{90, true, false}, EncodeOptions{95, false, false},
                                  EncodeOptions{85, true, true}}) {
    for (auto& j : testing_util::SyntheticJpegCorpus(2, 20, eo)) jpegs.push_back(std::move(j));
  }
  jpegs.push_back(Jpeg(Gradient(61, 37), 61, 37, JpegColor::kRgb, {75, true, false}));
  const size_t valid = jpegs.size();
  SplitMix64 rng(5);
  for (size_t j = 0; j < valid; ++j) {
    const std::vector<uint8_t> good = jpegs[j];  // a copy: jpegs grows below
    const size_t data = ScanData(good), end = good.size() - 2;  // EOI at end
    for (int m = 0; m < 6; ++m) {
      std::vector<uint8_t> bad = good;
      const size_t at = data + rng.Uniform(end - data);
      bad[at] ^= static_cast<uint8_t>(1 + rng.Uniform(255));
      jpegs.push_back(std::move(bad));
    }
    jpegs.emplace_back(good.begin(), good.begin() + static_cast<ptrdiff_t>(data + (end - data) / 2));
    std::vector<uint8_t> extra(good.begin(), good.begin() + static_cast<ptrdiff_t>(end));
    for (uint8_t b : {0x12, 0x34, 0x56, 0xFF, 0xD9}) extra.push_back(b);
    jpegs.push_back(std::move(extra));
    jpegs.emplace_back(good.begin(), good.begin() + static_cast<ptrdiff_t>(end));  // no EOI
  }
  int failures = 0, agreed_failures = 0, damaged_decoded = 0;
  for (bool lax : {false, true}) {
    for (int size : {24, 64, 160}) {
      ImageOptions o;
      o.height = o.width = size;
      o.allow_warnings = lax;
      o.index_cache_mb = 0;
      auto fast = Pipeline(o);
      o.fast_huffman = false;
      auto ref = Pipeline(o);
      std::vector<uint8_t> a(fast->output_bytes()), b(a.size());
      for (size_t j = 0; j < jpegs.size(); ++j) {
        for (uint64_t key = 0; key < 4; ++key) {
          const Status sa = fast->Run(jpegs[j], key, a);
          const Status sb = ref->Run(jpegs[j], key, b);
          ASSERT_EQ(sa.code(), sb.code()) << "image " << j << " key " << key << ": " << sa << " vs " << sb;
          EXPECT_EQ(sa.message(), sb.message()) << "image " << j;
          if (sa.ok()) {
            ASSERT_EQ(a, b) << "image " << j << " key " << key << " size " << size;
          } else {
            ++agreed_failures;
          }
          failures += j < valid && !sa.ok();
          damaged_decoded += j >= valid && !lax && sa.ok();
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "valid images must decode";
  EXPECT_GT(agreed_failures, 0) << "the damaged images should include undecodable ones";
  // ... and ones that decode cleanly (damage outside what the crop reads,
  // or flips that still form valid codes), compared pixel for pixel above.
  EXPECT_GT(damaged_decoded, 0);
}

TEST(ImagePipelineTest, GarbageAndEmptyInputsAreErrors) {
  auto p = Pipeline(Small(CropMode::kRandomResized));
  std::vector<uint8_t> out(p->output_bytes());
  std::vector<uint8_t> garbage(1000);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 31 + 7);
  Status s = p->Run(garbage, 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("not a decodable JPEG"));
  s = p->Run({}, 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("empty JPEG"));
  // Only the SOI marker.
  const uint8_t soi[] = {0xFF, 0xD8, 0xFF};
  EXPECT_EQ(p->Run(soi, 0, out).code(), absl::StatusCode::kDataLoss);
}

// Rewrites the frame header (SOFn) dimensions, walking the marker segments.
std::vector<uint8_t> WithDimensions(std::vector<uint8_t> jpeg, int w, int h) {
  for (size_t i = 2; i + 8 < jpeg.size();) {
    if (jpeg[i] != 0xFF) break;
    const uint8_t m = jpeg[i + 1];
    if (m >= 0xC0 && m <= 0xC2) {
      jpeg[i + 5] = static_cast<uint8_t>(h >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(h);
      jpeg[i + 7] = static_cast<uint8_t>(w >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(w);
      return jpeg;
    }
    i += 2 + (jpeg[i + 2] << 8 | jpeg[i + 3]);
  }
  ADD_FAILURE() << "no SOF0 marker";
  return jpeg;
}

TEST(ImagePipelineTest, ZeroOrHugeDimensionsAreRefusedBeforeDecoding) {
  const auto jpeg = Jpeg(Solid(64, 64, 3, {1, 2, 3}), 64, 64);
  auto p = Pipeline(Small(CropMode::kRandomResized));
  std::vector<uint8_t> out(p->output_bytes());
  Status s = p->Run(WithDimensions(jpeg, 0, 64), 0, out);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
              s.code() == absl::StatusCode::kInvalidArgument)
      << s;
  s = p->Run(WithDimensions(jpeg, 65000, 65000), 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("above max_pixels 268435456"));
  ImageOptions tight = Small(CropMode::kRandomResized);
  tight.max_pixels = 64 * 63;
  s = Pipeline(tight)->Run(jpeg, 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("64x64 = 4096 pixels"));
  // Declared bigger than the data: a truncated stream, not a crash.
  s = p->Run(WithDimensions(jpeg, 4000, 3000), 0, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Regression: TurboJPEG 2.1 leaves its handle mid-stream after a header
// error, and the next valid image failed with "Bogus marker length".
TEST(ImagePipelineTest, AnErrorDoesNotPoisonTheNextImage) {
  const auto good = Jpeg(Solid(40, 40, 3, {9, 99, 199}), 40, 40);
  auto p = Pipeline(Small(CropMode::kFull, 8));
  std::vector<uint8_t> out(p->output_bytes());
  const std::vector<uint8_t> bad_header(good.begin(), good.begin() + 100);
  const std::vector<uint8_t> bad_data(good.begin(), good.end() - 40);
  for (const auto& bad : {WithDimensions(good, 0, 40), bad_header, bad_data}) {
    EXPECT_FALSE(p->Run(bad, 0, out).ok());
    ASSERT_TRUE(p->Run(good, 0, out).ok());
    EXPECT_NEAR(out[1], 99, 3);
  }
}

TEST(ImagePipelineTest, BadDestinationsAreRefused) {
  const auto jpeg = Jpeg(Solid(16, 16, 3, {1, 2, 3}), 16, 16);
  ImageOptions o = Small(CropMode::kFull, 4);
  auto p = Pipeline(o);
  std::vector<uint8_t> small(p->output_bytes() - 1);
  Status s = p->Run(jpeg, 0, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("destination holds 47 bytes, the image needs 48"));
  o.dtype = PixelType::kFloat32;
  auto f = Pipeline(o);
  std::vector<float> buf(4 * 4 * 3 + 1);
  s = f->Run(jpeg, 0, {reinterpret_cast<uint8_t*>(buf.data()) + 1, f->output_bytes()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("aligned"));
}

TEST(ImageOptionsTest, ValidateNamesTheBadField) {
  auto check = [](auto mutate, const char* field) {
    ImageOptions o;
    mutate(o);
    const Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(s.message(), HasSubstr(field));
    EXPECT_FALSE(ImagePipeline::Create(o).ok());
  };
  check([](ImageOptions& o) { o.height = 0; }, "height");
  check([](ImageOptions& o) { o.width = 20000; }, "width");
  check([](ImageOptions& o) { o.min_scale = 0; }, "min_scale");
  check([](ImageOptions& o) { o.max_scale = 0.01; }, "max_scale");
  check([](ImageOptions& o) { o.min_ratio = -1; }, "min_ratio");
  check([](ImageOptions& o) { o.max_ratio = 0.5; }, "max_ratio");
  check([](ImageOptions& o) { o.max_attempts = 0; }, "max_attempts");
  check([](ImageOptions& o) { o.center_fraction = 1.5; }, "center_fraction");
  check([](ImageOptions& o) { o.flip_probability = NAN; }, "flip_probability");
  check([](ImageOptions& o) { o.std[1] = 0; }, "std[1]");
  check([](ImageOptions& o) { o.max_pixels = 0; }, "max_pixels");
  EXPECT_TRUE(ImageOptions{}.Validate().ok());
  ImageOptions f;
  f.dtype = PixelType::kFloat32;
  EXPECT_EQ(f.OutputBytes(), 224u * 224 * 3 * 4);
}

}  // namespace
}  // namespace flywheel::loader

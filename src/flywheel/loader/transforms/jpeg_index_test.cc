#include "flywheel/loader/transforms/jpeg_index.h"

#include <gtest/gtest.h>

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
// clang-format on

#include <csetjmp>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "flywheel/base/rng.h"
#include "flywheel/loader/transforms/image.h"
#include "flywheel/loader/transforms/jpeg_testing.h"

namespace flywheel::loader {
namespace {

using testing_util::EncodeJpeg;
using testing_util::EncodeOptions;
using testing_util::JpegColor;

// Noisy pixels (so every block has AC coefficients and DC differences of
// many sizes).
std::vector<uint8_t> Noise(int w, int h, int channels, uint64_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (size_t i = 0; i < px.size(); ++i) {
    const size_t pixel = i / channels;
    const int x = static_cast<int>(pixel % w), y = static_cast<int>(pixel / w);
    px[i] = static_cast<uint8_t>((x * 3 + y * 5 + (i % channels) * 70) / 2 +
                                 Mix64(seed * 1000003 + i) % 48);
  }
  return px;
}

std::vector<uint8_t> Encode(int w, int h, JpegColor color, EncodeOptions eo, uint64_t seed = 1) {
  const int channels = color == JpegColor::kGray ? 1 : color == JpegColor::kCmyk ? 4 : 3;
  auto r = EncodeJpeg(Noise(w, h, channels, seed), w, h, color, eo);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<uint8_t>{};
}

// The quantized DCT coefficients of every component, as libjpeg reads them.
struct Coefficients {
  struct Component {
    int h = 0, v = 0;                    // sampling factors
    int blocks_x = 0, blocks_y = 0;      // as stored (padded to whole MCUs)
    std::vector<int16_t> data;           // blocks_y * blocks_x * 64
    const int16_t* Block(int bx, int by) const {
      return &data[(static_cast<size_t>(by) * blocks_x + bx) * 64];
    }
  };
  int width = 0, height = 0;
  std::vector<Component> components;
};

struct ErrorJump {
  jpeg_error_mgr mgr;
  jmp_buf jump;
};

[[noreturn]] void Jump(j_common_ptr cinfo) {
  longjmp(reinterpret_cast<ErrorJump*>(cinfo->err)->jump, 1);
}

// false when libjpeg reports an error or a warning.
bool ReadCoefficients(std::span<const uint8_t> jpeg, Coefficients* out) {
  jpeg_decompress_struct cinfo{};
  ErrorJump err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = Jump;
  err.mgr.emit_message = [](j_common_ptr c, int level) {
    if (level < 0) Jump(c);  // warnings are failures here
  };
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&cinfo, TRUE);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&cinfo);
  out->width = static_cast<int>(cinfo.image_width);
  out->height = static_cast<int>(cinfo.image_height);
  out->components.clear();
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& ci = cinfo.comp_info[c];
    Coefficients::Component comp;
    comp.h = ci.h_samp_factor;
    comp.v = ci.v_samp_factor;
    comp.blocks_x = static_cast<int>(ci.width_in_blocks);
    comp.blocks_y = static_cast<int>(ci.height_in_blocks);
    comp.data.resize(static_cast<size_t>(comp.blocks_x) * comp.blocks_y * 64);
    for (int by = 0; by < comp.blocks_y; ++by) {
      JBLOCKARRAY row = (*cinfo.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&cinfo),
                                                         arrays[c], by, 1, FALSE);
      for (int bx = 0; bx < comp.blocks_x; ++bx) {
        std::memcpy(&comp.data[(static_cast<size_t>(by) * comp.blocks_x + bx) * 64], row[0][bx],
                    64 * sizeof(int16_t));
      }
    }
    out->components.push_back(std::move(comp));
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// Blocks of a component per MCU, across and down (one for a lone
// component, coded block by block).
std::pair<int, int> McuBlocks(const JpegIndex& index, const Coefficients::Component& c) {
  return index.components == 1 ? std::pair{1, 1} : std::pair{c.h, c.v};
}

std::string RectName(McuRect r) {
  return absl::StrCat("rect [", r.x0, ",", r.x1, ")x[", r.y0, ",", r.y1, ")");
}

// Splices `rect` out of `jpeg` and checks, block by block, that the spliced
// JPEG holds exactly the original's coefficients of those MCUs, and that
// libjpeg reads it without a warning.
void ExpectExactSplice(const std::vector<uint8_t>& jpeg, const JpegIndex& index,
                       const Coefficients& whole, McuRect rect, JpegSplicer* splicer) {
  SCOPED_TRACE(RectName(rect));
  auto spliced = splicer->Splice(jpeg, index, rect);
  ASSERT_TRUE(spliced.ok()) << spliced.status();
  Coefficients part;
  ASSERT_TRUE(ReadCoefficients(*spliced, &part));
  const int want_w = rect.x1 == index.mcus_x ? index.width - rect.x0 * index.mcu_width
                                             : (rect.x1 - rect.x0) * index.mcu_width;
  const int want_h = rect.y1 == index.mcus_y ? index.height - rect.y0 * index.mcu_height
                                             : (rect.y1 - rect.y0) * index.mcu_height;
  ASSERT_EQ(part.width, want_w);
  ASSERT_EQ(part.height, want_h);
  ASSERT_EQ(part.components.size(), whole.components.size());
  for (size_t c = 0; c < whole.components.size(); ++c) {
    const auto& a = whole.components[c];
    const auto& b = part.components[c];
    const auto [bw, bh] = McuBlocks(index, a);
    for (int by = 0; by < std::min(b.blocks_y, (rect.y1 - rect.y0) * bh); ++by) {
      for (int bx = 0; bx < std::min(b.blocks_x, (rect.x1 - rect.x0) * bw); ++bx) {
        ASSERT_EQ(std::memcmp(a.Block(rect.x0 * bw + bx, rect.y0 * bh + by), b.Block(bx, by),
                              64 * sizeof(int16_t)),
                  0)
            << "component " << c << " block (" << bx << ", " << by << ")";
      }
    }
  }
}

// Corners, edges, single MCUs, whole rows and columns, and 20 random
// rectangles of the index's MCU grid.
std::vector<McuRect> TestRects(const JpegIndex& index, uint64_t seed) {
  const int mx = index.mcus_x, my = index.mcus_y;
  std::vector<McuRect> rects = {{0, 0, mx, my},           {0, 0, 1, 1},
                                {mx - 1, my - 1, mx, my}, {0, my / 2, mx, my / 2 + 1},
                                {mx / 2, 0, mx / 2 + 1, my}, {mx / 3, my / 3, mx, my}};
  SplitMix64 rng(seed);
  for (int i = 0; i < 20; ++i) {
    McuRect r;
    r.x0 = static_cast<int>(rng.Uniform(mx));
    r.y0 = static_cast<int>(rng.Uniform(my));
    r.x1 = r.x0 + 1 + static_cast<int>(rng.Uniform(mx - r.x0));
    r.y1 = r.y0 + 1 + static_cast<int>(rng.Uniform(my - r.y0));
    rects.push_back(r);
  }
  return rects;
}

struct Variant {
  const char* name;
  int w, h;
  JpegColor color;
  EncodeOptions eo;
  int mcu;  // expected MCU size in pixels
};

const Variant kVariants[] = {
    {"rgb 4:2:0", 256, 256, JpegColor::kRgb, {90, true, false}, 16},
    {"rgb 4:4:4", 200, 120, JpegColor::kRgb, {95, false, false}, 8},
    {"rgb 4:2:0 odd size", 97, 61, JpegColor::kRgb, {75, true, false}, 16},
    {"gray", 131, 77, JpegColor::kGray, {90, true, false}, 8},
    {"cmyk", 72, 40, JpegColor::kCmyk, {85, false, false}, 8},
    {"rgb 4:2:0 quality 100", 48, 48, JpegColor::kRgb, {100, true, false}, 16},
    {"rgb 1 px", 1, 1, JpegColor::kRgb, {90, true, false}, 16},
};

TEST(JpegIndexTest, SplicedRectanglesHoldExactlyTheOriginalCoefficients) {
  JpegSplicer splicer;  // reused across images, as pipelines do
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto jpeg = Encode(v.w, v.h, v.color, v.eo);
    auto index = BuildJpegIndex(jpeg);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->width, v.w);
    EXPECT_EQ(index->height, v.h);
    EXPECT_EQ(index->mcu_width, v.mcu);
    EXPECT_EQ(index->mcu_height, v.mcu);
    EXPECT_EQ(index->mcus_x, (v.w + v.mcu - 1) / v.mcu);
    EXPECT_EQ(index->mcus_y, (v.h + v.mcu - 1) / v.mcu);
    const size_t mcus = static_cast<size_t>(index->mcus_x) * index->mcus_y;
    ASSERT_EQ(index->bit.size(), mcus + 1);
    for (size_t i = 0; i < mcus; ++i) ASSERT_LT(index->bit[i], index->bit[i + 1]) << "MCU " << i;
    EXPECT_GT(index->bytes(), 0u);
    Coefficients whole;
    ASSERT_TRUE(ReadCoefficients(jpeg, &whole));
    for (const McuRect& r : TestRects(*index, 7)) ExpectExactSplice(jpeg, *index, whole, r, &splicer);
  }
}

// SpliceHeaders + DecodeMcu over `rect` give, block by block, the
// original's coefficients (as libjpeg reads them), in libjpeg's MCU order;
// MCUs decoded with null blocks (dropped) do not change the ones after.
void ExpectExactMcus(const std::vector<uint8_t>& jpeg, const JpegIndex& index,
                     const Coefficients& whole, McuRect rect, JpegSplicer* splicer) {
  SCOPED_TRACE(RectName(rect));
  auto headers = splicer->SpliceHeaders(jpeg, index, rect);
  ASSERT_TRUE(headers.ok()) << headers.status();
  // The headers alone are a JPEG of the rectangle's size with no coded data.
  const auto& h = *headers;
  ASSERT_GE(h.size(), 4u);
  EXPECT_EQ(h[h.size() - 2], 0xFF);
  EXPECT_EQ(h[h.size() - 1], 0xD9);
  // Blocks of each scan component in one MCU, in order.
  struct Slot {
    int component, bx, by;
  };
  std::vector<Slot> order;
  for (size_t c = 0; c < whole.components.size(); ++c) {
    const auto [bw, bh] = McuBlocks(index, whole.components[c]);
    for (int y = 0; y < bh; ++y) {
      for (int x = 0; x < bw; ++x) order.push_back({static_cast<int>(c), x, y});
    }
  }
  ASSERT_EQ(splicer->blocks_per_mcu(), static_cast<int>(order.size()));
  std::vector<int16_t> blocks(order.size() * 64);
  std::vector<int16_t*> pointers;
  for (size_t b = 0; b < order.size(); ++b) pointers.push_back(&blocks[b * 64]);
  for (int my = rect.y0; my < rect.y1; ++my) {
    for (int mx = rect.x0; mx < rect.x1; ++mx) {
      // The first MCU of every other row is dropped.
      if (mx == rect.x0 && (my - rect.y0) % 2 == 1) {
        ASSERT_TRUE(splicer->DecodeMcu(nullptr)) << "MCU (" << mx << ", " << my << ")";
        continue;
      }
      std::fill(blocks.begin(), blocks.end(), 0);
      ASSERT_TRUE(splicer->DecodeMcu(pointers.data())) << "MCU (" << mx << ", " << my << ")";
      for (size_t b = 0; b < order.size(); ++b) {
        const auto& comp = whole.components[order[b].component];
        const auto [bw, bh] = McuBlocks(index, comp);
        const int bx = mx * bw + order[b].bx, by = my * bh + order[b].by;
        if (bx >= comp.blocks_x || by >= comp.blocks_y) continue;  // edge padding blocks
        ASSERT_EQ(std::memcmp(comp.Block(bx, by), &blocks[b * 64], 64 * sizeof(int16_t)), 0)
            << "MCU (" << mx << ", " << my << ") block " << b;
      }
    }
  }
  EXPECT_FALSE(splicer->DecodeMcu(pointers.data())) << "past the rectangle";
}

TEST(JpegIndexTest, DecodedMcusAreExactlyTheOriginalCoefficients) {
  JpegSplicer splicer;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto jpeg = Encode(v.w, v.h, v.color, v.eo);
    auto index = BuildJpegIndex(jpeg);
    ASSERT_TRUE(index.ok()) << index.status();
    Coefficients whole;
    ASSERT_TRUE(ReadCoefficients(jpeg, &whole));
    for (const McuRect& r : TestRects(*index, 11)) ExpectExactMcus(jpeg, *index, whole, r, &splicer);
    // A Splice in between ends the decoding.
    ASSERT_TRUE(splicer.SpliceHeaders(jpeg, *index, {0, 0, 1, 1}).ok());
    ASSERT_TRUE(splicer.Splice(jpeg, *index, {0, 0, 1, 1}).ok());
    EXPECT_FALSE(splicer.DecodeMcu(nullptr));
  }
}

TEST(JpegIndexTest, AnAbandonedRecordingDoesNotLeakIntoTheNextDecode) {
  // A recording scan of a one-component image left unfinished (its decode
  // failed), then a rectangle of a colour image: found by jpeg_fuzz (the
  // recording, sized for the first image, was written to by the second).
  JpegSplicer splicer;
  const auto gray = Encode(40, 24, JpegColor::kGray, {90, true, false});
  const auto color = Encode(64, 48, JpegColor::kRgb, {90, true, false});
  ASSERT_TRUE(splicer.StartScan(gray, /*record=*/true).ok());
  EXPECT_TRUE(splicer.DecodeMcu(nullptr));
  auto index = BuildJpegIndex(color);
  ASSERT_TRUE(index.ok()) << index.status();
  Coefficients whole;
  ASSERT_TRUE(ReadCoefficients(color, &whole));
  ExpectExactMcus(color, *index, whole, {0, 0, index->mcus_x, index->mcus_y}, &splicer);
  EXPECT_EQ(splicer.FinishIndex().status().code(), absl::StatusCode::kFailedPrecondition);
  // A recording finished normally gives BuildJpegIndex's index.
  ASSERT_TRUE(splicer.StartScan(color, /*record=*/true).ok());
  for (int m = 0; m < 3; ++m) EXPECT_TRUE(splicer.DecodeMcu(nullptr));
  auto recorded = splicer.FinishIndex();
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->bit, index->bit);
  EXPECT_EQ(recorded->dc, index->dc);
  EXPECT_EQ(recorded->component_start, index->component_start);
  EXPECT_EQ(recorded->row_raw, index->row_raw);
}

TEST(JpegIndexTest, UnsupportedJpegsAreUnimplemented) {
  const auto progressive = Encode(64, 64, JpegColor::kRgb, {90, true, true});
  auto r = BuildJpegIndex(progressive);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();

  // A restart interval: a DRI segment just before the SOS.
  auto jpeg = Encode(64, 64, JpegColor::kRgb, {90, true, false});
  size_t sos = 2;
  while (!(jpeg[sos] == 0xFF && jpeg[sos + 1] == 0xDA)) sos += 2 + (jpeg[sos + 2] << 8 | jpeg[sos + 3]);
  std::vector<uint8_t> with_dri(jpeg.begin(), jpeg.begin() + static_cast<ptrdiff_t>(sos));
  for (uint8_t b : {0xFF, 0xDD, 0x00, 0x04, 0x00, 0x02}) with_dri.push_back(b);
  with_dri.insert(with_dri.end(), jpeg.begin() + static_cast<ptrdiff_t>(sos), jpeg.end());
  r = BuildJpegIndex(with_dri);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_NE(r.status().message().find("restart"), std::string_view::npos) << r.status();
}

TEST(JpegIndexTest, CorruptJpegsAreDataLossNeverACrash) {
  const auto jpeg = Encode(96, 64, JpegColor::kRgb, {90, true, false});
  EXPECT_EQ(BuildJpegIndex(std::span<const uint8_t>()).status().code(),
            absl::StatusCode::kDataLoss);
  const std::vector<uint8_t> garbage = {0x12, 0x34, 0x56, 0x78, 0x9a};
  EXPECT_EQ(BuildJpegIndex(garbage).status().code(), absl::StatusCode::kDataLoss);
  // Cut anywhere: never indexed (the data or the EOI is missing).
  for (size_t cut = 0; cut < jpeg.size(); cut += 7) {
    auto r = BuildJpegIndex(std::span<const uint8_t>(jpeg.data(), cut));
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
  }
  // Flipped bytes in the coded data: an error, or an index whose splices
  // libjpeg reads without a complaint.
  JpegSplicer splicer;
  SplitMix64 rng(3);
  int errors = 0;
  for (int i = 0; i < 200; ++i) {
    auto bad = jpeg;
    const size_t at = bad.size() / 2 + rng.Uniform(bad.size() / 2 - 2);
    bad[at] ^= static_cast<uint8_t>(1 + rng.Uniform(255));
    auto index = BuildJpegIndex(bad);
    if (!index.ok()) {
      ++errors;
      const auto code = index.status().code();
      EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kUnimplemented)
          << index.status();
      continue;
    }
    auto spliced = splicer.Splice(bad, *index, {1, 1, index->mcus_x, index->mcus_y});
    if (spliced.ok()) {
      Coefficients c;
      ReadCoefficients(*spliced, &c);  // must not crash; may warn
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(JpegIndexTest, SpliceRefusesRectanglesOutsideTheGridAndForeignIndexes) {
  const auto a = Encode(64, 48, JpegColor::kRgb, {90, true, false}, 1);
  const auto b = Encode(128, 128, JpegColor::kRgb, {90, true, false}, 2);
  auto ia = BuildJpegIndex(a);
  ASSERT_TRUE(ia.ok());
  JpegSplicer splicer;
  for (McuRect r : {McuRect{0, 0, 0, 1}, McuRect{0, 0, 5, 1}, McuRect{-1, 0, 1, 1},
                    McuRect{2, 2, 1, 3}, McuRect{0, 3, 1, 4}}) {
    EXPECT_EQ(splicer.Splice(a, *ia, r).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // An index of another image is refused, not followed.
  EXPECT_FALSE(splicer.Splice(b, *ia, {0, 0, 1, 1}).ok());
  EXPECT_FALSE(splicer.SpliceHeaders(b, *ia, {0, 0, 1, 1}).ok());
  // So is one whose arrays do not match its grid.
  JpegIndex cut = *ia;
  cut.row_raw.pop_back();
  EXPECT_EQ(splicer.SpliceHeaders(a, cut, {0, 0, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  cut = *ia;
  cut.bit.resize(3);
  EXPECT_EQ(splicer.Splice(a, cut, {0, 0, 1, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(splicer.DecodeMcu(nullptr));
}

TEST(JpegIndexCacheTest, IndexesFromTheSecondSightingWithinTheBudget) {
  JpegIndexCache cache(1 << 20);
  const auto jpeg = Encode(64, 64, JpegColor::kRgb, {90, true, false});
  const auto key = JpegIndexCache::KeyOf(jpeg);
  bool build = true;
  EXPECT_EQ(cache.Find(key, &build), nullptr);
  EXPECT_FALSE(build);  // first sighting: only recorded
  EXPECT_EQ(cache.Find(key, &build), nullptr);
  EXPECT_TRUE(build);  // second: the caller builds
  auto index = BuildJpegIndex(jpeg);
  ASSERT_TRUE(index.ok());
  cache.Put(key, std::make_shared<const JpegIndex>(*index));
  auto found = cache.Find(key, &build);
  ASSERT_NE(found, nullptr);
  EXPECT_FALSE(build);
  EXPECT_EQ(found->mcus_x, 4);
  const auto s = cache.stats();
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.built, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_GT(s.bytes, static_cast<int64_t>(index->bytes()));
  EXPECT_LE(s.bytes, s.budget);

  // An image that cannot be indexed is not tried again.
  const auto other = JpegIndexCache::KeyOf(Encode(8, 8, JpegColor::kGray, {90, true, true}));
  cache.Find(other, &build);
  cache.Find(other, &build);
  EXPECT_TRUE(build);
  cache.Put(other, nullptr);
  EXPECT_EQ(cache.Find(other, &build), nullptr);
  EXPECT_FALSE(build);
  EXPECT_EQ(cache.stats().unsupported, 1);
}

TEST(JpegIndexCacheTest, NothingIsRecordedPastTheBudget) {
  JpegIndexCache cache(200);  // room for a few sightings, no index
  bool build = false;
  int recorded = 0;
  for (uint64_t i = 0; i < 10; ++i) {
    const JpegIndexCache::Key k{i, i * 7};
    cache.Find(k, &build);
    cache.Find(k, &build);
    if (build) {
      ++recorded;
      auto index = std::make_shared<JpegIndex>();
      index->bit.resize(1000);  // 4 KB: over the budget
      cache.Put(k, index);
      EXPECT_EQ(cache.Find(k, &build), nullptr);
      EXPECT_FALSE(build);  // over budget: not asked again
    }
  }
  EXPECT_GT(recorded, 0);
  EXPECT_LT(recorded, 10);
  EXPECT_EQ(cache.stats().built, 0);
  EXPECT_LE(cache.stats().bytes, 200);
}

// The pipeline's output is the same bytes with and without indexes, and
// from the second sighting crops are decoded from spliced JPEGs.
TEST(JpegIndexPipelineTest, IndexedDecodesGiveTheSameBytes) {
  std::vector<std::vector<uint8_t>> jpegs = testing_util::SyntheticJpegCorpus(4);
  for (auto& j : testing_util::SyntheticJpegCorpus(2, 4, {90, false, false})) jpegs.push_back(j);
  jpegs.push_back(Encode(300, 200, JpegColor::kGray, {90, true, false}));
  jpegs.push_back(Encode(120, 90, JpegColor::kCmyk, {90, false, false}));
  jpegs.push_back(Encode(200, 150, JpegColor::kRgb, {90, true, true}));  // progressive
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(variant);
    ImageOptions o;
    o.height = o.width = variant == 3 ? 160 : 64;  // 160: decoded at full scale
    o.crop = variant == 1 ? CropMode::kCenter : CropMode::kRandomResized;
    o.fast_upsample = variant == 2;
    // 4: libjpeg's Huffman decoder reads a spliced JPEG (Splice).
    o.fast_huffman = variant != 4;
    auto cache = std::make_shared<JpegIndexCache>(int64_t{64} << 20);
    auto with = ImagePipeline::Create(o, cache);
    // The reference: no index, libjpeg's Huffman decoder.
    o.fast_huffman = false;
    auto without = ImagePipeline::Create(o, nullptr);
    ASSERT_TRUE(with.ok() && without.ok());
    std::vector<uint8_t> a((*with)->output_bytes()), b(a.size());
    int indexed = 0;
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t j = 0; j < jpegs.size(); ++j) {
        for (uint64_t key = 0; key < 6; ++key) {
          const uint64_t k = key * 31 + pass * 1000 + j;
          ASSERT_TRUE((*with)->Run(jpegs[j], k, a).ok());
          const bool was_indexed = (*with)->last().indexed;
          ASSERT_TRUE((*without)->Run(jpegs[j], k, b).ok());
          ASSERT_FALSE((*without)->last().indexed);
          ASSERT_EQ(a, b) << "image " << j << " key " << k << " pass " << pass;
          if (pass == 0 && key == 0) {
            EXPECT_FALSE(was_indexed) << "first sighting";
          }
          if (j == jpegs.size() - 1) {
            EXPECT_FALSE(was_indexed) << "progressive";
          }
          indexed += was_indexed;
        }
      }
    }
    EXPECT_GT(indexed, 0);
    EXPECT_EQ(cache->stats().unsupported, 1);  // the progressive one
    EXPECT_EQ(cache->stats().built, static_cast<int64_t>(jpegs.size()) - 1);
  }
}

}  // namespace
}  // namespace flywheel::loader

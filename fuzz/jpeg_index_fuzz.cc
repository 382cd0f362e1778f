// Fuzzes JPEG entropy indexes (flywheel/loader/transforms/jpeg_index.h):
// BuildJpegIndex and JpegSplicer::StartScan (flywheel's Huffman decoder)
// on arbitrary bytes, then splices of rectangles chosen by the input,
// decoded by DecodeMcu and by the image pipeline.
//
// Beyond "no crash": an index error is DataLoss or Unimplemented with a
// message; a built index is consistent (sizes match the MCU grid, MCU
// offsets strictly increase); a splice of a rectangle inside the grid
// succeeds or is Unimplemented, and one outside it is InvalidArgument;
// a spliced JPEG has the rectangle's size in its header; every MCU of a
// rectangle decodes with DecodeMcu, and none past it.
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "flywheel/loader/transforms/image.h"
#include "flywheel/loader/transforms/jpeg_index.h"

namespace {

using flywheel::loader::BuildJpegIndex;
using flywheel::loader::ImageOptions;
using flywheel::loader::ImagePipeline;
using flywheel::loader::JpegSplicer;
using flywheel::loader::McuRect;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static JpegSplicer splicer;
  static std::unique_ptr<ImagePipeline> pipeline = [] {
    ImageOptions o;
    o.crop = flywheel::loader::CropMode::kFull;
    o.height = o.width = 8;
    o.max_pixels = int64_t{1} << 22;
    o.index_cache_mb = 0;
    return ImagePipeline::Create(o).value();
  }();
  const std::span<const uint8_t> jpeg(data, size);
  auto index = BuildJpegIndex(jpeg);
  // Sequential decoding of arbitrary bytes: refused, or every DecodeMcu
  // call returns (true or false) without reading outside the buffers.
  if (splicer.StartScan(jpeg).ok()) {
    std::vector<int16_t> blocks(10 * 64);
    std::vector<int16_t*> ptrs;
    for (int b = 0; b < 10; ++b) ptrs.push_back(&blocks[static_cast<size_t>(b) * 64]);
    for (int m = 0; m < 4096 && splicer.DecodeMcu(ptrs.data()); ++m) {
      std::fill(blocks.begin(), blocks.end(), 0);
    }
  }
  if (!index.ok()) {
    Check(index.status().code() == absl::StatusCode::kDataLoss ||
          index.status().code() == absl::StatusCode::kUnimplemented);
    Check(!index.status().message().empty());
    return 0;
  }
  const auto& ix = *index;
  // The same bytes decoded whole, in order, without the index: every MCU
  // decodes and none past the last.
  {
    Check(splicer.StartScan(jpeg).ok());
    const int n = splicer.blocks_per_mcu();
    std::vector<int16_t> blocks(static_cast<size_t>(n) * 64);
    std::vector<int16_t*> ptrs;
    for (int b = 0; b < n; ++b) ptrs.push_back(&blocks[static_cast<size_t>(b) * 64]);
    for (int64_t m = 0; m < int64_t{ix.mcus_x} * ix.mcus_y; ++m) {
      std::fill(blocks.begin(), blocks.end(), 0);
      Check(splicer.DecodeMcu(m % 2 ? nullptr : ptrs.data()));
    }
    Check(!splicer.DecodeMcu(nullptr));
  }
  Check(ix.mcus_x >= 1 && ix.mcus_y >= 1 && ix.components >= 1 && ix.components <= 4);
  const size_t mcus = static_cast<size_t>(ix.mcus_x) * ix.mcus_y;
  Check(ix.bit.size() == mcus + 1);
  Check(ix.dc.size() == (mcus + 1) * ix.components);
  Check(ix.component_start.size() == mcus * (ix.components - 1));
  Check(ix.row_raw.size() == static_cast<size_t>(ix.mcus_y));
  for (size_t i = 0; i < mcus; ++i) Check(ix.bit[i] < ix.bit[i + 1]);

  // Rectangles from the input's last bytes (and one outside the grid).
  uint8_t r[8] = {};
  std::memcpy(r, data + size - std::min<size_t>(size, 8), std::min<size_t>(size, 8));
  for (int k = 0; k < 2; ++k) {
    McuRect rect;
    rect.x0 = r[4 * k] % ix.mcus_x;
    rect.y0 = r[4 * k + 1] % ix.mcus_y;
    rect.x1 = rect.x0 + 1 + r[4 * k + 2] % (ix.mcus_x - rect.x0);
    rect.y1 = rect.y0 + 1 + r[4 * k + 3] % (ix.mcus_y - rect.y0);
    // Decoding the rectangle's MCUs directly: every one decodes (the index
    // was built from these bytes), and nothing past them.
    auto headers = splicer.SpliceHeaders(jpeg, ix, rect);
    if (headers.ok()) {
      const int n = splicer.blocks_per_mcu();
      Check(n >= 1 && n <= 10);
      std::vector<int16_t> blocks(static_cast<size_t>(n) * 64);
      std::vector<int16_t*> ptrs;
      for (int b = 0; b < n; ++b) ptrs.push_back(&blocks[static_cast<size_t>(b) * 64]);
      const int64_t count = int64_t{rect.x1 - rect.x0} * (rect.y1 - rect.y0);
      for (int64_t m = 0; m < count; ++m) {
        std::fill(blocks.begin(), blocks.end(), 0);
        Check(splicer.DecodeMcu(m % 3 == 2 ? nullptr : ptrs.data()));
      }
      Check(!splicer.DecodeMcu(ptrs.data()));
    } else {
      Check(headers.status().code() == absl::StatusCode::kUnimplemented);
    }
    auto spliced = splicer.Splice(jpeg, ix, rect);
    if (!spliced.ok()) {
      Check(spliced.status().code() == absl::StatusCode::kUnimplemented);
      continue;
    }
    std::vector<uint8_t> out(pipeline->output_bytes());
    if (pipeline->Run(*spliced, 0, out).ok()) {
      const int w = rect.x1 == ix.mcus_x ? ix.width - rect.x0 * ix.mcu_width
                                         : (rect.x1 - rect.x0) * ix.mcu_width;
      const int h = rect.y1 == ix.mcus_y ? ix.height - rect.y0 * ix.mcu_height
                                         : (rect.y1 - rect.y0) * ix.mcu_height;
      Check(pipeline->last().info.width == w && pipeline->last().info.height == h);
    }
  }
  Check(splicer.Splice(jpeg, ix, {0, 0, ix.mcus_x + 1, 1}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  return 0;
}

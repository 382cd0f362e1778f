// Entropy indexes for baseline JPEGs: decode a crop without Huffman-decoding
// the rest of the image.
//
// A JPEG's Huffman-coded data can only be read front to back: to reach the
// 8x8 blocks under a crop, a decoder must first decode every block before
// them. That is most of a decode's cost (for a ~256 px photo at quality 90,
// about two thirds). A JpegIndex records, once per image, where each MCU
// (the minimum coded unit: 16x16 pixels for 4:2:0) starts in the entropy-coded
// data and the DC predictors at that point. From it, a JpegSplicer serves a
// rectangle of MCUs two ways:
//  - SpliceHeaders + DecodeMcu: the headers of a JPEG of the rectangle's
//    size for libjpeg, and the rectangle's coefficients decoded straight
//    from the original's bytes, MCU by MCU, for libjpeg's entropy decoder
//    hook (image.cc). This is what the image pipeline uses.
//  - Splice: a standalone, valid JPEG of the rectangle: the bits of those
//    MCUs copied, the first DC difference of each row re-coded against its
//    new predecessor, the frame size patched.
// Either way libjpeg-turbo decodes exactly the rectangle's pixels (they
// depend only on the blocks inside, except at the rectangle's edges when
// chroma is upsampled at full scale, which the caller avoids with a one-MCU
// margin; docs/transforms.md, "Entropy index").
//
// Supported: baseline or extended sequential Huffman JPEGs (SOF0/SOF1), 8
// bits, one scan holding every component (interleaved, or a single
// component), no restart markers. Anything else is Unimplemented and decoded
// the ordinary way. An index costs 4 + 2 * components + 2 * (components - 1)
// bytes per MCU (14 bytes for 4:2:0 colour: ~3.6 KB for a 256x256 image,
// about a tenth of its bytes at quality 90).
//
// Thread-safety: JpegIndex is immutable once built; a JpegSplicer is
// single-threaded; JpegIndexCache is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::loader {

struct JpegIndex {
  int width = 0;  // the frame's size in pixels
  int height = 0;
  int mcu_width = 0;  // pixels per MCU
  int mcu_height = 0;
  int mcus_x = 0;  // MCUs per row and rows of MCUs
  int mcus_y = 0;
  int components = 0;  // in the scan
  // bit[i]: offset of MCU i (raster order) in the entropy-coded data with
  // its stuffed zero bytes removed; bit[mcus_x * mcus_y] is the end of the
  // last MCU.
  std::vector<uint32_t> bit;
  // dc[i * components + c]: component c's DC predictor before MCU i (and,
  // for i = mcus_x * mcus_y, after the last MCU).
  std::vector<int16_t> dc;
  // component_start[i * (components - 1) + c - 1]: where component c's
  // first block starts in MCU i, in bits from the MCU's start.
  std::vector<uint16_t> component_start;
  // row_raw[y]: offset, in the scan's bytes as stored (with stuffing), of
  // the byte holding the first bit of MCU row y.
  std::vector<uint32_t> row_raw;
  uint32_t entropy_bytes = 0;  // the scan's length as stored

  // Heap bytes held.
  size_t bytes() const {
    return (bit.size() + row_raw.size()) * sizeof(uint32_t) + dc.size() * sizeof(int16_t) +
           component_start.size() * sizeof(uint16_t);
  }
};

// Reads `jpeg` once, Huffman-decoding every block, and records where each
// MCU starts. Unimplemented for JPEGs outside the supported subset (above);
// DataLoss for corrupt ones (a bad Huffman code, data ending inside an MCU,
// bytes left over after the last MCU).
Result<JpegIndex> BuildJpegIndex(std::span<const uint8_t> jpeg);

// A rectangle of MCUs: columns [x0, x1), rows [y0, y1).
struct McuRect {
  int x0 = 0;
  int y0 = 0;
  int x1 = 0;
  int y1 = 0;
};

// Writes JPEGs holding a rectangle of another JPEG's MCUs. Keeps its buffers
// (and the Huffman tables of the last header it saw) across calls.
class JpegSplicer {
 public:
  JpegSplicer();
  ~JpegSplicer();
  JpegSplicer(const JpegSplicer&) = delete;
  JpegSplicer& operator=(const JpegSplicer&) = delete;

  // A JPEG of the MCUs in `rect` of `jpeg`: (x1 - x0) * mcu_width pixels
  // wide (up to the image's right edge when x1 = mcus_x), likewise high.
  // The span stays valid until the next call. REQUIRES: `index` was built
  // from these bytes. InvalidArgument for a rectangle outside the grid or
  // empty; Unimplemented when a re-coded DC difference has no code in the
  // image's DC table (an optimized table without that size).
  Result<std::span<const uint8_t>> Splice(std::span<const uint8_t> jpeg, const JpegIndex& index,
                                          McuRect rect);

  // The rectangle for a decoder that takes its coefficients from DecodeMcu
  // instead of from coded data: the headers of a JPEG of the rectangle's
  // size (as Splice) whose scan is empty, then EOI. The span stays valid
  // until the next call. Errors as Splice.
  Result<std::span<const uint8_t>> SpliceHeaders(std::span<const uint8_t> jpeg,
                                                 const JpegIndex& index, McuRect rect);
  // After SpliceHeaders (or StartScan): decodes the rectangle's next MCU
  // (raster order over the rectangle) as libjpeg's Huffman decoder does:
  // each block's 64 quantized coefficients in natural order into
  // blocks[0 .. blocks_per_mcu()), which must be zero on entry. With
  // `blocks` null the MCU is decoded and dropped. false past the
  // rectangle's last MCU, on a bad code (an index that does not match the
  // bytes), and after Splice or any failure; reads stay inside the buffers
  // either way. Splice, SpliceHeaders and StartScan each end what the
  // previous call started.
  bool DecodeMcu(int16_t* const* blocks);
  // Instead of a rectangle, DecodeMcu decodes the JPEG's whole scan in
  // order from its start, without an index (the faster Huffman decoder
  // for any JPEG in the supported subset). Unimplemented / DataLoss as
  // BuildJpegIndex for JPEGs outside the subset or with a malformed
  // layout; corrupt coded data shows as DecodeMcu returning false, also
  // when bytes are left over after the last MCU.
  // With `record`, the scan's index is recorded as its MCUs are decoded;
  // FinishIndex decodes (and drops) the MCUs left and returns it, so an
  // image decoded for its crop is indexed in the same pass.
  Status StartScan(std::span<const uint8_t> jpeg, bool record = false);
  // After StartScan(jpeg, true) and any number of DecodeMcu calls: the
  // index (BuildJpegIndex's result), or DataLoss as BuildJpegIndex;
  // FailedPrecondition when no recording is under way (none started, or
  // another call ended it).
  Result<JpegIndex> FinishIndex();
  int blocks_per_mcu() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Indexes shared by every pipeline in the process, keyed by a 128-bit hash
// of the JPEG's bytes, within a byte budget. An image is indexed the second
// time it is seen (the first sighting only records its hash), so a single
// pass over a dataset never pays for indexing; once the budget is spent, no
// more images are recorded.
class JpegIndexCache {
 public:
  explicit JpegIndexCache(int64_t budget_bytes);
  ~JpegIndexCache();
  JpegIndexCache(const JpegIndexCache&) = delete;
  JpegIndexCache& operator=(const JpegIndexCache&) = delete;

  // The process-wide cache; its budget is the largest one asked for.
  static std::shared_ptr<JpegIndexCache> Shared(int64_t budget_bytes);

  struct Key {
    uint64_t lo = 0;
    uint64_t hi = 0;
    friend bool operator==(const Key&, const Key&) = default;
  };
  static Key KeyOf(std::span<const uint8_t> jpeg);

  // The index for these bytes, or null. With `build_now` (may be null): set
  // to true when the caller should build the index and Put it (the second
  // sighting), false otherwise.
  std::shared_ptr<const JpegIndex> Find(const Key& key, bool* build_now);
  // Stores a built index, or (null) that the image cannot be indexed, so it
  // is not tried again.
  void Put(const Key& key, std::shared_ptr<const JpegIndex> index);

  struct Stats {
    int64_t hits = 0;         // Find returned an index
    int64_t built = 0;        // indexes stored
    int64_t unsupported = 0;  // images that cannot be indexed
    int64_t entries = 0;      // images recorded (seen, indexed or unsupported)
    int64_t bytes = 0;        // of the budget used
    int64_t budget = 0;
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::loader

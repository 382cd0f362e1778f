// The JPEG pipeline (image.h). Semantics: docs/transforms.md.
#include "flywheel/loader/transforms/image.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// For struct jpeg_entropy_decoder: with fast_huffman, flywheel's Huffman
// decoder stands in for libjpeg's (DecodeMcuFromSplicer). Installed with
// jpeglib.h by libjpeg62-turbo-dev; the struct is unchanged since libjpeg 6b.
#include <jpegint.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"
#include "flywheel/loader/transforms/jpeg_index.h"

namespace flywheel::loader {
namespace {

// Salts that separate the crop's and the flip's random streams, so changing
// flip_probability never moves a crop (and vice versa).
constexpr uint64_t kCropSalt = 0x6372'6f70'0000'0001ULL;  // "crop"
constexpr uint64_t kFlipSalt = 0x666c'6970'0000'0002ULL;  // "flip"

constexpr int kMaxSide = 16384;

// Bytes past the last decoded pixel that the resample may read (LoadPixel).
constexpr size_t kPixelSlack = 4;

typedef float V4f __attribute__((vector_size(16)));

// The RGB pixel at p as floats (lane 3 holds p[3], which callers ignore).
inline V4f LoadPixel(const uint8_t* p) {
#if defined(__SSE2__)
  int32_t word;
  std::memcpy(&word, p, sizeof(word));
  const __m128i zero = _mm_setzero_si128();
  const __m128i bytes = _mm_cvtsi32_si128(word);
  const __m128i ints = _mm_unpacklo_epi16(_mm_unpacklo_epi8(bytes, zero), zero);
  return reinterpret_cast<V4f>(_mm_cvtepi32_ps(ints));
#else
  return V4f{static_cast<float>(p[0]), static_cast<float>(p[1]), static_cast<float>(p[2]),
             static_cast<float>(p[3])};
#endif
}

int RoundToInt(double v) { return static_cast<int>(std::lround(v)); }

// A grow-only buffer: reused across images, never zero-filled (every byte
// handed out is written before it is read).
template <typename T>
class Scratch {
 public:
  T* Get(size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<T[]>(n);
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

// Resampling taps for one output axis: output i reads source samples
// [start[i], start[i] + count[i]) with weights w[i * stride + k].
struct Taps {
  std::vector<int> start;
  std::vector<int> count;
  std::vector<float> w;
  int stride = 0;
};

// A triangle (bilinear) filter whose radius is max(1, source pixels per
// output pixel): plain bilinear interpolation when enlarging, an
// antialiasing tent when shrinking (PIL's BILINEAR; torchvision's
// antialias=True). Pixel centres are aligned (align_corners=False): output
// pixel i covers source [src0 + i * scale, src0 + (i + 1) * scale).
// Taps that fall outside [0, src_size) are dropped and the rest
// renormalized. The vectors keep their capacity across images.
void ComputeTaps(double src0, double src_len, int src_size, int out_size, Taps* t) {
  const double scale = src_len / out_size;
  const double support = std::max(scale, 1.0);
  t->stride = static_cast<int>(std::ceil(support)) * 2 + 2;
  t->start.resize(out_size);
  t->count.resize(out_size);
  t->w.resize(static_cast<size_t>(out_size) * t->stride);
  for (int i = 0; i < out_size; ++i) {
    const double center = src0 + (i + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support));
    int hi = static_cast<int>(std::ceil(center + support));
    lo = std::clamp(lo, 0, src_size - 1);
    hi = std::clamp(hi, lo + 1, src_size);
    hi = std::min(hi, lo + t->stride);
    float* w = &t->w[static_cast<size_t>(i) * t->stride];
    double sum = 0;
    for (int j = lo; j < hi; ++j) {
      const double d = std::abs((j + 0.5 - center) / support);
      const double v = d < 1.0 ? 1.0 - d : 0.0;
      w[j - lo] = static_cast<float>(v);
      sum += v;
    }
    if (sum <= 0) {
      // Only when the window holds no sample with positive weight (a crop
      // thinner than a pixel at the edge): take the nearest sample.
      const int nearest = std::clamp(static_cast<int>(std::floor(center)), 0, src_size - 1);
      lo = nearest;
      hi = nearest + 1;
      w[0] = 1.0f;
    } else {
      for (int j = lo; j < hi; ++j) w[j - lo] = static_cast<float>(w[j - lo] / sum);
      // Samples exactly at the filter's reach weigh 0: drop them from both
      // ends (they add nothing; fewer taps and a smaller decoded region).
      int skip = 0;
      while (hi - lo - skip > 1 && w[skip] == 0.0f) ++skip;
      if (skip > 0) {
        std::memmove(w, w + skip, static_cast<size_t>(hi - lo - skip) * sizeof(float));
        lo += skip;
      }
      while (hi - lo > 1 && w[hi - lo - 1] == 0.0f) --hi;
    }
    t->start[i] = lo;
    t->count[i] = hi - lo;
  }
}

const char* ColorspaceName(J_COLOR_SPACE cs) {
  switch (cs) {
    case JCS_RGB:
      return "rgb";
    case JCS_YCbCr:
      return "ycbcr";
    case JCS_GRAYSCALE:
      return "gray";
    case JCS_CMYK:
      return "cmyk";
    case JCS_YCCK:
      return "ycck";
    default:
      return nullptr;
  }
}

// Decode scales, smallest first (so the first large enough is the
// cheapest). Only the scales whose IDCT is fast: 1/8 (DC only), 1/4, 1/2
// (SIMD reduced IDCTs), 3/8. libjpeg-turbo 2.1's 5/8, 3/4 and 7/8 use plain C
// IDCTs and decode slower than full size with SIMD (measured: 7/8 at 0.65x,
// 3/4 and 5/8 at 0.87x the speed of 1/1; docs/transforms.md).
struct Scale {
  int num;
  int denom;
};
constexpr Scale kScales[] = {{1, 8}, {1, 4}, {3, 8}, {1, 2}, {1, 1}};

// libjpeg's output size for `size` at `s`: ceil(size * num / denom).
int Scaled(int size, Scale s) {
  return static_cast<int>((int64_t{size} * s.num + s.denom - 1) / s.denom);
}

// Progressive JPEGs with more scans than this are refused: each scan
// re-reads the whole coefficient buffer, so a small file with thousands of
// scans is a denial of service (TurboJPEG's TJFLAG_LIMITSCANS, same limit).
constexpr int kMaxScans = 500;

// libjpeg reports errors by calling error_exit, which must not return; ours
// records the message and longjmps back to the setjmp in the function that
// called libjpeg. Those functions hold no C++ objects with destructors
// across libjpeg calls, so the jump skips nothing that needs unwinding.
struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg casts cinfo->err to this
  std::jmp_buf jump;
  bool stop_on_warning = true;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// level < 0: a warning (corrupt data libjpeg can work around); >= 0: trace
// output, ignored. Nothing is ever printed.
void OnJpegMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  if (reinterpret_cast<JpegErrors*>(cinfo->err)->stop_on_warning) OnJpegError(cinfo);
  ++cinfo->err->num_warnings;
}

void OnJpegOutput(j_common_ptr) {}

void OnJpegProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number <= kMaxScans) return;
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  std::snprintf(e->message, sizeof(e->message), "progressive JPEG with more than %d scans",
                kMaxScans);
  std::longjmp(e->jump, 1);
}

// libjpeg's entropy decoder entry point with fast_huffman: the MCUs come
// from the JpegSplicer in client_data (the whole scan after StartScan, or an
// indexed rectangle after SpliceHeaders) instead of from the source manager.
// MCU_data null: decode and drop (jpeg_skip_scanlines).
boolean DecodeMcuFromSplicer(j_decompress_ptr cinfo, JBLOCKROW* mcu) {
  auto* splicer = static_cast<JpegSplicer*>(cinfo->client_data);
  int16_t* blocks[D_MAX_BLOCKS_IN_MCU];
  if (mcu != nullptr) {
    for (int b = 0; b < cinfo->blocks_in_MCU; ++b) blocks[b] = mcu[b][0];
  }
  if (!splicer->DecodeMcu(mcu != nullptr ? blocks : nullptr)) {
    cinfo->err->msg_code = JWRN_HUFF_BAD_CODE;  // "Corrupt JPEG data: bad Huffman code"
    (*cinfo->err->error_exit)(reinterpret_cast<j_common_ptr>(cinfo));
  }
  return TRUE;
}

class ImagePipelineImpl final : public ImagePipeline {
 public:
  ImagePipelineImpl(const ImageOptions& options, std::shared_ptr<JpegIndexCache> cache)
      : options_(options), cache_(options.crop_decode ? std::move(cache) : nullptr) {
    for (int c = 0; c < 3; ++c) {
      mul_[c] = 1.0f / (255.0f * options_.std[c]);
      add_[c] = -options_.mean[c] / options_.std[c];
    }
  }
  ~ImagePipelineImpl() override {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }

  // Creates the libjpeg decompressor. Internal if libjpeg cannot.
  Status Init() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = OnJpegError;
    err_.pub.emit_message = OnJpegMessage;
    err_.pub.output_message = OnJpegOutput;
    progress_.progress_monitor = OnJpegProgress;
    if (setjmp(err_.jump)) return absl::InternalError(JpegMessage("jpeg_create_decompress: "));
    jpeg_create_decompress(&cinfo_);
    created_ = true;
    return absl::OkStatus();
  }

  const ImageOptions& options() const override { return options_; }
  size_t output_bytes() const override { return options_.OutputBytes(); }
  const ImageTrace& last() const override { return last_; }

  Result<JpegInfo> ReadHeader(std::span<const uint8_t> jpeg) override {
    FW_ASSIGN_OR_RETURN(JpegInfo info, Header(jpeg));
    jpeg_abort_decompress(&cinfo_);
    return info;
  }

  Status Run(std::span<const uint8_t> jpeg, uint64_t key, std::span<uint8_t> dst) override {
    const size_t need = options_.OutputBytes();
    if (dst.size() < need) {
      return absl::InvalidArgumentError(
          absl::StrCat("destination holds ", dst.size(), " bytes, the image needs ", need));
    }
    if (options_.dtype == PixelType::kFloat32 &&
        reinterpret_cast<uintptr_t>(dst.data()) % alignof(float) != 0) {
      return absl::InvalidArgumentError("float32 destination is not 4-byte aligned");
    }
    // From here cinfo_ holds the parsed header; Decode ends the decompression.
    FW_ASSIGN_OR_RETURN(JpegInfo info, Header(jpeg));
    const int W = info.width, H = info.height;
    const CropBox crop = SampleCrop(H, W, key, options_);
    const bool flip = SampleFlip(key, options_);

    // The cheapest decode scale that leaves the crop at least output-sized.
    Scale scale{1, 1};
    if (options_.scaled_decode) {
      for (const Scale& s : kScales) {
        const double cw = static_cast<double>(crop.width) * Scaled(W, s) / W;
        const double ch = static_cast<double>(crop.height) * Scaled(H, s) / H;
        if (cw >= options_.width && ch >= options_.height) {
          scale = s;
          break;
        }
      }
    }
    const int sw = Scaled(W, scale), sh = Scaled(H, scale);

    // The crop in decoded coordinates (fractional when scaled).
    const double fx = static_cast<double>(sw) / W, fy = static_cast<double>(sh) / H;
    ComputeTaps(crop.x * fx, crop.width * fx, sw, options_.width, &xtaps_);
    ComputeTaps(crop.y * fy, crop.height * fy, sh, options_.height, &ytaps_);

    // The decoded pixels the taps read: with crop_decode, only these are
    // decoded (docs/transforms.md#steps).
    CropBox region{0, 0, sw, sh};
    if (options_.crop_decode) {
      const auto [x0, x1] = Span(xtaps_);
      const auto [y0, y1] = Span(ytaps_);
      // One column of margin on each side: jpeg_crop_scanline treats the
      // first and last decoded columns as image edges when it upsamples
      // chroma, so they must not be columns the taps read (unless they are
      // the image's own edges, which a full decode treats the same way).
      region.x = std::max(0, x0 - 1);
      region.width = std::min(sw, x1 + 1) - region.x;
      region.y = y0;
      region.height = y1 - y0;
    }
    const bool cmyk = info.colorspace == "cmyk" || info.colorspace == "ycck";
    const uint8_t* decoded = nullptr;
    JpegIndexCache::Key image_key;
    bool record = false;  // index the image while decoding it
    const bool indexed = DecodeIndexed(jpeg, scale, cmyk, &region, &decoded, &image_key, &record);
    if (!indexed) {
      // flywheel's Huffman decoder for JPEGs it supports; libjpeg's for the
      // rest, and again (for its error message) for any it fails on.
      const CropBox asked = region;
      const bool fast = options_.fast_huffman && splicer_.StartScan(jpeg, record).ok();
      decoded = Decode(scale, sw, sh, cmyk, &region, /*from_splicer=*/fast);
      if (record) {
        // The MCUs below the crop are decoded (and dropped) to finish it.
        Result<JpegIndex> built = fast && decoded != nullptr
                                      ? splicer_.FinishIndex()
                                      : Result<JpegIndex>(absl::UnimplementedError("not indexable"));
        cache_->Put(image_key,
                    built.ok() ? std::make_shared<const JpegIndex>(*std::move(built)) : nullptr);
      }
      if (decoded == nullptr && fast && ParseHeader(jpeg)) {
        region = asked;
        decoded = Decode(scale, sw, sh, cmyk, &region);
      }
    }
    if (decoded == nullptr) {
      return absl::DataLossError(absl::StrCat("corrupt JPEG (", W, "x", H, " ", info.colorspace,
                                              ", ", jpeg.size(), " bytes): ", err_.message));
    }
    const uint8_t* rgb = decoded;
    if (cmyk) rgb = CmykToRgb(decoded, static_cast<size_t>(region.width) * region.height);
    Resample(rgb, region, flip, dst.data());

    last_ = ImageTrace{std::move(info), crop, flip, scale.num, scale.denom, sw, sh, region, indexed};
    return absl::OkStatus();
  }

 private:
  std::string JpegMessage(std::string_view prefix) const {
    return absl::StrCat(AsAbsl(prefix), err_.message);
  }

  // [min start, max end) of the source samples the taps read.
  static std::pair<int, int> Span(const Taps& t) {
    int lo = t.start[0], hi = t.start[0] + t.count[0];
    for (size_t i = 1; i < t.start.size(); ++i) {
      lo = std::min(lo, t.start[i]);
      hi = std::max(hi, t.start[i] + t.count[i]);
    }
    return {lo, hi};
  }

  // Parses the header into cinfo_ and checks it. On success cinfo_ is
  // mid-decompression (the caller aborts or decodes); on error it is reset.
  Result<JpegInfo> Header(std::span<const uint8_t> jpeg) {
    if (jpeg.empty()) return absl::InvalidArgumentError("empty JPEG (0 bytes)");
    if (!ParseHeader(jpeg)) {
      return absl::DataLossError(absl::StrCat("not a decodable JPEG (", jpeg.size(),
                                              " bytes): bad header: ", err_.message));
    }
    const int64_t w = cinfo_.image_width, h = cinfo_.image_height;
    const char* name = ColorspaceName(cinfo_.jpeg_color_space);
    Status bad;
    if (name == nullptr) {
      bad = absl::DataLossError(absl::StrCat("JPEG header: unknown colorspace ",
                                             static_cast<int>(cinfo_.jpeg_color_space), " (",
                                             cinfo_.num_components, " components)"));
    } else if (w <= 0 || h <= 0) {
      bad = absl::DataLossError(absl::StrCat("JPEG header declares ", w, "x", h, " pixels"));
    } else if (w * h > options_.max_pixels) {
      bad = absl::InvalidArgumentError(absl::StrCat("JPEG header declares ", w, "x", h, " = ",
                                                    w * h, " pixels, above max_pixels ",
                                                    options_.max_pixels));
    }
    if (!bad.ok()) {
      jpeg_abort_decompress(&cinfo_);
      return bad;
    }
    return JpegInfo{static_cast<int>(w), static_cast<int>(h), name};
  }

  // With an index for `jpeg`: decodes only the MCUs under *region (from
  // SpliceHeaders' JPEG and DecodeMcu, or without fast_huffman a spliced
  // JPEG). Returns false (cinfo_ still holding `jpeg`'s header) when it did
  // not; true when it did, with *decoded and *region as Decode sets them.
  // REQUIRES: cinfo_ holds `jpeg`'s parsed header.
  // With fast_huffman, an image to index now (its second sighting) is not
  // indexed here: *record is set and the caller records the index while
  // decoding the image (JpegSplicer::StartScan).
  bool DecodeIndexed(std::span<const uint8_t> jpeg, Scale scale, bool cmyk, CropBox* region,
                     const uint8_t** decoded, JpegIndexCache::Key* key_out, bool* record) {
    if (cache_ == nullptr) return false;
    const JpegIndexCache::Key key = JpegIndexCache::KeyOf(jpeg);
    bool build = false;
    std::shared_ptr<const JpegIndex> index = cache_->Find(key, &build);
    if (index == nullptr && build && options_.fast_huffman) {
      *key_out = key;
      *record = true;
      return false;
    }
    if (index == nullptr && build) {
      Result<JpegIndex> built = BuildJpegIndex(jpeg);
      if (built.ok()) index = std::make_shared<const JpegIndex>(*std::move(built));
      cache_->Put(key, index);
    }
    if (index == nullptr) return false;
    // MCUs are whole blocks at every decode scale: dx x dy decoded pixels.
    const int nx = index->mcu_width * scale.num, ny = index->mcu_height * scale.num;
    if (nx % scale.denom != 0 || ny % scale.denom != 0) return false;
    const int dx = nx / scale.denom, dy = ny / scale.denom;
    McuRect rect{region->x / dx, region->y / dy,
                 std::min(index->mcus_x, (region->x + region->width + dx - 1) / dx),
                 std::min(index->mcus_y, (region->y + region->height + dy - 1) / dy)};
    if (scale.num == scale.denom) {
      // At full scale chroma is upsampled from neighbouring samples, and the
      // spliced JPEG's edges are image edges: keep a pixel between them and
      // the region (one more MCU), unless they are the image's own edges.
      if (rect.x0 > 0 && region->x - rect.x0 * dx < 1) --rect.x0;
      if (rect.y0 > 0 && region->y - rect.y0 * dy < 1) --rect.y0;
      if (rect.x1 < index->mcus_x && rect.x1 * dx - (region->x + region->width) < 1) ++rect.x1;
      if (rect.y1 < index->mcus_y && rect.y1 * dy - (region->y + region->height) < 1) ++rect.y1;
    }
    if (rect.x0 == 0 && rect.y0 == 0 && rect.x1 == index->mcus_x && rect.y1 == index->mcus_y) {
      return false;  // the whole image: nothing to skip
    }
    // With fast_huffman, the rectangle's headers only (DecodeMcuFromSplicer
    // feeds libjpeg the coefficients); else a JPEG of the rectangle.
    Result<std::span<const uint8_t>> spliced = options_.fast_huffman
                                                   ? splicer_.SpliceHeaders(jpeg, *index, rect)
                                                   : splicer_.Splice(jpeg, *index, rect);
    if (!spliced.ok()) return false;
    jpeg_abort_decompress(&cinfo_);
    CropBox r = *region;
    r.x -= rect.x0 * dx;
    r.y -= rect.y0 * dy;
    const uint8_t* out = nullptr;
    if (ParseHeader(*spliced)) {
      out = Decode(scale, Scaled(static_cast<int>(cinfo_.image_width), scale),
                   Scaled(static_cast<int>(cinfo_.image_height), scale), cmyk, &r,
                   /*from_splicer=*/options_.fast_huffman);
    }
    if (out == nullptr) {
      // Not expected for an image that indexed cleanly; decode it the
      // ordinary way so errors read as they always have.
      if (ParseHeader(jpeg)) return false;
      *decoded = nullptr;  // cannot happen: the header parsed before
      return true;
    }
    r.x += rect.x0 * dx;
    r.y += rect.y0 * dy;
    *region = r;
    *decoded = out;
    return true;
  }

  // false (message in err_) on error, with cinfo_ reset.
  bool ParseHeader(std::span<const uint8_t> jpeg) {
    err_.stop_on_warning = !options_.allow_warnings;
    if (setjmp(err_.jump)) {
      jpeg_abort_decompress(&cinfo_);
      return false;
    }
    jpeg_mem_src(&cinfo_, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&cinfo_, TRUE);
    return true;
  }

  // REQUIRES: cinfo_ holds a parsed header (Header succeeded).
  // Decodes rows [r->y, r->y + r->height) and at least columns
  // [r->x, r->x + r->width) of the image at `scale` (sw x sh pixels), RGB
  // or (cmyk) CMYK. libjpeg widens the columns to iMCU boundaries; *r is
  // updated to the region actually decoded, which the returned buffer holds
  // row by row. Rows below the region are not read: the decompression is
  // aborted there (or finished, reading up to EOI, when the region reaches
  // the last row). Returns nullptr (message in err_) on error. Either way
  // cinfo_ is ready for the next image.
  // With `from_splicer`, the MCUs come from splicer_ (set up by StartScan
  // for the JPEG in cinfo_, or by SpliceHeaders for the headers in cinfo_).
  const uint8_t* Decode(Scale scale, int sw, int sh, bool cmyk, CropBox* r,
                        bool from_splicer = false) {
    if (setjmp(err_.jump)) {
      jpeg_abort_decompress(&cinfo_);
      return nullptr;
    }
    cinfo_.scale_num = scale.num;
    cinfo_.scale_denom = scale.denom;
    cinfo_.dct_method = options_.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    cinfo_.do_fancy_upsampling = options_.fast_upsample ? FALSE : TRUE;
    cinfo_.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo_.progress = &progress_;
    jpeg_start_decompress(&cinfo_);
    if (static_cast<int>(cinfo_.output_width) != sw ||
        static_cast<int>(cinfo_.output_height) != sh ||
        cinfo_.output_components != (cmyk ? 4 : 3)) {
      std::snprintf(err_.message, sizeof(err_.message),
                    "libjpeg decodes %ux%u x %d, expected %dx%d", cinfo_.output_width,
                    cinfo_.output_height, cinfo_.output_components, sw, sh);
      jpeg_abort_decompress(&cinfo_);
      return nullptr;
    }
    if (from_splicer) {
      if (cinfo_.entropy == nullptr || cinfo_.progressive_mode ||
          cinfo_.blocks_in_MCU != splicer_.blocks_per_mcu()) {
        std::snprintf(err_.message, sizeof(err_.message),
                      "libjpeg's MCU (%d blocks) is not the index's (%d)", cinfo_.blocks_in_MCU,
                      splicer_.blocks_per_mcu());
        jpeg_abort_decompress(&cinfo_);
        return nullptr;
      }
      cinfo_.client_data = &splicer_;
      cinfo_.entropy->decode_mcu = DecodeMcuFromSplicer;
    }
    if (r->width < sw && options_.fast_upsample) {
      // libjpeg-turbo 2.1's merged upsampler (fast_upsample) does not honour
      // jpeg_crop_scanline: it reads chroma samples the cropped IDCT never
      // wrote (uninitialised memory, found by valgrind). Decode whole rows.
      r->x = 0;
      r->width = sw;
    } else if (r->width < sw) {
      JDIMENSION x = static_cast<JDIMENSION>(r->x), width = static_cast<JDIMENSION>(r->width);
      jpeg_crop_scanline(&cinfo_, &x, &width);
      r->x = static_cast<int>(x);
      r->width = static_cast<int>(width);
    }
    const size_t stride = static_cast<size_t>(cinfo_.output_width) * cinfo_.output_components;
    // kPixelSlack: the resample reads each pixel as 4 bytes (RGB + the next
    // byte), so the last pixel's fourth byte must be inside the buffer.
    uint8_t* out = decoded_.Get(stride * r->height + kPixelSlack);
    JSAMPROW* rows = row_pointers_.Get(r->height);
    for (int i = 0; i < r->height; ++i) rows[i] = out + stride * i;
    const JDIMENSION first = static_cast<JDIMENSION>(r->y);
    const JDIMENSION end = first + static_cast<JDIMENSION>(r->height);
    if (first > 0 && jpeg_skip_scanlines(&cinfo_, first) != first) {
      std::snprintf(err_.message, sizeof(err_.message), "could not skip to row %u", first);
      jpeg_abort_decompress(&cinfo_);
      return nullptr;
    }
    while (cinfo_.output_scanline < end) {
      const JDIMENSION at = cinfo_.output_scanline;
      if (jpeg_read_scanlines(&cinfo_, rows + (at - first), end - at) == 0) {
        std::snprintf(err_.message, sizeof(err_.message), "no progress at row %u", at);
        jpeg_abort_decompress(&cinfo_);
        return nullptr;
      }
    }
    if (cinfo_.output_scanline == cinfo_.output_height && !from_splicer) {
      jpeg_finish_decompress(&cinfo_);
    } else {
      jpeg_abort_decompress(&cinfo_);
    }
    return out;
  }

  // libjpeg(-turbo) hands CMYK/YCCK out as stored; JPEGs from Adobe
  // software (nearly all CMYK JPEGs) store inverted CMYK (255 = no ink), the
  // convention libjpeg-turbo's own tools use: R = C * K / 255, etc.
  const uint8_t* CmykToRgb(const uint8_t* cmyk, size_t pixels) {
    uint8_t* out = rgb_.Get(pixels * 3 + kPixelSlack);
    for (size_t i = 0; i < pixels; ++i) {
      const unsigned k = cmyk[4 * i + 3];
      for (int c = 0; c < 3; ++c) {
        out[3 * i + c] = static_cast<uint8_t>((cmyk[4 * i + c] * k + 127) / 255);
      }
    }
    return out;
  }

  // Separable resample: horizontal pass over the source rows the vertical
  // taps need into a float scratch, then the vertical pass writes the output.
  // `src` holds `region` of the decoded image (RGB, region.width pixels a
  // row); the taps are in decoded-image coordinates and lie inside it.
  void Resample(const uint8_t* src, const CropBox& region, bool flip, uint8_t* dst) {
    const int ow = options_.width, oh = options_.height;
    const int y0 = ytaps_.start[0];
    const int y1 = ytaps_.start[oh - 1] + ytaps_.count[oh - 1];
    const size_t src_stride = static_cast<size_t>(region.width) * 3;
    float* rows = rows_.Get(static_cast<size_t>(y1 - y0) * ow * 3 + 1);
    // Every output pixel reads the same number of source pixels (`len`, the
    // widest tap window; narrower ones padded with zero weights and shifted
    // inside the region), so the tap loop's trip count never changes within
    // an image and its exit is always predicted. A zero weight adds exactly
    // 0: the sums are unchanged.
    int len = 0;
    for (int x = 0; x < ow; ++x) len = std::max(len, xtaps_.count[x]);
    len = std::min(len, region.width);
    int* hstart = hstart_.Get(ow);
    float* hw = hw_.Get(static_cast<size_t>(ow) * len);
    for (int x = 0; x < ow; ++x) {
      const int start = xtaps_.start[x] - region.x;
      const int at = std::min(start, region.width - len);
      float* w = hw + static_cast<size_t>(x) * len;
      std::fill(w, w + len, 0.0f);
      std::copy_n(&xtaps_.w[static_cast<size_t>(x) * xtaps_.stride], xtaps_.count[x],
                  w + (start - at));
      hstart[x] = at * 3;
    }
    // One 4-lane accumulator per output pixel: lanes 0-2 are R, G, B, lane 3
    // (the next pixel's first byte) is dropped; each tap is one 4-byte load,
    // one conversion and one multiply-add for all three channels.
    for (int y = y0; y < y1; ++y) {
      const uint8_t* s = src + static_cast<size_t>(y - region.y) * src_stride;
      float* r = rows + static_cast<size_t>(y - y0) * ow * 3;
      const float* w = hw;
      for (int x = 0; x < ow; ++x, w += len) {
        const uint8_t* p = s + hstart[x];
        V4f a = w[0] * LoadPixel(p);
        for (int k = 1; k < len; ++k) a += w[k] * LoadPixel(p + 3 * k);
        // Writes 4 floats; the 4th is overwritten by the next pixel (rows_
        // has one float of slack for the last).
        std::memcpy(r + 3 * x, &a, sizeof(a));
      }
    }
    const bool chw = options_.layout == ImageLayout::kCHW;
    if (options_.dtype == PixelType::kUint8) {
      if (chw) {
        Vertical<true, false>(rows, y0, flip, dst);
      } else {
        Vertical<false, false>(rows, y0, flip, dst);
      }
    } else if (chw) {
      Vertical<true, true>(rows, y0, flip, dst);
    } else {
      Vertical<false, true>(rows, y0, flip, dst);
    }
  }

  static void AccumulateRow(float* __restrict acc, const float* __restrict row, float w, int n, bool first) {
    if (first) {
      for (int i = 0; i < n; ++i) acc[i] = w * row[i];
    } else {
      for (int i = 0; i < n; ++i) acc[i] += w * row[i];
    }
  }

  template <bool kChw, bool kFloat>
  void Vertical(const float* rows, int y0, bool flip, uint8_t* dst) {
    const int ow = options_.width, oh = options_.height;
    const size_t plane = static_cast<size_t>(ow) * oh;
    float* acc = acc_.Get(static_cast<size_t>(ow) * 3);
    for (int y = 0; y < oh; ++y) {
      const float* w = &ytaps_.w[static_cast<size_t>(y) * ytaps_.stride];
      const float* r = rows + static_cast<size_t>(ytaps_.start[y] - y0) * ow * 3;
      // acc = sum_k w[k] * row k: the rows and acc never overlap
      // (__restrict lets the compiler use vector instructions).
      const int n3 = ow * 3;
      AccumulateRow(acc, r, w[0], n3, /*first=*/true);
      for (int k = 1, n = ytaps_.count[y]; k < n; ++k) {
        AccumulateRow(acc, r + static_cast<size_t>(k) * n3, w[k], n3, /*first=*/false);
      }
      for (int x = 0; x < ow; ++x) {
        const int ox = flip ? ow - 1 - x : x;
        for (int c = 0; c < 3; ++c) {
          const float v = acc[3 * x + c];
          const size_t at = kChw ? c * plane + static_cast<size_t>(y) * ow + ox
                                 : (static_cast<size_t>(y) * ow + ox) * 3 + c;
          if constexpr (kFloat) {
            reinterpret_cast<float*>(dst)[at] = v * mul_[c] + add_[c];
          } else {
            dst[at] = static_cast<uint8_t>(std::clamp(v + 0.5f, 0.0f, 255.0f));
          }
        }
      }
    }
  }

  const ImageOptions options_;
  const std::shared_ptr<JpegIndexCache> cache_;
  JpegSplicer splicer_;
  // Declared before cinfo_'s users; cinfo_.err points at err_.
  JpegErrors err_;
  jpeg_progress_mgr progress_ = {};
  jpeg_decompress_struct cinfo_ = {};
  bool created_ = false;
  float mul_[3];
  float add_[3];
  Scratch<uint8_t> decoded_;
  Scratch<uint8_t> rgb_;
  Scratch<JSAMPROW> row_pointers_;
  Scratch<float> rows_;
  Scratch<int> hstart_;
  Scratch<float> hw_;
  Scratch<float> acc_;
  Taps xtaps_;
  Taps ytaps_;
  ImageTrace last_;
};

}  // namespace

Status ImageOptions::Validate() const {
  auto bad = [](std::string_view field, auto value, std::string_view rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImageOptions.", AsAbsl(field), " = ", value, ": ", AsAbsl(rule)));
  };
  if (height < 1 || height > kMaxSide) return bad("height", height, "must be in [1, 16384]");
  if (width < 1 || width > kMaxSide) return bad("width", width, "must be in [1, 16384]");
  if (!(min_scale > 0 && min_scale <= 1)) return bad("min_scale", min_scale, "must be in (0, 1]");
  if (!(max_scale >= min_scale && max_scale <= 1)) {
    return bad("max_scale", max_scale, "must be in [min_scale, 1]");
  }
  if (!(min_ratio > 0 && std::isfinite(min_ratio))) {
    return bad("min_ratio", min_ratio, "must be finite and > 0");
  }
  if (!(max_ratio >= min_ratio && std::isfinite(max_ratio))) {
    return bad("max_ratio", max_ratio, "must be finite and >= min_ratio");
  }
  if (max_attempts < 1) return bad("max_attempts", max_attempts, "must be >= 1");
  if (!(center_fraction > 0 && center_fraction <= 1)) {
    return bad("center_fraction", center_fraction, "must be in (0, 1]");
  }
  if (!(flip_probability >= 0 && flip_probability <= 1)) {
    return bad("flip_probability", flip_probability, "must be in [0, 1]");
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(mean[c]))
      return bad(absl::StrCat("mean[", c, "]"), mean[c], "must be finite");
    if (!(std[c] > 0 && std::isfinite(std[c]))) {
      return bad(absl::StrCat("std[", c, "]"), std[c], "must be finite and > 0");
    }
  }
  if (max_pixels < 1) return bad("max_pixels", max_pixels, "must be >= 1");
  if (index_cache_mb < 0 || index_cache_mb > (int64_t{1} << 20)) {
    return bad("index_cache_mb", index_cache_mb, "must be in [0, 1048576] (0 = off)");
  }
  return absl::OkStatus();
}

size_t ImageOptions::OutputBytes() const {
  return static_cast<size_t>(height) * width * 3 * (dtype == PixelType::kFloat32 ? 4 : 1);
}

CropBox SampleCrop(int image_height, int image_width, uint64_t key, const ImageOptions& o) {
  const int H = image_height, W = image_width;
  switch (o.crop) {
    case CropMode::kFull:
      return {0, 0, W, H};
    case CropMode::kCenter: {
      const double aspect = static_cast<double>(o.width) / o.height;
      double w = W, h = H;
      if (static_cast<double>(W) / H > aspect) {
        w = H * aspect;
      } else {
        h = W / aspect;
      }
      const int cw = std::clamp(RoundToInt(w * o.center_fraction), 1, W);
      const int ch = std::clamp(RoundToInt(h * o.center_fraction), 1, H);
      return {(W - cw) / 2, (H - ch) / 2, cw, ch};
    }
    case CropMode::kRandomResized:
      break;
  }
  // torchvision.transforms.RandomResizedCrop.get_params, draw for draw.
  SplitMix64 rng(Mix64(key ^ kCropSalt));
  const double area = static_cast<double>(H) * W;
  const double log_r0 = std::log(o.min_ratio), log_r1 = std::log(o.max_ratio);
  for (int attempt = 0; attempt < o.max_attempts; ++attempt) {
    const double target = area * (o.min_scale + (o.max_scale - o.min_scale) * rng.UniformDouble());
    const double ratio = std::exp(log_r0 + (log_r1 - log_r0) * rng.UniformDouble());
    const double wd = std::round(std::sqrt(target * ratio));
    const double hd = std::round(std::sqrt(target / ratio));
    if (wd > 0 && wd <= W && hd > 0 && hd <= H) {
      const int w = static_cast<int>(wd), h = static_cast<int>(hd);
      const int y = static_cast<int>(rng.Uniform(static_cast<uint64_t>(H - h) + 1));
      const int x = static_cast<int>(rng.Uniform(static_cast<uint64_t>(W - w) + 1));
      return {x, y, w, h};
    }
  }
  // Fallback: a centred crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(W) / H;
  int w = W, h = H;
  if (in_ratio < o.min_ratio) {
    h = std::clamp(RoundToInt(W / o.min_ratio), 1, H);
  } else if (in_ratio > o.max_ratio) {
    w = std::clamp(RoundToInt(H * o.max_ratio), 1, W);
  }
  return {(W - w) / 2, (H - h) / 2, w, h};
}

bool SampleFlip(uint64_t key, const ImageOptions& o) {
  if (o.flip_probability <= 0) return false;
  if (o.flip_probability >= 1) return true;
  SplitMix64 rng(Mix64(key ^ kFlipSalt));
  return rng.UniformDouble() < o.flip_probability;
}

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::Create(const ImageOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  // Without crop_decode every pixel is decoded: an index would never be used.
  return Create(options, options.index_cache_mb > 0 && options.crop_decode
                             ? JpegIndexCache::Shared(options.index_cache_mb << 20)
                             : nullptr);
}

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::Create(
    const ImageOptions& options, std::shared_ptr<JpegIndexCache> cache) {
  FW_RETURN_IF_ERROR(options.Validate());
  auto pipeline = std::make_unique<ImagePipelineImpl>(options, std::move(cache));
  FW_RETURN_IF_ERROR(pipeline->Init());
  return std::unique_ptr<ImagePipeline>(std::move(pipeline));
}

}  // namespace flywheel::loader

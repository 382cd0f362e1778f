// Entropy indexes and splicing for baseline JPEGs (jpeg_index.h). The
// bitstream rules are ITU T.81 Annex F (sequential Huffman decoding) and the
// marker syntax of Annex B; where libjpeg-turbo is more lenient than the
// standard, this code refuses to index rather than guess, so every image it
// indexes decodes to the same pixels either way.
#include "flywheel/loader/transforms/jpeg_index.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::loader {
namespace {

constexpr int kMaxComponents = 4;
constexpr int kMaxBlocksPerMcu = 10;  // T.81 B.2.3
constexpr int kLookupBits = 10;
constexpr uint32_t kFastEob = 0x80;
// Zero bytes after the unstuffed data: a block reads at most 64 symbols of
// at most 16 + 16 bits past a position checked to be inside the data.
constexpr size_t kPadBytes = 64 * 32 / 8 + 16;
// Zero bytes after a spliced JPEG's EOI (Splice).
constexpr size_t kTailBytes = 512 * kMaxBlocksPerMcu;

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// A Huffman table: a lookup on the next kLookupBits bits for short codes,
// canonical-code bounds for the rest, and the code of each symbol (to
// re-code DC differences).
struct Huffman {
  bool defined = false;
  // (code length << 8) | symbol; 0 when the code is longer than kLookupBits
  // (or not a code).
  std::array<uint16_t, 1 << kLookupBits> lookup{};
  std::array<int32_t, 18> maxcode{};  // largest code of each length; -1 none
  std::array<int32_t, 17> valptr{};
  std::array<int32_t, 17> mincode{};
  std::array<uint8_t, 256> values{};
  std::array<uint16_t, 256> code{};
  std::array<uint8_t, 256> length{};  // 0: the symbol has no code
  // AC tables: a coefficient whose code and value bits together fit in
  // kLookupBits, decoded by one lookup: (value << 16) | (run << 8) | bits
  // used; an end of block: (kFastEob << 8) | bits used; 0 for anything
  // else (longer codes, ZRL).
  std::array<int32_t, 1 << kLookupBits> fast{};
  // The table's bytes as stored (16 counts + values), to skip rebuilding
  // an identical table.
  std::array<uint8_t, 16 + 256> raw{};
  size_t raw_size = 0;
};

// T.81 F.2.2.1 EXTEND: `bits` (s of them) as a signed difference.
inline int32_t Extend(uint32_t bits, int s) {
  return bits < (1u << (s - 1)) ? static_cast<int32_t>(bits) - (1 << s) + 1
                                : static_cast<int32_t>(bits);
}

// Builds `h` from a DHT table (counts of codes of each length 1..16, then
// the symbols). false for a table libjpeg would refuse: more than 256
// symbols, codes that overflow their length, DC symbols above 15.
bool BuildHuffman(const uint8_t* counts, const uint8_t* symbols, bool dc, Huffman* h) {
  size_t n = 0;
  for (int l = 0; l < 16; ++l) n += counts[l];
  if (n > 256) return false;
  if (h->defined && h->raw_size == 16 + n && std::memcmp(h->raw.data(), counts, 16) == 0 &&
      std::memcmp(h->raw.data() + 16, symbols, n) == 0) {
    return true;
  }
  h->defined = false;
  std::memcpy(h->raw.data(), counts, 16);
  std::memcpy(h->raw.data() + 16, symbols, n);
  h->raw_size = 16 + n;
  h->lookup.fill(0);
  h->length.fill(0);
  int32_t code = 0;
  size_t k = 0;
  for (int l = 1; l <= 16; ++l) {
    const int count = counts[l - 1];
    h->valptr[l] = static_cast<int32_t>(k);
    h->mincode[l] = code;
    for (int i = 0; i < count; ++i, ++k, ++code) {
      // A code must fit its length and not be all ones (libjpeg: "Bogus
      // Huffman table").
      if (code >= (int32_t{1} << l) - 1) return false;
      const uint8_t sym = symbols[k];
      if (dc && sym > 15) return false;
      h->values[k] = sym;
      if (h->length[sym] == 0) {  // libjpeg keeps the first code of a repeated symbol
        h->code[sym] = static_cast<uint16_t>(code);
        h->length[sym] = static_cast<uint8_t>(l);
      }
      if (l <= kLookupBits) {
        const int shift = kLookupBits - l;
        for (int j = 0; j < (1 << shift); ++j) {
          h->lookup[(code << shift) | j] = static_cast<uint16_t>(l << 8 | sym);
        }
      }
    }
    h->maxcode[l] = count > 0 ? code - 1 : -1;
    code <<= 1;
  }
  h->maxcode[17] = 0x7fffffff;  // sentinel
  h->fast.fill(0);
  if (!dc) {
    for (uint32_t prefix = 0; prefix < (1u << kLookupBits); ++prefix) {
      const uint16_t e = h->lookup[prefix];
      const int l = e >> 8, r = (e >> 4) & 15, size = e & 15;
      if (e != 0 && size == 0 && r == 0) {  // EOB
        h->fast[prefix] = static_cast<int32_t>(kFastEob << 8 | static_cast<uint32_t>(l));
        continue;
      }
      if (e == 0 || size == 0 || l + size > kLookupBits) continue;
      const uint32_t bits = (prefix >> (kLookupBits - l - size)) & ((1u << size) - 1);
      const int32_t value = Extend(bits, size);
      h->fast[prefix] = static_cast<int32_t>(static_cast<uint32_t>(value) << 16 |
                                             static_cast<uint32_t>(r) << 8 |
                                             static_cast<uint32_t>(l + size));
    }
  }
  h->defined = true;
  return true;
}

// Unstuffed entropy-coded data read from a bit position. `window` is the
// next 57+ bits, most significant first.
inline uint64_t Window(const uint8_t* data, uint64_t pos) {
  uint64_t w;
  std::memcpy(&w, data + (pos >> 3), sizeof(w));
  return __builtin_bswap64(w) << (pos & 7);
}

// Decodes one symbol from `w` (the window at the symbol). Returns
// (length << 8) | symbol, or 0 for a bit pattern that is no code.
inline uint32_t Decode(const Huffman& h, uint64_t w) {
  const uint32_t e = h.lookup[w >> (64 - kLookupBits)];
  if (e != 0) return e;
  for (int l = kLookupBits + 1; l <= 16; ++l) {
    const int32_t code = static_cast<int32_t>(w >> (64 - l));
    if (code <= h.maxcode[l]) {
      return static_cast<uint32_t>(l << 8 | h.values[h.valptr[l] + code - h.mincode[l]]);
    }
  }
  return 0;
}

struct ScanComponent {
  int frame_index = 0;
  int h = 1;
  int v = 1;
  int dc_table = 0;
  int ac_table = 0;
};

// What the headers say, up to the first scan.
struct Layout {
  int width = 0;
  int height = 0;
  size_t sof_at = 0;  // offset of the SOF's height field
  size_t entropy_begin = 0;
  size_t entropy_end = 0;  // offset of the marker that ends the scan's data
  int mcu_width = 0;
  int mcu_height = 0;
  int mcus_x = 0;
  int mcus_y = 0;
  int ns = 0;
  std::array<ScanComponent, kMaxComponents> comp{};
  // Blocks of one MCU in order: the scan component of each.
  int blocks = 0;
  std::array<uint8_t, kMaxBlocksPerMcu> block_comp{};
};

Status Unsupported(std::string_view what) {
  return absl::UnimplementedError(absl::StrCat("JPEG not indexable: ", AsAbsl(what)));
}
Status Corrupt(std::string_view what) {
  return absl::DataLossError(absl::StrCat("JPEG not indexable: ", AsAbsl(what)));
}

// Parses the markers up to and including the first SOS into `layout` and
// the Huffman tables into dc/ac (tables of the same class and slot defined
// twice: the later wins, as in libjpeg).
// With `entropy_size` >= 0 (the scan's length, known from an index) the
// data's end is taken from it instead of searched for.
Status ParseLayout(std::span<const uint8_t> jpeg, Layout* layout, Huffman* dc, Huffman* ac,
                   int64_t entropy_size = -1) {
  const uint8_t* p = jpeg.data();
  const size_t n = jpeg.size();
  if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return Corrupt("no SOI marker");
  size_t at = 2;
  struct FrameComponent {
    int id, h, v;
  };
  std::array<FrameComponent, kMaxComponents> frame{};
  int nf = 0;
  bool have_sof = false;
  while (true) {
    // A marker: 0xFF (fill bytes allowed), then the code.
    if (at >= n || p[at] != 0xFF) return Corrupt("expected a marker");
    while (at < n && p[at] == 0xFF) ++at;
    if (at >= n) return Corrupt("truncated marker");
    const uint8_t m = p[at++];
    if (m == 0xD8 || m == 0xD9 || m == 0x01 || (m >= 0xD0 && m <= 0xD7) || m == 0x00) {
      return Corrupt(absl::StrCat("unexpected marker 0x", absl::Hex(m), " before the scan"));
    }
    if (at + 2 > n) return Corrupt("truncated segment length");
    const size_t len = Be16(p + at);
    if (len < 2 || at + len > n) return Corrupt("segment length past the end");
    const uint8_t* s = p + at + 2;
    const size_t sl = len - 2;
    const size_t segment_at = at;
    at += len;
    if (m == 0xC4) {  // DHT
      size_t i = 0;
      while (i < sl) {
        if (i + 17 > sl) return Corrupt("truncated DHT");
        const int cls = s[i] >> 4, slot = s[i] & 15;
        if (cls > 1 || slot > 3) return Corrupt("bad DHT class or slot");
        size_t count = 0;
        for (int l = 0; l < 16; ++l) count += s[i + 1 + l];
        if (count > 256 || i + 17 + count > sl) return Corrupt("truncated DHT");
        Huffman* h = cls == 0 ? &dc[slot] : &ac[slot];
        if (!BuildHuffman(s + i + 1, s + i + 17, cls == 0, h)) return Corrupt("bad Huffman table");
        i += 17 + count;
      }
    } else if (m == 0xDD) {  // DRI
      if (sl < 2) return Corrupt("truncated DRI");
      if (Be16(s) != 0) return Unsupported("restart markers");
    } else if (m == 0xC0 || m == 0xC1) {  // SOF0, SOF1
      if (have_sof) return Corrupt("two frames");
      have_sof = true;
      if (sl < 6) return Corrupt("truncated SOF");
      if (s[0] != 8) return Unsupported("not 8-bit");
      layout->height = Be16(s + 1);
      layout->width = Be16(s + 3);
      layout->sof_at = segment_at + 2 + 1;
      nf = s[5];
      if (layout->height == 0 || layout->width == 0) return Unsupported("no frame size (DNL)");
      if (nf < 1 || nf > kMaxComponents || sl < 6 + 3 * static_cast<size_t>(nf)) {
        return Unsupported("component count");
      }
      for (int c = 0; c < nf; ++c) {
        const uint8_t* f = s + 6 + 3 * c;
        frame[c] = {f[0], f[1] >> 4, f[1] & 15};
        if (frame[c].h < 1 || frame[c].h > 4 || frame[c].v < 1 || frame[c].v > 4) {
          return Corrupt("bad sampling factors");
        }
      }
    } else if ((m >= 0xC2 && m <= 0xCF) && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      return Unsupported("progressive, lossless or arithmetic-coded");
    } else if (m == 0xDA) {  // SOS
      if (!have_sof) return Corrupt("scan before frame");
      if (sl < 1) return Corrupt("truncated SOS");
      const int ns = s[0];
      if (ns != nf) return Unsupported("more than one scan");
      if (sl < 1 + 2 * static_cast<size_t>(ns) + 3) return Corrupt("truncated SOS");
      const uint8_t* e = s + 1 + 2 * ns;
      if (e[0] != 0 || e[1] != 63 || e[2] != 0) return Unsupported("not a sequential scan");
      int hmax = 1, vmax = 1;
      for (int c = 0; c < nf; ++c) {
        hmax = std::max(hmax, frame[c].h);
        vmax = std::max(vmax, frame[c].v);
      }
      layout->ns = ns;
      int blocks = 0;
      for (int c = 0; c < ns; ++c) {
        const int id = s[1 + 2 * c];
        int fi = -1;
        for (int j = 0; j < nf; ++j) {
          if (frame[j].id == id) fi = j;
        }
        if (fi < 0) return Corrupt("scan names a component the frame lacks");
        ScanComponent& sc = layout->comp[c];
        sc.frame_index = fi;
        sc.dc_table = s[2 + 2 * c] >> 4;
        sc.ac_table = s[2 + 2 * c] & 15;
        if (sc.dc_table > 3 || sc.ac_table > 3 || !dc[sc.dc_table].defined ||
            !ac[sc.ac_table].defined) {
          return Corrupt("scan uses an undefined Huffman table");
        }
        // A lone component is coded block by block, whatever its factors.
        sc.h = ns == 1 ? 1 : frame[fi].h;
        sc.v = ns == 1 ? 1 : frame[fi].v;
        for (int b = 0; b < sc.h * sc.v; ++b) {
          if (blocks == kMaxBlocksPerMcu) return Corrupt("more than 10 blocks per MCU");
          layout->block_comp[blocks++] = static_cast<uint8_t>(c);
        }
      }
      layout->blocks = blocks;
      if (ns == 1) {
        // Blocks of the component's own grid: ceil(width * h / hmax / 8).
        if (frame[layout->comp[0].frame_index].h != hmax ||
            frame[layout->comp[0].frame_index].v != vmax) {
          return Unsupported("subsampled single component");
        }
        layout->mcu_width = layout->mcu_height = 8;
      } else {
        layout->mcu_width = 8 * hmax;
        layout->mcu_height = 8 * vmax;
      }
      layout->mcus_x = (layout->width + layout->mcu_width - 1) / layout->mcu_width;
      layout->mcus_y = (layout->height + layout->mcu_height - 1) / layout->mcu_height;
      layout->entropy_begin = at;
      if (entropy_size >= 0) {
        if (at + static_cast<size_t>(entropy_size) > n) return Corrupt("index of another JPEG");
        layout->entropy_end = at + static_cast<size_t>(entropy_size);
        return absl::OkStatus();
      }
      // The data runs to the first marker (0xFF not followed by a stuffed
      // 0x00); it must be EOI.
      size_t e2 = at;
      while (true) {
        const void* ff = std::memchr(p + e2, 0xFF, n - e2);
        if (ff == nullptr) return Corrupt("no EOI after the scan");
        e2 = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p);
        if (e2 + 1 >= n) return Corrupt("no EOI after the scan");
        if (p[e2 + 1] == 0x00) {
          e2 += 2;
          continue;
        }
        break;
      }
      layout->entropy_end = e2;
      size_t marker = e2;
      while (marker < n && p[marker] == 0xFF) ++marker;
      if (marker >= n || p[marker] != 0xD9) return Unsupported("more than one scan, or restarts");
      return absl::OkStatus();
    }
    // Other segments (APPn, COM, DQT, DNL...) are skipped.
  }
}

// Raw bytes [p, end) of a scan's data with the stuffed zero after each 0xFF
// removed, then kPadBytes zeros, into *out. Returns the unstuffed size. With
// `ff`, appends the unstuffed offset of each 0xFF byte.
size_t Unstuff(const uint8_t* p, const uint8_t* end, std::vector<uint8_t>* out,
               std::vector<uint32_t>* ff = nullptr) {
  out->resize(static_cast<size_t>(end - p) + kPadBytes);
  uint8_t* const begin = out->data();
  uint8_t* o = begin;
  while (p < end) {
    // Eight bytes at a time while none is 0xFF.
    if (end - p >= 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      const uint64_t t = ~v;  // a zero byte where v has 0xFF
      if (((t - 0x0101010101010101ULL) & ~t & 0x8080808080808080ULL) == 0) {
        std::memcpy(o, &v, 8);
        o += 8;
        p += 8;
        continue;
      }
    }
    const uint8_t b = *p++;
    if (b == 0xFF) {
      if (ff != nullptr) ff->push_back(static_cast<uint32_t>(o - begin));
      if (p < end) ++p;  // the stuffed 0x00 (ParseLayout checked it is there)
    }
    *o++ = b;
  }
  const size_t size = static_cast<size_t>(o - begin);
  std::memset(o, 0, kPadBytes);
  out->resize(size + kPadBytes);
  return size;
}

// Reads unstuffed coded data MSB first through a 64-bit buffer whose top
// `count` bits are the next ones (refilled to at least 56 with one
// unaligned load, without branches).
class BitReader {
 public:
  BitReader(const uint8_t* data, uint64_t pos) : data_(data), p_(data + (pos >> 3)) {
    Refill();
    Consume(static_cast<unsigned>(pos & 7));
  }
  void Refill() {
    uint64_t w;
    std::memcpy(&w, p_, sizeof(w));
    buf_ |= __builtin_bswap64(w) >> count_;
    p_ += (63 - count_) >> 3;
    count_ |= 56;
  }
  uint64_t Peek() const { return buf_; }
  void Consume(unsigned n) {
    buf_ <<= n;
    count_ -= n;
  }
  uint64_t Position() const { return static_cast<uint64_t>(p_ - data_) * 8 - count_; }

 private:
  const uint8_t* data_;
  const uint8_t* p_;
  uint64_t buf_ = 0;
  unsigned count_ = 0;
};

// Reads one block's DC difference (advancing past it). false on a bad code.
inline bool ReadDc(BitReader& in, const Huffman& dc, int32_t* diff) {
  in.Refill();
  const uint64_t w = in.Peek();
  const uint32_t e = Decode(dc, w);
  if (e == 0) return false;
  const int l = static_cast<int>(e >> 8), s = static_cast<int>(e & 15);
  *diff = s == 0 ? 0 : Extend(static_cast<uint32_t>((w << l) >> (64 - s)), s);
  in.Consume(static_cast<unsigned>(l + s));
  return true;
}

// Zigzag position -> natural (row-major) position, with 16 extra entries
// for a run that overshoots the block (corrupt data), pointing at 63 as
// libjpeg's jpeg_natural_order does, so such blocks decode the same.
constexpr std::array<uint8_t, 80> kNatural = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

// Decodes one block: *pred (the component's DC predictor) plus the
// difference into block[0], the AC coefficients at their natural positions
// (libjpeg's entropy decoder output: quantized, not dequantized; the block
// is zero on entry). Without kStore nothing is written. false on a bad code.
// Each symbol reads at most 16 + 15 bits, which a refill leaves.
template <bool kStore>
inline bool DecodeBlock(BitReader& in, const Huffman& dc, const Huffman& ac, int32_t* pred,
                        int16_t* block) {
  int32_t diff;
  if (!ReadDc(in, dc, &diff)) return false;
  *pred += diff;
  if constexpr (kStore) block[0] = static_cast<int16_t>(*pred);
  for (int k = 1; k < 64;) {
    in.Refill();
    const uint64_t w = in.Peek();
    const int32_t f = ac.fast[w >> (64 - kLookupBits)];
    if (f != 0) {
      in.Consume(static_cast<unsigned>(f & 0xFF));
      const int run = (f >> 8) & 0xFF;
      if (run == kFastEob) break;
      k += run;
      if constexpr (kStore) block[kNatural[k]] = static_cast<int16_t>(f >> 16);
      ++k;
      continue;
    }
    const uint32_t e = Decode(ac, w);
    if (e == 0) return false;
    const int l = static_cast<int>(e >> 8), r = (e >> 4) & 15, size = e & 15;
    if (size != 0) {
      k += r;
      if constexpr (kStore) {
        block[kNatural[k]] =
            static_cast<int16_t>(Extend(static_cast<uint32_t>((w << l) >> (64 - size)), size));
      }
      ++k;
      in.Consume(static_cast<unsigned>(l + size));
    } else if (r == 15) {
      k += 16;
      in.Consume(static_cast<unsigned>(l));
    } else {
      in.Consume(static_cast<unsigned>(l));
      break;
    }
  }
  return true;
}

// Writes bits with JPEG byte stuffing (a 0x00 after each 0xFF).
class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}

  // REQUIRES: n <= 32, value < 2^n.
  void Put(uint64_t value, int n) {
    acc_ = (acc_ << n) | value;
    bits_ += n;
    while (bits_ >= 8) {
      bits_ -= 8;
      Byte(static_cast<uint8_t>(acc_ >> bits_));
    }
  }

  // Copies bits [from, to) of unstuffed data. Seven bytes at a time: the
  // pending bits and the next 56 source bits, written with one store when
  // none of the seven output bytes is 0xFF (which needs a stuffed 0x00).
  void Copy(const uint8_t* data, uint64_t from, uint64_t to) {
    constexpr uint64_t kOnes = 0x0001010101010101ULL, kHighs = 0x0080808080808080ULL;
    while (to - from >= 56) {
      const uint64_t v = Window(data, from) >> 8;
      from += 56;
      const uint64_t out = ((acc_ << 56) | v) >> bits_;  // 56 bits to write
      acc_ = v;  // the low bits_ bits stay pending
      const uint64_t t = ~out & 0x00FFFFFFFFFFFFFFULL;  // a zero byte where out has 0xFF
      if (((t - kOnes) & ~t & kHighs) == 0) {
        const uint64_t be = __builtin_bswap64(out << 8);
        std::memcpy(out_, &be, sizeof(be));  // the 8th byte is overwritten next
        out_ += 7;
      } else {
        for (int shift = 48; shift >= 0; shift -= 8) Byte(static_cast<uint8_t>(out >> shift));
      }
    }
    while (to - from >= 32) {
      Put(Window(data, from) >> 32, 32);
      from += 32;
    }
    if (to > from) {
      const int n = static_cast<int>(to - from);
      Put(Window(data, from) >> (64 - n), n);
    }
  }

  // Pads the last byte with 1 bits; returns the end.
  uint8_t* Finish() {
    if (bits_ > 0) Put((1u << (8 - bits_)) - 1, 8 - bits_);
    return out_;
  }

 private:
  void Byte(uint8_t b) {
    *out_++ = b;
    if (b == 0xFF) *out_++ = 0x00;
  }

  uint8_t* out_;
  uint64_t acc_ = 0;
  int bits_ = 0;
};

// Size category of a DC difference (T.81 F.1.2.1).
inline int Category(int32_t v) {
  const uint32_t a = static_cast<uint32_t>(v < 0 ? -v : v);
  return a == 0 ? 0 : 32 - __builtin_clz(a);
}

}  // namespace

Result<JpegIndex> BuildJpegIndex(std::span<const uint8_t> jpeg) {
  JpegSplicer splicer;
  FW_RETURN_IF_ERROR(splicer.StartScan(jpeg, /*record=*/true));
  return splicer.FinishIndex();
}

struct JpegSplicer::State {
  std::array<Huffman, 4> dc, ac;
  std::vector<uint8_t> unstuffed;
  std::vector<uint8_t> out;
  // The rectangle being spliced or decoded (Prepare).
  Layout l;
  const JpegIndex* index = nullptr;
  McuRect rect;
  uint64_t base = 0;   // bit offsets below are index offsets minus base
  uint64_t limit = 0;  // bits of unstuffed data
  // DecodeMcu: the next MCU (column x of rectangle row y) and where the
  // decoder stands.
  bool decoding = false;
  // StartScan: the whole scan from its start, no index; MCUs left.
  bool sequential = false;
  int64_t total = 0;  // MCUs in the scan
  int64_t remaining = 0;
  // StartScan(record): the index being recorded as MCUs are decoded.
  bool recording = false;
  JpegIndex rec;
  std::string rec_error;          // why the recorded index is unusable
  std::vector<uint32_t> ff;       // unstuffed offsets of the scan's 0xFF bytes
  std::array<int, kMaxBlocksPerMcu> starts{};  // as in component_start, or -1
  std::string failure;            // why DecodeMcu returned false
  uint64_t data_bits = 0;  // sequential: the scan's unstuffed length in bits
  int x = 0;
  int y = 0;
  uint64_t pos = 0;
  std::array<int32_t, kMaxComponents> pred{};
  std::array<const Huffman*, kMaxBlocksPerMcu> dcs{}, acs{};

  uint64_t Bit(size_t i) const { return uint64_t{index->bit[i]} - base; }

  // Checks the rectangle, parses the headers and unstuffs the rectangle's
  // rows of coded data.
  Status Prepare(std::span<const uint8_t> jpeg, const JpegIndex& ix, McuRect r) {
    // Ends any StartScan: its recording (sized for that image) and all.
    decoding = recording = sequential = false;
    if (r.x0 < 0 || r.y0 < 0 || r.x1 > ix.mcus_x || r.y1 > ix.mcus_y || r.x0 >= r.x1 ||
        r.y0 >= r.y1) {
      return absl::InvalidArgumentError(absl::StrCat("MCU rectangle [", r.x0, ", ", r.x1, ") x [",
                                                     r.y0, ", ", r.y1, ") is empty or outside the ",
                                                     ix.mcus_x, "x", ix.mcus_y, " grid"));
    }
    index = &ix;
    rect = r;
    FW_RETURN_IF_ERROR(
        ParseLayout(jpeg, &l, dc.data(), ac.data(), static_cast<int64_t>(ix.entropy_bytes)));
    if (l.mcus_x != ix.mcus_x || l.mcus_y != ix.mcus_y || l.ns != ix.components) {
      return absl::InvalidArgumentError("the index was built from another JPEG");
    }
    const size_t mx = static_cast<size_t>(ix.mcus_x);
    const size_t mcus = mx * static_cast<size_t>(ix.mcus_y);
    if (ix.bit.size() != mcus + 1 || ix.dc.size() != (mcus + 1) * ix.components ||
        ix.component_start.size() != mcus * (ix.components - 1) ||
        ix.row_raw.size() != static_cast<size_t>(ix.mcus_y)) {
      return absl::InvalidArgumentError("malformed index: its arrays do not match its MCU grid");
    }
    // Unstuff only the rows in the rectangle: from the byte holding its
    // first bit to the byte holding the next row's first bit (and its
    // stuffed zero).
    const uint8_t* raw = jpeg.data() + l.entropy_begin;
    const size_t raw_begin = ix.row_raw[r.y0];
    const size_t raw_end = r.y1 == ix.mcus_y
                               ? ix.entropy_bytes
                               : std::min<size_t>(ix.entropy_bytes, ix.row_raw[r.y1] + 2);
    if (raw_begin > raw_end) return absl::InvalidArgumentError("the index was built from another JPEG");
    limit = uint64_t{Unstuff(raw + raw_begin, raw + raw_end, &unstuffed)} * 8;
    base = uint64_t{ix.bit[r.y0 * mx] >> 3} * 8;
    for (int y = r.y0; y < r.y1; ++y) {
      const size_t row = static_cast<size_t>(y) * mx;
      if (ix.bit[row + r.x0] < base || Bit(row + r.x1) > limit ||
          ix.bit[row + r.x1] < ix.bit[row + r.x0]) {
        return absl::InvalidArgumentError("the index was built from another JPEG");
      }
    }
    return absl::OkStatus();
  }

  // Copies the headers (up to the scan's data) into `out` with the frame
  // size patched to the rectangle's; returns the bytes written.
  size_t WriteHeaders(std::span<const uint8_t> jpeg, size_t capacity) {
    out.resize(std::max(out.size(), capacity));
    std::memcpy(out.data(), jpeg.data(), l.entropy_begin);
    const int width = rect.x1 == index->mcus_x ? l.width - rect.x0 * l.mcu_width
                                               : (rect.x1 - rect.x0) * l.mcu_width;
    const int height = rect.y1 == index->mcus_y ? l.height - rect.y0 * l.mcu_height
                                                : (rect.y1 - rect.y0) * l.mcu_height;
    out[l.sof_at] = static_cast<uint8_t>(height >> 8);
    out[l.sof_at + 1] = static_cast<uint8_t>(height);
    out[l.sof_at + 2] = static_cast<uint8_t>(width >> 8);
    out[l.sof_at + 3] = static_cast<uint8_t>(width);
    return l.entropy_begin;
  }

  void StartRow() {
    const size_t first = static_cast<size_t>(rect.y0 + y) * static_cast<size_t>(index->mcus_x) + rect.x0;
    pos = Bit(first);
    for (int c = 0; c < l.ns; ++c) pred[c] = index->dc[first * l.ns + c];
  }
};

JpegSplicer::JpegSplicer() : state_(std::make_unique<State>()) {}
JpegSplicer::~JpegSplicer() = default;

Result<std::span<const uint8_t>> JpegSplicer::SpliceHeaders(std::span<const uint8_t> jpeg,
                                                            const JpegIndex& index, McuRect rect) {
  State& st = *state_;
  st.decoding = false;
  st.sequential = false;
  FW_RETURN_IF_ERROR(st.Prepare(jpeg, index, rect));
  size_t n = st.WriteHeaders(jpeg, st.l.entropy_begin + 2);
  st.out[n++] = 0xFF;
  st.out[n++] = 0xD9;
  for (int b = 0; b < st.l.blocks; ++b) {
    const ScanComponent& c = st.l.comp[st.l.block_comp[b]];
    st.dcs[b] = &st.dc[c.dc_table];
    st.acs[b] = &st.ac[c.ac_table];
  }
  st.x = st.y = 0;
  st.StartRow();
  st.decoding = true;
  return std::span<const uint8_t>(st.out.data(), n);
}

Status JpegSplicer::StartScan(std::span<const uint8_t> jpeg, bool record) {
  State& st = *state_;
  st.decoding = false;
  st.recording = false;
  st.failure.clear();
  FW_RETURN_IF_ERROR(ParseLayout(jpeg, &st.l, st.dc.data(), st.ac.data()));
  const Layout& l = st.l;
  st.ff.clear();
  const size_t size = Unstuff(jpeg.data() + l.entropy_begin, jpeg.data() + l.entropy_end,
                              &st.unstuffed, record ? &st.ff : nullptr);
  st.data_bits = uint64_t{size} * 8;
  if (record && st.data_bits >= (uint64_t{1} << 32)) return Unsupported("more than 512 MB of coded data");
  st.limit = st.data_bits;
  for (int b = 0; b < l.blocks; ++b) {
    const int c = l.block_comp[b];
    st.dcs[b] = &st.dc[l.comp[c].dc_table];
    st.acs[b] = &st.ac[l.comp[c].ac_table];
    // Blocks that start a component other than the first: their slot in
    // component_start.
    st.starts[b] = c > 0 && (b == 0 || l.block_comp[b - 1] != c) ? c - 1 : -1;
  }
  st.pos = 0;
  st.pred.fill(0);
  st.total = st.remaining = int64_t{l.mcus_x} * l.mcus_y;
  if (record) {
    const size_t mcus = static_cast<size_t>(st.total);
    JpegIndex& ix = st.rec;
    ix = JpegIndex{};
    ix.width = l.width;
    ix.height = l.height;
    ix.mcu_width = l.mcu_width;
    ix.mcu_height = l.mcu_height;
    ix.mcus_x = l.mcus_x;
    ix.mcus_y = l.mcus_y;
    ix.components = l.ns;
    ix.entropy_bytes = static_cast<uint32_t>(l.entropy_end - l.entropy_begin);
    ix.bit.resize(mcus + 1);
    ix.dc.resize((mcus + 1) * l.ns);
    ix.component_start.resize(mcus * (l.ns - 1));
    st.rec_error.clear();
    st.recording = true;
  }
  st.sequential = true;
  st.decoding = true;
  return absl::OkStatus();
}

Result<JpegIndex> JpegSplicer::FinishIndex() {
  State& st = *state_;
  if (!st.recording) return absl::FailedPreconditionError("FinishIndex without StartScan(record)");
  while (st.decoding && st.remaining > 0) {
    if (!DecodeMcu(nullptr)) break;
  }
  st.recording = false;
  st.decoding = false;
  if (!st.failure.empty()) return Corrupt(st.failure);
  if (!st.rec_error.empty()) return Corrupt(st.rec_error);
  JpegIndex& ix = st.rec;
  const int ns = st.l.ns;
  const size_t mcus = static_cast<size_t>(st.total);
  ix.bit[mcus] = static_cast<uint32_t>(st.pos);
  for (int c = 0; c < ns; ++c) ix.dc[mcus * ns + c] = static_cast<int16_t>(st.pred[c]);
  // Raw offset of the byte holding each row's first bit: its unstuffed
  // offset plus the stuffed bytes before it.
  ix.row_raw.resize(ix.mcus_y);
  size_t k = 0;
  for (int y = 0; y < ix.mcus_y; ++y) {
    const uint32_t u = ix.bit[static_cast<size_t>(y) * ix.mcus_x] >> 3;
    while (k < st.ff.size() && st.ff[k] < u) ++k;
    ix.row_raw[y] = u + static_cast<uint32_t>(k);
  }
  return std::move(ix);
}

int JpegSplicer::blocks_per_mcu() const { return state_->l.blocks; }

bool JpegSplicer::DecodeMcu(int16_t* const* blocks) {
  State& st = *state_;
  if (!st.decoding) return false;
  if (st.sequential) {
    if (st.remaining == 0) return false;
  } else if (st.x == st.rect.x1 - st.rect.x0) {
    if (st.rect.y0 + st.y + 1 >= st.rect.y1) return false;  // past the rectangle
    st.x = 0;
    ++st.y;
    st.StartRow();
  }
  const uint64_t mcu_start = st.pos;
  const int ns = st.l.ns;
  const size_t m = static_cast<size_t>(st.total - st.remaining);  // sequential
  if (st.recording) {
    st.rec.bit[m] = static_cast<uint32_t>(mcu_start);
    for (int c = 0; c < ns; ++c) st.rec.dc[m * ns + c] = static_cast<int16_t>(st.pred[c]);
  }
  BitReader in(st.unstuffed.data(), st.pos);
  const uint8_t* comp = st.l.block_comp.data();
  for (int b = 0; b < st.l.blocks; ++b) {
    if (st.recording && st.starts[b] >= 0) {
      // An MCU holds at most 10 blocks of at most 64 * 31 bits: < 2^16.
      st.rec.component_start[m * (ns - 1) + st.starts[b]] =
          static_cast<uint16_t>(in.Position() - mcu_start);
    }
    int32_t* pred = &st.pred[comp[b]];
    const bool ok = blocks != nullptr
                        ? DecodeBlock<true>(in, *st.dcs[b], *st.acs[b], pred, blocks[b])
                        : DecodeBlock<false>(in, *st.dcs[b], *st.acs[b], pred, nullptr);
    // A block reads at most 64 symbols of 31 bits: within kPadBytes of the
    // data even when the index does not match it.
    if (!ok || in.Position() > st.limit) {
      st.decoding = false;
      st.failure = absl::StrCat(ok ? "data ends inside MCU " : "bad Huffman code in MCU ",
                                st.sequential ? m : 0);
      return false;
    }
    // libjpeg keeps predictors in an int; an index keeps int16 (a real
    // 8-bit image's DC values are within +-2048 * 8).
    if (st.recording && (*pred < -32768 || *pred > 32767)) st.rec_error = "DC value out of range";
  }
  st.pos = in.Position();
  ++st.x;
  // The last MCU of a scan must end in its last byte (no data left over).
  if (st.sequential && --st.remaining == 0 && (st.pos + 7) / 8 * 8 != st.data_bits) {
    st.decoding = false;
    st.failure = "bytes left over after the last MCU";
    return false;
  }
  return true;
}

Result<std::span<const uint8_t>> JpegSplicer::Splice(std::span<const uint8_t> jpeg,
                                                     const JpegIndex& index, McuRect rect) {
  State& st = *state_;
  st.decoding = false;
  FW_RETURN_IF_ERROR(st.Prepare(jpeg, index, rect));  // no DecodeMcu after a Splice
  const Layout& l = st.l;
  const int ns = l.ns;
  const size_t mx = static_cast<size_t>(index.mcus_x);
  const uint64_t limit = st.limit;
  const uint8_t* data = st.unstuffed.data();
  auto bit = [&](size_t i) { return st.Bit(i); };

  // Output bound: the rectangle's bits, re-coded DCs (at most 16 + 16 bits
  // each) and stuffing (at most doubling).
  uint64_t copy_bits = 0;
  for (int y = rect.y0; y < rect.y1; ++y) {
    const size_t row = static_cast<size_t>(y) * mx;
    copy_bits += bit(row + rect.x1) - bit(row + rect.x0) + 32 * kMaxComponents;
  }
  st.WriteHeaders(jpeg, l.entropy_begin + 2 * (copy_bits / 8 + 8) + 16 + kTailBytes);
  uint8_t* out = st.out.data();

  BitWriter w(out + l.entropy_begin);
  std::array<int32_t, kMaxComponents> pred{};  // the new stream's predictors
  for (int y = rect.y0; y < rect.y1; ++y) {
    const size_t first = static_cast<size_t>(y) * mx + rect.x0;
    const size_t last = static_cast<size_t>(y) * mx + rect.x1;  // one past
    // The row's first MCU: each component's first DC difference re-coded
    // against the new predictor; every other bit copied.
    const uint64_t mcu = bit(first);
    uint64_t pos = mcu;
    for (int c = 0; c < ns; ++c) {
      const uint64_t start =
          c == 0 ? mcu : mcu + index.component_start[first * (ns - 1) + (c - 1)];
      if (start < pos || start > limit) return absl::InvalidArgumentError("index mismatch");
      w.Copy(data, pos, start);
      pos = start;
      const Huffman& dct = st.dc[l.comp[c].dc_table];
      int32_t diff;
      BitReader in(data, pos);
      if (!ReadDc(in, dct, &diff)) return absl::InvalidArgumentError("index mismatch");
      pos = in.Position();
      const int32_t d = index.dc[first * ns + c] + diff - pred[c];
      const int s = Category(d);
      if (dct.length[s] == 0) {
        return Unsupported(absl::StrCat("the DC table has no code for size ", s));
      }
      w.Put(dct.code[s], dct.length[s]);
      if (s > 0) w.Put(static_cast<uint32_t>(d < 0 ? d - 1 : d) & ((1u << s) - 1), s);
    }
    const uint64_t end = bit(last);
    if (pos > end) return absl::InvalidArgumentError("index mismatch");
    w.Copy(data, pos, end);
    for (int c = 0; c < ns; ++c) pred[c] = index.dc[last * ns + c];
  }
  uint8_t* end = w.Finish();
  *end++ = 0xFF;
  *end++ = 0xD9;
  // Zeros after EOI, never read as data: libjpeg-turbo decodes an MCU with
  // its fast Huffman path only while 512 bytes per block remain in the
  // source, so without them the last rows would take the slow path.
  std::memset(end, 0, kTailBytes);
  end += kTailBytes;
  return std::span<const uint8_t>(out, static_cast<size_t>(end - out));
}

// ---- cache ----

namespace {

constexpr int kShards = 16;
// Bytes charged per recorded image besides its index (hash map slot and
// control bytes, with headroom for the load factor).
constexpr int64_t kEntryBytes = 64;

struct KeyHash {
  size_t operator()(const JpegIndexCache::Key& k) const { return static_cast<size_t>(k.lo); }
};

struct Entry {
  std::shared_ptr<const JpegIndex> index;
  bool unsupported = false;
};

}  // namespace

struct JpegIndexCache::Impl {
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<Key, Entry, KeyHash> map ABSL_GUARDED_BY(mu);
  };
  std::array<Shard, kShards> shards;
  std::atomic<int64_t> budget{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> built{0};
  std::atomic<int64_t> unsupported{0};
  std::atomic<int64_t> entries{0};

  Shard& ShardOf(const Key& k) { return shards[(k.hi >> 60) & (kShards - 1)]; }
  bool Reserve(int64_t n) {
    int64_t now = bytes.load(std::memory_order_relaxed);
    do {
      if (now + n > budget.load(std::memory_order_relaxed)) return false;
    } while (!bytes.compare_exchange_weak(now, now + n, std::memory_order_relaxed));
    return true;
  }
};

JpegIndexCache::JpegIndexCache(int64_t budget_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->budget = std::max<int64_t>(0, budget_bytes);
}
JpegIndexCache::~JpegIndexCache() = default;

std::shared_ptr<JpegIndexCache> JpegIndexCache::Shared(int64_t budget_bytes) {
  // Never destroyed: pipelines may outlive static destruction order.
  static auto* shared = new std::shared_ptr<JpegIndexCache>(std::make_shared<JpegIndexCache>(0));
  std::atomic<int64_t>& b = (*shared)->impl_->budget;
  int64_t now = b.load();
  while (budget_bytes > now && !b.compare_exchange_weak(now, budget_bytes)) {
  }
  return *shared;
}

JpegIndexCache::Key JpegIndexCache::KeyOf(std::span<const uint8_t> jpeg) {
  const XXH128_hash_t h = XXH3_128bits(jpeg.data(), jpeg.size());
  return Key{h.low64, h.high64};
}

std::shared_ptr<const JpegIndex> JpegIndexCache::Find(const Key& key, bool* build_now) {
  if (build_now != nullptr) *build_now = false;
  Impl::Shard& s = impl_->ShardOf(key);
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) {
    // First sighting: remember it, if the budget allows.
    if (impl_->Reserve(kEntryBytes)) {
      s.map.emplace(key, Entry{});
      impl_->entries.fetch_add(1, std::memory_order_relaxed);
    }
    return nullptr;
  }
  if (it->second.index != nullptr) {
    impl_->hits.fetch_add(1, std::memory_order_relaxed);
    return it->second.index;
  }
  if (!it->second.unsupported && build_now != nullptr) *build_now = true;
  return nullptr;
}

void JpegIndexCache::Put(const Key& key, std::shared_ptr<const JpegIndex> index) {
  Impl::Shard& s = impl_->ShardOf(key);
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end() || it->second.index != nullptr || it->second.unsupported) return;
  if (index == nullptr) {
    it->second.unsupported = true;
    impl_->unsupported.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!impl_->Reserve(static_cast<int64_t>(index->bytes() + sizeof(JpegIndex)))) {
    // Over budget: never tried again either.
    it->second.unsupported = true;
    return;
  }
  it->second.index = std::move(index);
  impl_->built.fetch_add(1, std::memory_order_relaxed);
}

JpegIndexCache::Stats JpegIndexCache::stats() const {
  Stats s;
  s.hits = impl_->hits.load();
  s.built = impl_->built.load();
  s.unsupported = impl_->unsupported.load();
  s.entries = impl_->entries.load();
  s.bytes = impl_->bytes.load();
  s.budget = impl_->budget.load();
  return s;
}

}  // namespace flywheel::loader

#include "flywheel/loader/order.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace flywheel::loader {
namespace {

// Domain-separation constants so the keys of different uses never coincide.
constexpr uint64_t kEpochTag = 0x6570'6f63'6800'0001ULL;
constexpr uint64_t kRowsTag = 0x726f'7773'0000'0002ULL;
constexpr uint64_t kBlocksTag = 0x626c'6f63'6b00'0003ULL;
constexpr uint64_t kWindowTag = 0x7769'6e64'6f77'0004ULL;
constexpr uint64_t kStreamTag = 0x7374'7265'616d'0005ULL;

inline uint64_t Round(uint64_t v, uint64_t key) { return Mix64(v ^ key); }

}  // namespace

KeyedBijection::KeyedBijection(uint64_t n, uint64_t key) : n_(n < 1 ? 1 : n) {
  // At least 2 bits so both halves of the Feistel network are non-empty.
  int bits = n_ <= 4 ? 2 : 64 - std::countl_zero(n_ - 1);
  rounds_ = bits <= kSmallDomainBits ? kMaxRounds : kLargeDomainRounds;
  lo_bits_ = bits - bits / 2;
  const int hi_bits = bits / 2;
  lo_mask_ = (uint64_t{1} << lo_bits_) - 1;
  hi_mask_ = (uint64_t{1} << hi_bits) - 1;
  SplitMix64 rng(Mix64(key) ^ n_);
  for (auto& k : keys_) k = rng.Next();
}

uint64_t KeyedBijection::Permute(uint64_t x) const {
  uint64_t lo = x & lo_mask_;
  uint64_t hi = x >> lo_bits_;
  // Each half-round adds (mod 2^width) a keyed hash of one half to the
  // other: invertible for a fixed other half, so the whole is a bijection on
  // [0, 2^bits) whatever the split. Addition rather than xor: xor rounds
  // only ever compose to even permutations, which skews small domains.
  for (int i = 0; i < rounds_; i += 2) {
    lo = (lo + Round(hi, keys_[i])) & lo_mask_;
    hi = (hi + Round(lo, keys_[i + 1])) & hi_mask_;
  }
  return (hi << lo_bits_) | lo;
}

uint64_t KeyedBijection::Unpermute(uint64_t x) const {
  uint64_t lo = x & lo_mask_;
  uint64_t hi = x >> lo_bits_;
  for (int i = rounds_ - 2; i >= 0; i -= 2) {
    hi = (hi - Round(lo, keys_[i + 1])) & hi_mask_;
    lo = (lo - Round(hi, keys_[i])) & lo_mask_;
  }
  return (hi << lo_bits_) | lo;
}

uint64_t KeyedBijection::Forward(uint64_t x) const {
  // Cycle walking: the permutation of [0, 2^bits) restricted to [0, n)
  // follows each cycle until it re-enters the domain. 2^bits < 2n (or <= 4),
  // so the expected number of steps is below 2.
  uint64_t y = Permute(x);
  while (y >= n_) y = Permute(y);
  return y;
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 shift intrinsics trip -Wmaybe-uninitialized on their own
// internal placeholder operand.
#if !defined(__clang__)  // clang has no such warning (and -Werror rejects unknown ones)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Eight inputs per 512-bit vector: the same rounds as Permute, lane for lane
// (AVX-512DQ has the 64-bit multiply Mix64 needs). Chosen at run time.
__attribute__((target("avx512f,avx512dq"))) size_t PermuteManyAvx512(
    const uint64_t* keys, int rounds, int lo_bits, uint64_t lo_mask, uint64_t hi_mask,
    uint64_t* v, size_t count) {
  const __m512i lo_m = _mm512_set1_epi64(static_cast<long long>(lo_mask));
  const __m512i hi_m = _mm512_set1_epi64(static_cast<long long>(hi_mask));
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(0x9e3779b97f4a7c15ULL));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ULL));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebULL));
  // half = (half + Mix64(other ^ key)) & mask, lane for lane; a macro, since
  // a lambda would not be compiled for the vector target.
#define FW_FEISTEL_HALF(half, other, key, mask)                                 \
  do {                                                                          \
    __m512i x_ = _mm512_add_epi64(_mm512_xor_si512(other, key), golden);        \
    x_ = _mm512_mullo_epi64(_mm512_xor_si512(x_, _mm512_srli_epi64(x_, 30)), m1); \
    x_ = _mm512_mullo_epi64(_mm512_xor_si512(x_, _mm512_srli_epi64(x_, 27)), m2); \
    x_ = _mm512_xor_si512(x_, _mm512_srli_epi64(x_, 31));                        \
    half = _mm512_and_si512(_mm512_add_epi64(half, x_), mask);                  \
  } while (0)
  size_t i = 0;
  // Two vectors at a time: each round is a serial chain within a vector.
  for (; i + 16 <= count; i += 16) {
    __m512i a = _mm512_loadu_si512(v + i), b = _mm512_loadu_si512(v + i + 8);
    __m512i alo = _mm512_and_si512(a, lo_m), ahi = _mm512_srli_epi64(a, lo_bits);
    __m512i blo = _mm512_and_si512(b, lo_m), bhi = _mm512_srli_epi64(b, lo_bits);
    for (int r = 0; r < rounds; r += 2) {
      const __m512i k0 = _mm512_set1_epi64(static_cast<long long>(keys[r]));
      const __m512i k1 = _mm512_set1_epi64(static_cast<long long>(keys[r + 1]));
      FW_FEISTEL_HALF(alo, ahi, k0, lo_m);
      FW_FEISTEL_HALF(blo, bhi, k0, lo_m);
      FW_FEISTEL_HALF(ahi, alo, k1, hi_m);
      FW_FEISTEL_HALF(bhi, blo, k1, hi_m);
    }
    _mm512_storeu_si512(v + i, _mm512_or_si512(_mm512_slli_epi64(ahi, lo_bits), alo));
    _mm512_storeu_si512(v + i + 8, _mm512_or_si512(_mm512_slli_epi64(bhi, lo_bits), blo));
  }
#undef FW_FEISTEL_HALF
  return i;
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return have;
}
#else
bool HaveAvx512() { return false; }
#endif

std::atomic<bool> g_simd_allowed{true};

}  // namespace

void KeyedBijection::AllowSimdForTesting(bool allowed) { g_simd_allowed.store(allowed); }

void KeyedBijection::PermuteMany(uint64_t* v, size_t count) const {
  constexpr size_t kLanes = 8;
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (count >= 16 && HaveAvx512() && g_simd_allowed.load(std::memory_order_relaxed)) {
    i = PermuteManyAvx512(keys_, rounds_, lo_bits_, lo_mask_, hi_mask_, v, count);
  }
#endif
  for (; i + kLanes <= count; i += kLanes) {
    uint64_t lo[kLanes], hi[kLanes];
    for (size_t l = 0; l < kLanes; ++l) {
      lo[l] = v[i + l] & lo_mask_;
      hi[l] = v[i + l] >> lo_bits_;
    }
    for (int r = 0; r < rounds_; r += 2) {
      const uint64_t k0 = keys_[r], k1 = keys_[r + 1];
      for (size_t l = 0; l < kLanes; ++l) lo[l] = (lo[l] + Round(hi[l], k0)) & lo_mask_;
      for (size_t l = 0; l < kLanes; ++l) hi[l] = (hi[l] + Round(lo[l], k1)) & hi_mask_;
    }
    for (size_t l = 0; l < kLanes; ++l) v[i + l] = (hi[l] << lo_bits_) | lo[l];
  }
  for (; i < count; ++i) v[i] = Permute(v[i]);
}

void KeyedBijection::ForwardRange(uint64_t first, size_t count, uint64_t* out) const {
  // Chunks small enough for the walk's bookkeeping to live on the stack.
  constexpr size_t kChunk = 256;
  uint32_t pending[kChunk];
  uint64_t walk[kChunk];
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t m = std::min(kChunk, count - base);
    uint64_t* o = out + base;
    for (size_t i = 0; i < m; ++i) o[i] = first + base + i;
    PermuteMany(o, m);
    // Cycle walking, as in Forward: the values that left [0, n) take
    // another step together until every one is back in the domain.
    size_t np = 0;
    for (size_t i = 0; i < m; ++i) {
      if (o[i] >= n_) pending[np++] = static_cast<uint32_t>(i);
    }
    while (np > 0) {
      for (size_t j = 0; j < np; ++j) walk[j] = o[pending[j]];
      PermuteMany(walk, np);
      size_t still = 0;
      for (size_t j = 0; j < np; ++j) {
        o[pending[j]] = walk[j];
        if (walk[j] >= n_) pending[still++] = pending[j];
      }
      np = still;
    }
  }
}

uint64_t KeyedBijection::Inverse(uint64_t y) const {
  uint64_t x = Unpermute(y);
  while (x >= n_) x = Unpermute(x);
  return x;
}

std::string_view ShuffleModeName(ShuffleMode mode) {
  return mode == ShuffleMode::kBlock ? "block" : "row";
}

Result<ShuffleMode> ParseShuffleMode(std::string_view name) {
  if (name == "row") return ShuffleMode::kRow;
  if (name == "block") return ShuffleMode::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown shuffle mode '", AsAbsl(name), "' (expected \"row\" or \"block\")"));
}

Status OrderOptions::Validate() const {
  if (mode != ShuffleMode::kRow && mode != ShuffleMode::kBlock) {
    return absl::InvalidArgumentError(
        absl::StrCat("shuffle mode ", static_cast<int>(mode), " is unknown"));
  }
  if (mode == ShuffleMode::kBlock) {
    if (block_rows < 1) {
      return absl::InvalidArgumentError(absl::StrCat("block_rows must be >= 1, got ", block_rows));
    }
    if (window_blocks < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("window_blocks must be >= 1, got ", window_blocks));
    }
    if (block_rows > (int64_t{1} << 40) / window_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("block_rows * window_blocks is too large (",
                                                     block_rows, " * ", window_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  return Mix64(Mix64(seed ^ kStreamTag) + stream);
}

Result<SampleOrder> SampleOrder::Create(int64_t n, uint64_t seed, int64_t epoch,
                                        const OrderOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("order over ", n, " rows"));
  if (epoch < 0) return absl::InvalidArgumentError(absl::StrCat("epoch must be >= 0, got ", epoch));
  SampleOrder o;
  o.n_ = n;
  o.options_ = options;
  o.epoch_key_ = Mix64(Mix64(seed) ^ Mix64(static_cast<uint64_t>(epoch) ^ kEpochTag));
  if (!options.shuffle || n == 0) return o;
  const uint64_t un = static_cast<uint64_t>(n);
  if (options.mode == ShuffleMode::kRow) {
    o.rows_ = KeyedBijection(un, o.epoch_key_ ^ kRowsTag);
    return o;
  }
  const int64_t k = options.block_rows;
  o.num_blocks_ = (n + k - 1) / k;
  o.deficit_ = o.num_blocks_ * k - n;
  o.blocks_ = KeyedBijection(static_cast<uint64_t>(o.num_blocks_), o.epoch_key_ ^ kBlocksTag);
  if (o.deficit_ > 0) {
    o.partial_slot_ =
        static_cast<int64_t>(o.blocks_.Inverse(static_cast<uint64_t>(o.num_blocks_ - 1)));
  }
  return o;
}

int64_t SampleOrder::WindowStart(int64_t w) const {
  const int64_t first_slot = std::min(w * options_.window_blocks, num_blocks_);
  int64_t start = first_slot * options_.block_rows;
  if (partial_slot_ >= 0 && first_slot > partial_slot_) start -= deficit_;
  return start;
}

int64_t SampleOrder::WindowOf(int64_t position) const {
  int64_t w = position / (options_.window_blocks * options_.block_rows);
  // The partial block shortens the windows after it by less than a block, so
  // the window is the candidate or the next one.
  while (WindowStart(w + 1) <= position) ++w;
  return w;
}

KeyedBijection SampleOrder::WindowBijection(int64_t w) const {
  const int64_t rows = WindowStart(w + 1) - WindowStart(w);
  return KeyedBijection(static_cast<uint64_t>(rows),
                        Mix64(epoch_key_ ^ kWindowTag) ^ Mix64(static_cast<uint64_t>(w)));
}

int64_t SampleOrder::BlockRow(int64_t w, int64_t j) const {
  // j-th row of window w, blocks in slot order; the partial block (if in this
  // window) holds block_rows - deficit rows.
  const int64_t k = options_.block_rows;
  const int64_t s0 = w * options_.window_blocks;
  int64_t local = j;
  if (partial_slot_ >= 0 && partial_slot_ >= s0 && partial_slot_ < s0 + options_.window_blocks) {
    const int64_t q = partial_slot_ - s0;
    if (j >= (q + 1) * k - deficit_) local = j + deficit_;
  }
  const int64_t slot = s0 + local / k;
  return static_cast<int64_t>(blocks_.Forward(static_cast<uint64_t>(slot))) * k + local % k;
}

int64_t SampleOrder::At(int64_t position) const {
  if (!options_.shuffle) return position;
  if (options_.mode == ShuffleMode::kRow) {
    return static_cast<int64_t>(rows_.Forward(static_cast<uint64_t>(position)));
  }
  const int64_t w = WindowOf(position);
  const KeyedBijection within = WindowBijection(w);
  return BlockRow(
      w, static_cast<int64_t>(within.Forward(static_cast<uint64_t>(position - WindowStart(w)))));
}

void SampleOrder::Fill(int64_t begin, int64_t end, int64_t* out) const {
  if (!options_.shuffle) {
    for (int64_t p = begin; p < end; ++p) *out++ = p;
    return;
  }
  // int64_t and uint64_t may alias: the bijections write positions in place.
  if (options_.mode == ShuffleMode::kRow) {
    if (end > begin) {
      rows_.ForwardRange(static_cast<uint64_t>(begin), static_cast<size_t>(end - begin),
                         reinterpret_cast<uint64_t*>(out));
    }
    return;
  }
  // Per window: its bijection and the blocks of its slots, computed once.
  const int64_t k = options_.block_rows;
  std::vector<int64_t> first_row;
  int64_t p = begin;
  while (p < end) {
    const int64_t w = WindowOf(p);
    const int64_t ws = WindowStart(w);
    const int64_t we = std::min(WindowStart(w + 1), end);
    const KeyedBijection within = WindowBijection(w);
    const int64_t s0 = w * options_.window_blocks;
    const int64_t slots = std::min(options_.window_blocks, num_blocks_ - s0);
    first_row.resize(static_cast<size_t>(slots));
    blocks_.ForwardRange(static_cast<uint64_t>(s0), static_cast<size_t>(slots),
                         reinterpret_cast<uint64_t*>(first_row.data()));
    for (int64_t& r : first_row) r *= k;
    const int64_t q = partial_slot_ >= s0 && partial_slot_ < s0 + slots ? partial_slot_ - s0 : -1;
    const int64_t short_end = (q + 1) * k - deficit_;  // first row after the short block
    const size_t count = static_cast<size_t>(we - p);
    within.ForwardRange(static_cast<uint64_t>(p - ws), count, reinterpret_cast<uint64_t*>(out));
    for (size_t i = 0; i < count; ++i) {
      int64_t j = out[i];
      if (q >= 0 && j >= short_end) j += deficit_;
      out[i] = first_row[j / k] + j % k;
    }
    out += count;
    p = we;
  }
}

}  // namespace flywheel::loader

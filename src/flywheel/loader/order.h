// The sample order of an epoch: which row is served at each position.
//
// The order is a pure function of (seed, epoch, position) over [0, n): a
// keyed bijection (a Feistel network over the next power of two, with cycle
// walking back into [0, n)), so it needs O(1) memory however large the table,
// any position can be computed on its own, and every thread, rank or restart
// computes the same order. An I/O-aware block mode shuffles fixed-size blocks
// of consecutive rows (about a page each) and then rows within a window of
// blocks, so a batch touches few pages. Specification and measured shuffle
// quality: docs/loader.md, "Order".
//
// Thread-safety: value types; const methods are safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flywheel/base/status.h"

namespace flywheel::loader {

// A keyed pseudo-random permutation of [0, n).
class KeyedBijection {
 public:
  // REQUIRES: n >= 1.
  KeyedBijection(uint64_t n, uint64_t key);

  uint64_t n() const { return n_; }
  // REQUIRES: x < n.
  uint64_t Forward(uint64_t x) const;
  // Forward's inverse. REQUIRES: y < n.
  uint64_t Inverse(uint64_t y) const;
  // out[i] = Forward(first + i) for i in [0, count), computed several inputs
  // at a time (the rounds of one input form a serial chain; independent
  // inputs overlap). REQUIRES: first + count <= n.
  void ForwardRange(uint64_t first, size_t count, uint64_t* out) const;
  // Tests: false makes ForwardRange use the portable code only (true, the
  // default: 512-bit vectors where the CPU has AVX-512DQ).
  static void AllowSimdForTesting(bool allowed);

 private:
  // Half-rounds: small domains need many to reach every permutation about
  // equally often (order_test measures it); large ones use fewer (Luby-Rackoff
  // needs 4 for a strong pseudo-random permutation).
  static constexpr int kMaxRounds = 24;
  static constexpr int kSmallDomainBits = 16;
  static constexpr int kLargeDomainRounds = 12;
  uint64_t Permute(uint64_t x) const;
  uint64_t Unpermute(uint64_t x) const;
  // v[i] = Permute(v[i]) for i in [0, count), in groups of independent lanes.
  void PermuteMany(uint64_t* v, size_t count) const;

  uint64_t n_ = 1;
  int rounds_ = kMaxRounds;
  int lo_bits_ = 1;
  uint64_t lo_mask_ = 1;
  uint64_t hi_mask_ = 1;
  uint64_t keys_[kMaxRounds] = {};
};

enum class ShuffleMode : uint8_t {
  // Every row is placed independently: the best shuffle, one random read per row.
  kRow = 0,
  // Blocks of `block_rows` consecutive rows are shuffled, then rows are
  // shuffled within each window of `window_blocks` consecutive (shuffled)
  // blocks: a batch reads about window_blocks pages instead of batch_size.
  kBlock = 1,
};
std::string_view ShuffleModeName(ShuffleMode mode);
Result<ShuffleMode> ParseShuffleMode(std::string_view name);

struct OrderOptions {
  // false: position p serves row p (the identity order).
  bool shuffle = true;
  ShuffleMode mode = ShuffleMode::kRow;
  // Block mode: rows per block, >= 1 (the loader picks a page's worth when
  // its own option is 0).
  int64_t block_rows = 1024;
  // Block mode: blocks per window, >= 1. Larger windows shuffle better and
  // keep more pages in flight.
  int64_t window_blocks = 16;

  Status Validate() const;
};

// The order of one epoch over [0, n). Cheap to construct (a few hashes).
class SampleOrder {
 public:
  // REQUIRES: n >= 0, epoch >= 0; options valid (checked).
  static Result<SampleOrder> Create(int64_t n, uint64_t seed, int64_t epoch,
                                    const OrderOptions& options);

  int64_t n() const { return n_; }
  // The row served at `position`. REQUIRES: 0 <= position < n.
  int64_t At(int64_t position) const;
  // out[i] = At(begin + i) for positions [begin, end); shares work between
  // neighbouring positions. REQUIRES: 0 <= begin <= end <= n.
  void Fill(int64_t begin, int64_t end, int64_t* out) const;

 private:
  SampleOrder() = default;
  // Block mode: first position of window w (windows are counted in slots).
  int64_t WindowStart(int64_t w) const;
  int64_t WindowOf(int64_t position) const;
  KeyedBijection WindowBijection(int64_t w) const;
  int64_t BlockRow(int64_t w, int64_t j) const;

  int64_t n_ = 0;
  OrderOptions options_;
  uint64_t epoch_key_ = 0;
  KeyedBijection rows_{1, 0};    // row mode
  KeyedBijection blocks_{1, 0};  // block mode: slot -> block
  int64_t num_blocks_ = 0;
  int64_t deficit_ = 0;        // rows the last (partial) block lacks
  int64_t partial_slot_ = -1;  // slot holding the partial block; -1 when none
};

// Derives the key of an independent stream (e.g. one table of a mixture)
// from a seed; pure.
uint64_t StreamSeed(uint64_t seed, uint64_t stream);

}  // namespace flywheel::loader

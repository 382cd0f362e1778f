// Token packing (packing.h). Semantics: docs/transforms.md#packing.
#include "flywheel/loader/transforms/packing.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace flywheel::loader {
namespace {

constexpr int64_t kMaxSeqLen = int64_t{1} << 30;

// Blocks live in slots of grow-only arrays: complete blocks in slots
// [begin_, end_), the partial block (fill_ tokens, fill_ < seq_len) in slot
// end_. Take() advances begin_; slots are compacted to the front when the
// arrays are full, so memory stays at the high-water mark of pending blocks.
class TokenPackerImpl final : public TokenPacker {
 public:
  TokenPackerImpl(const PackingOptions& options, const PackingState& resume)
      : options_(options),
        seq_(options.seq_len),
        next_doc_(resume.document),
        skip_(resume.offset),
        skip_pending_(true),
        blocks_taken_(resume.blocks) {}

  const PackingOptions& options() const override { return options_; }
  int64_t ready() const override { return end_ - begin_; }
  int64_t next_document() const override { return next_doc_; }
  int64_t truncated_tokens() const override { return truncated_; }

  PackingState state() const override {
    if (begin_ < end_) return {meta_[begin_].doc, meta_[begin_].offset, blocks_taken_};
    if (fill_ > 0) return {meta_[end_].doc, meta_[end_].offset, blocks_taken_};
    return {next_doc_, skip_pending_ ? skip_ : 0, blocks_taken_};
  }

  Status Add(std::span<const int64_t> offsets, std::span<const int32_t> values) override {
    if (finished_) return absl::FailedPreconditionError("TokenPacker::Add after Finish");
    if (offsets.empty()) {
      return absl::InvalidArgumentError("list offsets are empty (need documents + 1 entries)");
    }
    const int64_t eos = options_.eos_token.has_value() ? 1 : 0;
    const int64_t n_values = static_cast<int64_t>(values.size());
    if (offsets[0] < 0 || offsets[0] > n_values) {
      return absl::InvalidArgumentError(
          absl::StrCat("list offsets[0] = ", offsets[0], " outside the ", n_values, " values"));
    }
    for (size_t i = 1; i < offsets.size(); ++i) {
      if (offsets[i] < offsets[i - 1] || offsets[i] > n_values) {
        return absl::InvalidArgumentError(absl::StrCat(
            "list offsets[", i, "] = ", offsets[i], " (offsets[", i - 1, "] = ", offsets[i - 1],
            ", ", n_values, " values): offsets must be non-decreasing and within the values"));
      }
      if (offsets[i] - offsets[i - 1] + eos > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("document ",
                                                       next_doc_ + static_cast<int64_t>(i) - 1,
                                                       " has more than 2^31 - 1 tokens"));
      }
    }
    if (skip_pending_ && offsets.size() > 1 && skip_ > 0 &&
        skip_ >= offsets[1] - offsets[0] + eos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resume state: offset ", skip_, " is not inside document ", next_doc_, " (",
          offsets[1] - offsets[0] + eos, " tokens with EOS): not the same document stream?"));
    }
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      const int32_t* doc = values.data() + offsets[i];
      const int64_t len = offsets[i + 1] - offsets[i];
      int64_t o = 0;
      if (skip_pending_) {
        o = skip_;
        skip_pending_ = false;
        skip_ = 0;
      }
      if (options_.split_documents) {
        AddSplit(doc, len, o);
      } else {
        AddWhole(doc, len);
      }
      ++next_doc_;
    }
    return absl::OkStatus();
  }

  void Finish() override {
    if (fill_ > 0) PadOut();
    finished_ = true;
  }

  int64_t Take(int64_t max_blocks, const PackedBlocksView& out) override {
    const int64_t k = std::clamp<int64_t>(max_blocks, 0, end_ - begin_);
    if (k == 0) return 0;
    const size_t at = static_cast<size_t>(begin_) * seq_, n = static_cast<size_t>(k) * seq_;
    if (out.tokens != nullptr) std::memcpy(out.tokens, &tok_[at], n * sizeof(int32_t));
    if (out.segment_ids != nullptr) std::memcpy(out.segment_ids, &seg_[at], n * sizeof(int32_t));
    if (out.positions != nullptr) std::memcpy(out.positions, &pos_[at], n * sizeof(int32_t));
    if (out.mask != nullptr) std::memcpy(out.mask, &mask_[at], n);
    if (out.first_document != nullptr) {
      for (int64_t j = 0; j < k; ++j) out.first_document[j] = meta_[begin_ + j].doc;
    }
    begin_ += k;
    blocks_taken_ += k;
    if (begin_ == end_ && fill_ == 0) begin_ = end_ = 0;
    return k;
  }

 private:
  struct Meta {
    int64_t doc = 0;     // global document of the block's first token
    int64_t offset = 0;  // that token's offset in the document (EOS counted)
  };

  // Split mode: places tokens [o, len + eos) of the document, filling blocks.
  void AddSplit(const int32_t* doc, int64_t len, int64_t o) {
    const int64_t piece = len + (options_.eos_token.has_value() ? 1 : 0);
    while (o < piece) {
      const int64_t n = std::min(piece - o, seq_ - fill_);
      WriteChunk(doc, len, o, n);
      o += n;
    }
  }

  // Whole-document mode: the document (truncated to seq_len) goes into the
  // current block if it fits, else into a new one.
  void AddWhole(const int32_t* doc, int64_t len) {
    const int64_t full = len + (options_.eos_token.has_value() ? 1 : 0);
    const int64_t piece = std::min(full, seq_);
    truncated_ += full - piece;
    if (piece == 0) return;
    if (fill_ + piece > seq_) PadOut();
    if (piece < full && options_.eos_token.has_value()) {
      // Truncated: keep the first seq_len - 1 tokens and the EOS.
      WriteChunk(doc, piece - 1, 0, piece);
    } else {
      WriteChunk(doc, len, 0, piece);
    }
  }

  // Writes piece tokens [o, o + n) — document tokens below len, the EOS at
  // len — into the current block as one segment. REQUIRES: n <= seq_ - fill_.
  void WriteChunk(const int32_t* doc, int64_t len, int64_t o, int64_t n) {
    if (fill_ == 0) StartBlock(o);
    const size_t at = static_cast<size_t>(end_) * seq_ + fill_;
    const int64_t from_doc = std::clamp<int64_t>(len - o, 0, n);
    if (from_doc > 0)
      std::memcpy(&tok_[at], doc + o, static_cast<size_t>(from_doc) * sizeof(int32_t));
    if (from_doc < n) tok_[at + from_doc] = *options_.eos_token;  // n - from_doc == 1
    ++segment_;
    std::fill_n(&seg_[at], n, segment_);
    const int32_t base = options_.positions_continue_across_blocks ? static_cast<int32_t>(o) : 0;
    int32_t* p = &pos_[at];
    for (int64_t k = 0; k < n; ++k) p[k] = base + static_cast<int32_t>(k);
    std::memset(&mask_[at], 1, static_cast<size_t>(n));
    fill_ += n;
    if (fill_ == seq_) {
      ++end_;
      fill_ = 0;
    }
  }

  void StartBlock(int64_t offset) {
    if (end_ >= capacity_) MakeRoom();
    meta_[end_] = {next_doc_, offset};
    segment_ = 0;
  }

  // Completes the partial block with padding.
  void PadOut() {
    const size_t at = static_cast<size_t>(end_) * seq_ + fill_;
    const size_t n = static_cast<size_t>(seq_ - fill_);
    std::fill_n(&tok_[at], n, options_.pad_token);
    std::fill_n(&seg_[at], n, 0);
    std::fill_n(&pos_[at], n, 0);
    std::memset(&mask_[at], 0, n);
    ++end_;
    fill_ = 0;
  }

  // Ensures slot end_ exists: compacts taken slots away, else doubles.
  // Only called when the partial block is empty (from StartBlock).
  void MakeRoom() {
    const int64_t live = end_ - begin_;
    if (begin_ > 0 && live < capacity_ / 2) {
      const size_t from = static_cast<size_t>(begin_) * seq_, n = static_cast<size_t>(live) * seq_;
      std::memmove(&tok_[0], &tok_[from], n * sizeof(int32_t));
      std::memmove(&seg_[0], &seg_[from], n * sizeof(int32_t));
      std::memmove(&pos_[0], &pos_[from], n * sizeof(int32_t));
      std::memmove(&mask_[0], &mask_[from], n);
      std::move(meta_.begin() + begin_, meta_.begin() + end_, meta_.begin());
      begin_ = 0;
      end_ = live;
      return;
    }
    const int64_t cap = std::max<int64_t>(4, capacity_ * 2);
    Grow(tok_, cap);
    Grow(seg_, cap);
    Grow(pos_, cap);
    Grow(mask_, cap);
    meta_.resize(cap);
    capacity_ = cap;
  }

  template <typename T>
  void Grow(std::unique_ptr<T[]>& a, int64_t cap) {
    auto b = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(cap) * seq_);
    if (a) std::memcpy(b.get(), a.get(), static_cast<size_t>(end_) * seq_ * sizeof(T));
    a = std::move(b);
  }

  const PackingOptions options_;
  const int64_t seq_;
  int64_t next_doc_;
  int64_t skip_;
  bool skip_pending_;
  int64_t blocks_taken_;
  bool finished_ = false;
  int64_t truncated_ = 0;

  std::unique_ptr<int32_t[]> tok_, seg_, pos_;
  std::unique_ptr<uint8_t[]> mask_;
  std::vector<Meta> meta_;
  int64_t capacity_ = 0;  // in blocks
  int64_t begin_ = 0;
  int64_t end_ = 0;
  int64_t fill_ = 0;
  int32_t segment_ = 0;
};

}  // namespace

Status PackingOptions::Validate() const {
  if (seq_len < 1 || seq_len > kMaxSeqLen) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackingOptions.seq_len = ", seq_len, ": must be in [1, 2^30]"));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<TokenPacker>> TokenPacker::Create(const PackingOptions& options,
                                                         const PackingState& resume) {
  FW_RETURN_IF_ERROR(options.Validate());
  if (resume.document < 0 || resume.offset < 0 || resume.blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PackingState {document ", resume.document,
                                                   ", offset ", resume.offset, ", blocks ",
                                                   resume.blocks, "}: fields must be >= 0"));
  }
  if (!options.split_documents && resume.offset != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PackingState.offset = ", resume.offset,
                     ": blocks start at document boundaries when split_documents is false"));
  }
  return std::unique_ptr<TokenPacker>(new TokenPackerImpl(options, resume));
}

Result<PackedBlocks> PackDocuments(std::span<const int64_t> offsets,
                                   std::span<const int32_t> values, const PackingOptions& options) {
  FW_ASSIGN_OR_RETURN(auto packer, TokenPacker::Create(options));
  FW_RETURN_IF_ERROR(packer->Add(offsets, values));
  packer->Finish();
  PackedBlocks out;
  out.seq_len = options.seq_len;
  out.num_blocks = packer->ready();
  const size_t n = static_cast<size_t>(out.num_blocks * options.seq_len);
  out.tokens.resize(n);
  out.segment_ids.resize(n);
  out.positions.resize(n);
  out.mask.resize(n);
  out.first_document.resize(out.num_blocks);
  packer->Take(out.num_blocks, {out.tokens.data(), out.segment_ids.data(), out.positions.data(),
                                out.mask.data(), out.first_document.data()});
  return out;
}

}  // namespace flywheel::loader

// Token packing: concatenates variable-length token lists (a list<int32>
// column: int64 offsets + int32 values) into fixed seq_len blocks, with
// per-token segment ids and position ids that restart at every document, and
// a mask for padding. The exact semantics are in docs/transforms.md#packing.
//
// Output of one block (each [seq_len]):
//   tokens       the tokens; pad_token where mask is 0
//   segment_ids  1, 2, 3, ... for the successive document pieces in this
//                block (block-local; a document continued from the previous
//                block is 1); 0 = padding. Attention may cross tokens only
//                when their segment ids are equal and non-zero (the
//                seqio/Grain convention).
//   positions    0, 1, 2, ... from the start of each piece: they restart at
//                every document start, and at the start of every block
//                unless positions_continue_across_blocks; 0 on padding
//   mask         1 for real tokens (including EOS), 0 for padding
// and first_document: the global index of the document the block's first
// token comes from.
//
// Streaming: Add() documents in order as they arrive, Take() whole blocks as
// they fill, Finish() at the end of the stream to pad out the last one. The
// resume state is O(1) — where the first untaken block starts in the document
// stream (document index, tokens into it) — not the pending tokens: a packer
// created from a saved state and fed the same documents from
// state.document on produces exactly the blocks the original would have.
//
// Thread-safety: a TokenPacker is not thread-safe (one per stream).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::loader {

struct PackingOptions {
  // Tokens per block. [1, 2^30].
  int64_t seq_len = 2048;
  // true (default): a document that does not fit in the rest of the current
  // block continues in the next one; no token is lost and only the last
  // block (after Finish) is padded.
  // false: documents are never split. One that does not fit in the rest of
  // the block starts a new block (the current one is padded out), and one
  // longer than seq_len keeps only its first seq_len tokens (EOS included);
  // the dropped tokens are counted in truncated_tokens().
  bool split_documents = true;
  // If set, appended after every document (the last one included) and
  // counted as part of it (same segment, next position, mask 1). Any int32.
  std::optional<int32_t> eos_token;
  // Token written where mask is 0.
  int32_t pad_token = 0;
  // When a split document continues in the next block its positions go on
  // counting (true) or restart at 0 (false, default: positions stay below
  // seq_len, as models with seq_len position embeddings need).
  bool positions_continue_across_blocks = false;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// The resume point of a packed stream: the first block not yet taken starts
// `offset` tokens (EOS counted) into global document `document`, and
// `blocks` blocks were taken before it. Plain integers: JSON-able.
struct PackingState {
  int64_t document = 0;
  int64_t offset = 0;
  int64_t blocks = 0;
  friend bool operator==(const PackingState&, const PackingState&) = default;
};

// Caller-owned outputs for k blocks: arrays of [k, seq_len] (first_document:
// [k]), row-major. Null members are not written.
struct PackedBlocksView {
  int32_t* tokens = nullptr;
  int32_t* segment_ids = nullptr;
  int32_t* positions = nullptr;
  uint8_t* mask = nullptr;
  int64_t* first_document = nullptr;
};

class TokenPacker {
 public:
  // Starts a stream, or resumes one from `resume` (then the first document
  // passed to Add is global document resume.document).
  // InvalidArgument for bad options or a state with negative fields or, with
  // split_documents = false, a non-zero offset.
  static Result<std::unique_ptr<TokenPacker>> Create(const PackingOptions& options,
                                                     const PackingState& resume = {});
  virtual ~TokenPacker() = default;

  // Appends the documents of a list<int32> chunk: document i is
  // values[offsets[i] .. offsets[i + 1]), for i < offsets.size() - 1
  // (offsets[0] may be non-zero, as in a column slice).
  // InvalidArgument (nothing added) for offsets that are empty, negative,
  // decreasing or beyond values.size(); for a resume offset beyond the first
  // document's length; FailedPrecondition after Finish().
  virtual Status Add(std::span<const int64_t> offsets, std::span<const int32_t> values) = 0;
  // End of stream: pads the partial block, if any, into a complete one.
  virtual void Finish() = 0;

  // Complete blocks waiting to be taken.
  virtual int64_t ready() const = 0;
  // Writes min(max_blocks, ready()) blocks to `out` and returns how many.
  virtual int64_t Take(int64_t max_blocks, const PackedBlocksView& out) = 0;

  // The resume point after the blocks taken so far (see PackingState).
  virtual PackingState state() const = 0;
  // Global index of the next document Add expects.
  virtual int64_t next_document() const = 0;
  // Tokens dropped by truncation (split_documents = false).
  virtual int64_t truncated_tokens() const = 0;
  virtual const PackingOptions& options() const = 0;
};

// Owned outputs of PackDocuments: the arrays of PackedBlocksView.
struct PackedBlocks {
  int64_t num_blocks = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> positions;
  std::vector<uint8_t> mask;
  std::vector<int64_t> first_document;
};

// Packs a whole list<int32> column (Add + Finish + Take everything).
Result<PackedBlocks> PackDocuments(std::span<const int64_t> offsets,
                                   std::span<const int32_t> values, const PackingOptions& options);

}  // namespace flywheel::loader

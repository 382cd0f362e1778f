// Fuzzes token packing (flywheel/loader/transforms/packing.h) against its
// invariants. The input chooses the options, the document lengths, how the
// stream is chunked and where it is checkpointed:
//   byte 0: seq_len - 1 (1..256); byte 1: flags (split, EOS, continue
//   positions); then one byte per document (its length), until a 0xFF byte
//   or the end; the remaining bytes drive Add chunk sizes and Take amounts.
// Checks: the unpadded tokens of split-mode output equal the input stream;
// streaming equals the one-shot PackDocuments; a packer resumed from the
// state after any Take produces the rest of the blocks exactly.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "flywheel/loader/transforms/packing.h"

namespace {

using flywheel::loader::PackedBlocks;
using flywheel::loader::PackingOptions;
using flywheel::loader::TokenPacker;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Out {
  std::vector<int32_t> tok, seg, pos;
  std::vector<uint8_t> mask;
  std::vector<int64_t> first;
};

void TakeInto(TokenPacker& p, int64_t k, int64_t seq, Out& o) {
  const size_t at = o.tok.size();
  const size_t n = static_cast<size_t>(k * seq);
  o.tok.resize(at + n);
  o.seg.resize(at + n);
  o.pos.resize(at + n);
  o.mask.resize(at + n);
  const size_t f = o.first.size();
  o.first.resize(f + k);
  Check(p.Take(k, {o.tok.data() + at, o.seg.data() + at, o.pos.data() + at, o.mask.data() + at,
                   o.first.data() + f}) == k);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  PackingOptions opt;
  opt.seq_len = data[0] + 1;
  opt.split_documents = (data[1] & 1) == 0;
  if (data[1] & 2) opt.eos_token = -2;
  opt.positions_continue_across_blocks = (data[1] & 4) != 0;
  opt.pad_token = -1;
  size_t i = 2;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> values;
  for (; i < size && data[i] != 0xFF && offsets.size() < 2000; ++i) {
    for (int k = 0; k < data[i]; ++k) values.push_back(static_cast<int32_t>(values.size()));
    offsets.push_back(static_cast<int64_t>(values.size()));
  }
  const std::span<const uint8_t> drive(data + std::min(i + 1, size), size - std::min(i + 1, size));
  size_t d = 0;
  auto next = [&](int mod) { return d < drive.size() ? drive[d++] % mod : 1; };

  auto whole = flywheel::loader::PackDocuments(offsets, values, opt);
  Check(whole.ok());
  const int64_t seq = opt.seq_len;
  const int64_t docs = static_cast<int64_t>(offsets.size()) - 1;
  if (opt.split_documents) {
    std::vector<int32_t> flat;
    for (size_t t = 0; t < whole->tokens.size(); ++t) {
      if (whole->mask[t]) flat.push_back(whole->tokens[t]);
    }
    std::vector<int32_t> want;
    for (int64_t k = 0; k < docs; ++k) {
      for (int64_t t = offsets[k]; t < offsets[k + 1]; ++t) want.push_back(values[t]);
      if (opt.eos_token) want.push_back(*opt.eos_token);
    }
    Check(flat == want);
  }

  // Streamed, with one checkpoint/resume at a point the input picks.
  Out out;
  auto packer = TokenPacker::Create(opt).value();
  const int64_t checkpoint_after = next(8);
  int64_t takes = 0, fed = 0;
  bool finished = false;
  while (!finished || packer->ready() > 0) {
    if (fed < docs) {
      const int64_t n = std::min<int64_t>(docs - fed, next(6));
      Check(packer->Add({&offsets[fed], static_cast<size_t>(n + 1)}, values).ok());
      fed += n;
    } else if (!finished) {
      packer->Finish();
      finished = true;
    }
    TakeInto(*packer, std::min<int64_t>(packer->ready(), next(3)), seq, out);
    if (++takes == checkpoint_after) {
      const auto st = packer->state();
      Check(st.blocks == static_cast<int64_t>(out.first.size()));
      Check(st.document <= fed);
      packer = TokenPacker::Create(opt, st).value();
      fed = st.document;
      finished = false;
    }
  }
  Check(static_cast<int64_t>(out.first.size()) == whole->num_blocks);
  Check(out.tok == whole->tokens && out.seg == whole->segment_ids && out.pos == whole->positions &&
        out.mask == whole->mask && out.first == whole->first_document);
  return 0;
}

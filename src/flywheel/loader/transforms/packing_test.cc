#include "flywheel/loader/transforms/packing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "flywheel/base/rng.h"

namespace flywheel::loader {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A list<int32> column: documents of random lengths in [0, max_len]; the
// tokens encode (document, offset) so a misplaced token is visible.
struct Docs {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> values;
  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  std::span<const int32_t> doc(int64_t i) const {
    return {values.data() + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i])};
  }
};

Docs RandomDocs(int n, int max_len, uint64_t seed) {
  Docs d;
  SplitMix64 rng(seed);
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(rng.Uniform(max_len + 1));
    for (int k = 0; k < len; ++k) d.values.push_back(i * 10000 + k + 1);
    d.offsets.push_back(static_cast<int64_t>(d.values.size()));
  }
  return d;
}

// The obvious reference for split mode: lay the stream out token by token
// (with EOS), cut it every seq_len tokens, pad the last block.
PackedBlocks Reference(const Docs& d, const PackingOptions& o) {
  struct Tok {
    int32_t token;
    int64_t doc;
    int64_t offset;
  };
  std::vector<Tok> stream;
  for (int64_t i = 0; i < d.size(); ++i) {
    int64_t k = 0;
    for (int32_t t : d.doc(i)) stream.push_back({t, i, k++});
    if (o.eos_token) stream.push_back({*o.eos_token, i, k});
  }
  PackedBlocks r;
  r.seq_len = o.seq_len;
  r.num_blocks = (static_cast<int64_t>(stream.size()) + o.seq_len - 1) / o.seq_len;
  for (int64_t b = 0; b < r.num_blocks; ++b) {
    int32_t seg = 0;
    int64_t seg_start = 0;
    for (int64_t j = 0; j < o.seq_len; ++j) {
      const size_t at = static_cast<size_t>(b * o.seq_len + j);
      if (at >= stream.size()) {
        r.tokens.push_back(o.pad_token);
        r.segment_ids.push_back(0);
        r.positions.push_back(0);
        r.mask.push_back(0);
        continue;
      }
      if (j == 0) r.first_document.push_back(stream[at].doc);
      if (j == 0 || stream[at].doc != stream[at - 1].doc) {
        ++seg;
        seg_start = stream[at].offset;
      }
      r.tokens.push_back(stream[at].token);
      r.segment_ids.push_back(seg);
      r.positions.push_back(static_cast<int32_t>(
          o.positions_continue_across_blocks ? stream[at].offset : stream[at].offset - seg_start));
      r.mask.push_back(1);
    }
  }
  return r;
}

void ExpectSame(const PackedBlocks& a, const PackedBlocks& b) {
  ASSERT_EQ(a.num_blocks, b.num_blocks);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.mask, b.mask);
  EXPECT_EQ(a.first_document, b.first_document);
}

TEST(TokenPackerTest, SmallExampleHasTheDocumentedLayout) {
  // Documents [1 2 3] [4 5] [6 7 8 9 10] with EOS 0 into blocks of 4.
  const std::vector<int64_t> offsets{0, 3, 5, 10};
  const std::vector<int32_t> values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  PackingOptions o;
  o.seq_len = 4;
  o.eos_token = 0;
  o.pad_token = -1;
  auto r = PackDocuments(offsets, values, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->num_blocks, 4);
  EXPECT_THAT(r->tokens,
              ElementsAre(1, 2, 3, 0, /**/ 4, 5, 0, 6, /**/ 7, 8, 9, 10, /**/ 0, -1, -1, -1));
  EXPECT_THAT(r->segment_ids,
              ElementsAre(1, 1, 1, 1, /**/ 1, 1, 1, 2, /**/ 1, 1, 1, 1, /**/ 1, 0, 0, 0));
  EXPECT_THAT(r->positions,
              ElementsAre(0, 1, 2, 3, /**/ 0, 1, 2, 0, /**/ 0, 1, 2, 3, /**/ 0, 0, 0, 0));
  EXPECT_THAT(r->mask, ElementsAre(1, 1, 1, 1, /**/ 1, 1, 1, 1, /**/ 1, 1, 1, 1, /**/ 1, 0, 0, 0));
  EXPECT_THAT(r->first_document, ElementsAre(0, 1, 2, 2));

  o.positions_continue_across_blocks = true;
  r = PackDocuments(offsets, values, o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->positions,
              ElementsAre(0, 1, 2, 3, /**/ 0, 1, 2, 0, /**/ 1, 2, 3, 4, /**/ 5, 0, 0, 0));
}

TEST(TokenPackerTest, NoTokenIsLostOrDuplicated) {
  for (int64_t seq_len : {1, 2, 7, 64, 1000}) {
    for (bool eos : {false, true}) {
      const Docs d = RandomDocs(300, 150, seq_len * 2 + eos);
      PackingOptions o;
      o.seq_len = seq_len;
      if (eos) o.eos_token = -7;
      auto r = PackDocuments(d.offsets, d.values, o);
      ASSERT_TRUE(r.ok()) << r.status();
      std::vector<int32_t> unpadded, expected;
      for (size_t i = 0; i < r->tokens.size(); ++i) {
        if (r->mask[i]) unpadded.push_back(r->tokens[i]);
      }
      for (int64_t i = 0; i < d.size(); ++i) {
        for (int32_t t : d.doc(i)) expected.push_back(t);
        if (eos) expected.push_back(-7);
      }
      EXPECT_EQ(unpadded, expected);
      // Only the tail of the last block is padding.
      const size_t valid = expected.size();
      for (size_t i = 0; i < r->mask.size(); ++i) ASSERT_EQ(r->mask[i], i < valid ? 1 : 0);
      EXPECT_EQ(r->num_blocks, (static_cast<int64_t>(valid) + seq_len - 1) / seq_len);
    }
  }
}

TEST(TokenPackerTest, SegmentsAndPositionsMatchTheReferenceLayout) {
  for (int64_t seq_len : {1, 3, 16, 100}) {
    for (bool cont : {false, true}) {
      for (bool eos : {false, true}) {
        const Docs d = RandomDocs(200, 60, 99 + seq_len);
        PackingOptions o;
        o.seq_len = seq_len;
        o.positions_continue_across_blocks = cont;
        if (eos) o.eos_token = 2;
        auto r = PackDocuments(d.offsets, d.values, o);
        ASSERT_TRUE(r.ok());
        ExpectSame(*r, Reference(d, o));
      }
    }
  }
}

TEST(TokenPackerTest, PositionsResetExactlyAtDocumentAndBlockStarts) {
  const Docs d = RandomDocs(500, 40, 5);
  PackingOptions o;
  o.seq_len = 32;
  auto r = PackDocuments(d.offsets, d.values, o);
  ASSERT_TRUE(r.ok());
  for (int64_t b = 0; b < r->num_blocks; ++b) {
    for (int64_t j = 0; j < o.seq_len; ++j) {
      const size_t i = b * o.seq_len + j;
      if (!r->mask[i]) continue;
      const int32_t t = r->tokens[i];
      const bool doc_start = t % 10000 == 1;  // token k = 0 of its document
      const bool starts_segment = j == 0 || r->segment_ids[i] != r->segment_ids[i - 1];
      EXPECT_EQ(r->positions[i] == 0, starts_segment) << i;
      if (doc_start) {
        EXPECT_TRUE(starts_segment) << i;
      }
      if (!starts_segment) {
        EXPECT_EQ(r->positions[i], r->positions[i - 1] + 1);
        EXPECT_EQ(t / 10000, r->tokens[i - 1] / 10000);  // same document
      } else if (j > 0) {
        EXPECT_EQ(r->segment_ids[i], r->segment_ids[i - 1] + 1);
        EXPECT_NE(t / 10000, r->tokens[i - 1] / 10000);
      }
      if (j == 0) {
        EXPECT_EQ(r->first_document[b], t / 10000);
      }
    }
  }
}

TEST(TokenPackerTest, TruncateModeNeverSplitsAndCountsDroppedTokens) {
  // Lengths 3, 6 (> seq_len 5), 2, 4, 0.
  const std::vector<int64_t> offsets{0, 3, 9, 11, 15, 15};
  std::vector<int32_t> values(15);
  for (int i = 0; i < 15; ++i) values[i] = 100 + i;
  PackingOptions o;
  o.seq_len = 5;
  o.split_documents = false;
  o.pad_token = -1;
  auto packer = *TokenPacker::Create(o);
  ASSERT_TRUE(packer->Add(offsets, values).ok());
  EXPECT_EQ(packer->ready(), 3);  // the 4th is partial until Finish
  packer->Finish();
  EXPECT_EQ(packer->truncated_tokens(), 1);
  ASSERT_EQ(packer->ready(), 4);
  std::vector<int32_t> tok(20), seg(20), pos(20);
  std::vector<uint8_t> mask(20);
  std::vector<int64_t> first(4);
  EXPECT_EQ(packer->Take(10, {tok.data(), seg.data(), pos.data(), mask.data(), first.data()}), 4);
  EXPECT_THAT(tok, ElementsAre(100, 101, 102, -1, -1, /**/ 103, 104, 105, 106, 107,
                               /**/ 109, 110, -1, -1, -1, /**/ 111, 112, 113, 114, -1));
  EXPECT_THAT(seg, ElementsAre(1, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 1, /**/ 1, 1, 0, 0, 0,
                               /**/ 1, 1, 1, 1, 0));
  EXPECT_THAT(pos, ElementsAre(0, 1, 2, 0, 0, /**/ 0, 1, 2, 3, 4, /**/ 0, 1, 0, 0, 0,
                               /**/ 0, 1, 2, 3, 0));
  EXPECT_THAT(first, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(packer->state(), (PackingState{5, 0, 4}));
}

TEST(TokenPackerTest, TruncateModeKeepsEosOnTruncatedDocuments) {
  const std::vector<int64_t> offsets{0, 7};
  const std::vector<int32_t> values{1, 2, 3, 4, 5, 6, 7};
  PackingOptions o;
  o.seq_len = 4;
  o.split_documents = false;
  o.eos_token = 0;
  auto r = PackDocuments(offsets, values, o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->tokens, ElementsAre(1, 2, 3, 0));
}

TEST(TokenPackerTest, TruncateModeKeepsEveryDocumentInOneBlock) {
  const Docs d = RandomDocs(300, 50, 17);
  PackingOptions o;
  o.seq_len = 40;
  o.split_documents = false;
  o.eos_token = -1;
  auto packer = *TokenPacker::Create(o);
  ASSERT_TRUE(packer->Add(d.offsets, d.values).ok());
  packer->Finish();
  const int64_t n = packer->ready();
  std::vector<int32_t> tok(n * 40), seg(n * 40);
  std::vector<uint8_t> mask(n * 40);
  packer->Take(n, {tok.data(), seg.data(), nullptr, mask.data(), nullptr});
  // Walk the blocks: each segment is a prefix of one document + EOS.
  int64_t doc = 0, dropped = 0;
  for (int64_t b = 0; b < n; ++b) {
    int64_t j = 0;
    while (j < 40 && mask[b * 40 + j]) {
      const auto want = d.doc(doc);
      const int64_t keep = std::min<int64_t>(static_cast<int64_t>(want.size()) + 1, 40);
      dropped += static_cast<int64_t>(want.size()) + 1 - keep;
      for (int64_t k = 0; k + 1 < keep; ++k) ASSERT_EQ(tok[b * 40 + j + k], want[k]);
      ASSERT_EQ(tok[b * 40 + j + keep - 1], -1);
      for (int64_t k = 0; k < keep; ++k) ASSERT_EQ(seg[b * 40 + j + k], seg[b * 40 + j]);
      j += keep;
      ++doc;
    }
    for (; j < 40; ++j) ASSERT_EQ(mask[b * 40 + j], 0);
  }
  EXPECT_EQ(doc, d.size());
  EXPECT_EQ(dropped, packer->truncated_tokens());
}

// Feeds documents in chunks of random size and takes blocks in random
// amounts; returns everything taken.
PackedBlocks Streamed(const Docs& d, const PackingOptions& o, uint64_t seed) {
  auto packer = *TokenPacker::Create(o);
  SplitMix64 rng(seed);
  PackedBlocks out;
  out.seq_len = o.seq_len;
  auto take = [&](int64_t k) {
    const size_t at = out.tokens.size(), n = static_cast<size_t>(k * o.seq_len);
    out.tokens.resize(at + n);
    out.segment_ids.resize(at + n);
    out.positions.resize(at + n);
    out.mask.resize(at + n);
    out.first_document.resize(out.num_blocks + k);
    const int64_t got = packer->Take(
        k, {out.tokens.data() + at, out.segment_ids.data() + at, out.positions.data() + at,
            out.mask.data() + at, out.first_document.data() + out.num_blocks});
    EXPECT_EQ(got, k);
    out.num_blocks += got;
  };
  int64_t i = 0;
  while (i < d.size()) {
    const int64_t n = std::min<int64_t>(d.size() - i, static_cast<int64_t>(rng.Uniform(20)));
    EXPECT_TRUE(packer->Add({&d.offsets[i], static_cast<size_t>(n + 1)}, d.values).ok());
    i += n;
    take(std::min<int64_t>(packer->ready(), static_cast<int64_t>(rng.Uniform(4))));
  }
  packer->Finish();
  take(packer->ready());
  return out;
}

TEST(TokenPackerTest, StreamingInChunksEqualsOneShot) {
  for (bool split : {true, false}) {
    const Docs d = RandomDocs(400, 90, 3);
    PackingOptions o;
    o.seq_len = 37;
    o.split_documents = split;
    o.eos_token = 5;
    auto whole = PackDocuments(d.offsets, d.values, o);
    ASSERT_TRUE(whole.ok());
    for (uint64_t seed = 0; seed < 5; ++seed) ExpectSame(Streamed(d, o, seed), *whole);
  }
}

TEST(TokenPackerTest, ResumeFromStateMatchesAnUninterruptedRun) {
  for (bool split : {true, false}) {
    for (bool cont : {false, true}) {
      const Docs d = RandomDocs(120, 70, 11);
      PackingOptions o;
      o.seq_len = 24;
      o.split_documents = split;
      o.positions_continue_across_blocks = cont;
      o.eos_token = 0;
      auto whole = PackDocuments(d.offsets, d.values, o);
      ASSERT_TRUE(whole.ok());
      const size_t S = 24;
      // Stop after taking `cut` blocks (with documents fed past that point),
      // save the state, resume a new packer from it and finish the stream.
      for (int64_t cut = 0; cut <= whole->num_blocks; ++cut) {
        auto first = *TokenPacker::Create(o);
        int64_t fed = 0;
        while (first->ready() < cut && fed < d.size()) {
          ASSERT_TRUE(first->Add({&d.offsets[fed], 2}, d.values).ok());
          ++fed;
        }
        if (first->ready() < cut) first->Finish();
        std::vector<int32_t> sink(cut * S);
        ASSERT_EQ(first->Take(cut, {sink.data(), nullptr, nullptr, nullptr, nullptr}), cut);
        const PackingState st = first->state();
        ASSERT_EQ(st.blocks, cut);
        ASSERT_LE(st.document, fed);

        auto second = TokenPacker::Create(o, st);
        ASSERT_TRUE(second.ok()) << second.status();
        ASSERT_TRUE(
            (*second)
                ->Add({&d.offsets[st.document], static_cast<size_t>(d.size() - st.document + 1)},
                      d.values)
                .ok());
        (*second)->Finish();
        const int64_t rest = (*second)->ready();
        ASSERT_EQ(cut + rest, whole->num_blocks) << "cut " << cut;
        std::vector<int32_t> tok(rest * S), seg(rest * S), pos(rest * S);
        std::vector<uint8_t> mask(rest * S);
        std::vector<int64_t> fd(rest);
        (*second)->Take(rest, {tok.data(), seg.data(), pos.data(), mask.data(), fd.data()});
        const size_t at = cut * S;
        ASSERT_TRUE(std::equal(tok.begin(), tok.end(), whole->tokens.begin() + at)) << cut;
        ASSERT_TRUE(std::equal(seg.begin(), seg.end(), whole->segment_ids.begin() + at)) << cut;
        ASSERT_TRUE(std::equal(pos.begin(), pos.end(), whole->positions.begin() + at)) << cut;
        ASSERT_TRUE(std::equal(mask.begin(), mask.end(), whole->mask.begin() + at)) << cut;
        ASSERT_TRUE(std::equal(fd.begin(), fd.end(), whole->first_document.begin() + cut)) << cut;
        EXPECT_EQ((*second)->state().blocks, whole->num_blocks);
      }
    }
  }
}

TEST(TokenPackerTest, StateIsTheStartOfTheFirstUntakenBlock) {
  // [1 2 3 4 5 6] [7 8] into blocks of 4: block 1 starts 4 tokens into doc 0.
  const std::vector<int64_t> offsets{0, 6, 8};
  const std::vector<int32_t> values{1, 2, 3, 4, 5, 6, 7, 8};
  PackingOptions o;
  o.seq_len = 4;
  auto p = *TokenPacker::Create(o);
  EXPECT_EQ(p->state(), (PackingState{0, 0, 0}));
  ASSERT_TRUE(p->Add(offsets, values).ok());
  EXPECT_EQ(p->state(), (PackingState{0, 0, 0}));
  int32_t tok[4];
  ASSERT_EQ(p->Take(1, {tok, nullptr, nullptr, nullptr, nullptr}), 1);
  EXPECT_EQ(p->state(), (PackingState{0, 4, 1}));
  ASSERT_EQ(p->Take(1, {tok, nullptr, nullptr, nullptr, nullptr}), 1);
  EXPECT_EQ(p->state(), (PackingState{2, 0, 2}));
  EXPECT_EQ(p->next_document(), 2);
}

TEST(TokenPackerTest, ResumeStateThatDoesNotFitTheDocumentIsAnError) {
  PackingOptions o;
  o.seq_len = 4;
  auto p = *TokenPacker::Create(o, {3, 10, 2});
  const std::vector<int64_t> offsets{0, 5};
  const std::vector<int32_t> values{1, 2, 3, 4, 5};
  const Status s = p->Add(offsets, values);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("offset 10 is not inside document 3"));
  EXPECT_FALSE(TokenPacker::Create(o, {-1, 0, 0}).ok());
  o.split_documents = false;
  EXPECT_FALSE(TokenPacker::Create(o, {1, 2, 0}).ok());
}

TEST(TokenPackerTest, SlicedOffsetsWithNonZeroStartAreHonoured) {
  const std::vector<int32_t> values{9, 9, 1, 2, 3, 9};
  const std::vector<int64_t> offsets{2, 4, 5};  // documents [1 2] [3]
  PackingOptions o;
  o.seq_len = 3;
  auto r = PackDocuments(offsets, values, o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->tokens, ElementsAre(1, 2, 3));
  EXPECT_THAT(r->segment_ids, ElementsAre(1, 1, 2));
}

TEST(TokenPackerTest, BadOffsetsAreRejectedAndNothingIsAdded) {
  PackingOptions o;
  o.seq_len = 4;
  auto p = *TokenPacker::Create(o);
  const std::vector<int32_t> values{1, 2, 3};
  auto add = [&](std::vector<int64_t> offsets) { return p->Add(offsets, values); };
  EXPECT_THAT(add({}).message(), HasSubstr("empty"));
  EXPECT_THAT(add({-1, 2}).message(), HasSubstr("offsets[0] = -1"));
  EXPECT_THAT(add({0, 2, 1}).message(), HasSubstr("offsets[2] = 1"));
  EXPECT_THAT(add({0, 4}).message(), HasSubstr("offsets[1] = 4"));
  EXPECT_EQ(p->next_document(), 0);
  EXPECT_TRUE(add({0}).ok());  // zero documents
  EXPECT_TRUE(add({0, 3}).ok());
  p->Finish();
  EXPECT_EQ(add({0, 1}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p->ready(), 1);
}

TEST(TokenPackerTest, EmptyInputGivesNoBlocks) {
  PackingOptions o;
  auto r = PackDocuments(std::vector<int64_t>{0, 0, 0}, {}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_blocks, 0);
}

TEST(PackingOptionsTest, ValidateRejectsBadSeqLen) {
  PackingOptions o;
  o.seq_len = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("seq_len"));
  o.seq_len = (int64_t{1} << 30) + 1;
  EXPECT_FALSE(TokenPacker::Create(o).ok());
}

}  // namespace
}  // namespace flywheel::loader

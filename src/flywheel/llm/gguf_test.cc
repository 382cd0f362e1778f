// GGUF: parsing, dequantization of every type flywheel reads against values
// computed by hand, the import's renaming and Q/K row order, and files whose
// headers lie (under a 256 MB address-space cap).
#include "flywheel/llm/gguf.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "flywheel/base/half.h"
#include "flywheel/io/file_system.h"
#include "flywheel/io/memory_cap_testing.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/llm/gguf_import.h"
#include "flywheel/llm/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace flywheel::llm {
namespace {

using ::testing::HasSubstr;

// Builds GGUF v3 bytes.
class GgufBuilder {
 public:
  void Str(std::string& out, std::string_view s) {
    Pod(out, static_cast<uint64_t>(s.size()));
    out.append(s);
  }
  template <typename T>
  void Pod(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void KvString(const std::string& k, const std::string& v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{8});
    Str(kv_, v);
    ++n_kv_;
  }
  void KvU32(const std::string& k, uint32_t v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{4});
    Pod(kv_, v);
    ++n_kv_;
  }
  void KvF32(const std::string& k, float v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{6});
    Pod(kv_, v);
    ++n_kv_;
  }
  void KvBool(const std::string& k, bool v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{7});
    Pod(kv_, static_cast<uint8_t>(v));
    ++n_kv_;
  }
  void KvStrings(const std::string& k, const std::vector<std::string>& v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{9});
    Pod(kv_, uint32_t{8});
    Pod(kv_, static_cast<uint64_t>(v.size()));
    for (const auto& s : v) Str(kv_, s);
    ++n_kv_;
  }
  void KvI32s(const std::string& k, const std::vector<int32_t>& v) {
    Str(kv_, k);
    Pod(kv_, uint32_t{9});
    Pod(kv_, uint32_t{5});
    Pod(kv_, static_cast<uint64_t>(v.size()));
    for (int32_t x : v) Pod(kv_, x);
    ++n_kv_;
  }
  // A tensor of ggml `type` with ggml dims and raw bytes.
  void Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const std::string& bytes) {
    Str(ti_, name);
    Pod(ti_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Pod(ti_, d);
    Pod(ti_, type);
    Pod(ti_, static_cast<uint64_t>(data_.size()));
    data_ += bytes;
    data_.append((32 - data_.size() % 32) % 32, '\0');
    ++n_t_;
  }
  void F32Tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    Tensor(name, std::move(dims), 0, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  }
  std::string Build() const {
    std::string out = "GGUF";
    GgufBuilder b;
    b.Pod(out, uint32_t{3});
    b.Pod(out, n_t_);
    b.Pod(out, n_kv_);
    out += kv_ + ti_;
    out.append((32 - out.size() % 32) % 32, '\0');
    return out + data_;
  }

 private:
  std::string kv_, ti_, data_;
  uint64_t n_kv_ = 0, n_t_ = 0;
};

uint16_t H(float f) { return FloatToHalf(f); }

void PutHalf(std::string& s, float f) {
  const uint16_t h = H(f);
  s.append(reinterpret_cast<const char*>(&h), 2);
}

TEST(GgufTest, DequantizesEveryTypeItReads) {
  // One 32-element block per quantized type, with values worked out by hand.
  std::string q8, q40, q41;
  PutHalf(q8, 0.5f);
  for (int j = 0; j < 32; ++j) q8.push_back(static_cast<char>(j - 16));
  PutHalf(q40, 0.25f);
  for (int j = 0; j < 16; ++j) q40.push_back(static_cast<char>((j & 0xf) | ((15 - j) << 4)));
  PutHalf(q41, 2.0f);
  PutHalf(q41, -1.0f);
  for (int j = 0; j < 16; ++j) q41.push_back(static_cast<char>(j | (j << 4)));
  std::string f16, bf16;
  for (float x : {1.5f, -2.25f}) PutHalf(f16, x);
  for (float x : {3.0f, -0.5f}) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    const uint16_t hb = static_cast<uint16_t>(b >> 16);
    bf16.append(reinterpret_cast<const char*>(&hb), 2);
  }
  GgufBuilder b;
  b.KvString("general.architecture", "llama");
  b.Tensor("q8", {32}, 8, q8);
  b.Tensor("q40", {32}, 2, q40);
  b.Tensor("q41", {32}, 3, q41);
  b.Tensor("f16", {2}, 1, f16);
  b.Tensor("bf16", {2}, 30, bf16);
  b.F32Tensor("f32", {2}, {7.0f, -8.0f});
  auto g = GgufFile::Parse(b.Build());
  ASSERT_TRUE(g.ok()) << g.status();
  auto get = [&](const char* n) { return *(*g)->Dequantize(*(*g)->FindTensor(n)); };
  const std::vector<float> v8 = get("q8"), v40 = get("q40"), v41 = get("q41");
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(v8[j], 0.5f * (j - 16)) << j;
    const int nib = j < 16 ? (j & 0xf) : (15 - (j - 16));
    EXPECT_EQ(v40[j], 0.25f * (nib - 8)) << j;
    EXPECT_EQ(v41[j], 2.0f * (j % 16) - 1.0f) << j;
  }
  EXPECT_EQ(get("f16"), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(get("bf16"), (std::vector<float>{3.0f, -0.5f}));
  EXPECT_EQ(get("f32"), (std::vector<float>{7.0f, -8.0f}));
  EXPECT_EQ(*(*g)->String("general.architecture"), "llama");
}

TEST(GgufTest, UnsupportedTypeIsNamed) {
  GgufBuilder b;
  b.Tensor("blk.0.ffn_up.weight", {256}, 14, std::string(210, '\0'));  // Q6_K: type known, not read
  auto g = GgufFile::Parse(b.Build());
  ASSERT_TRUE(g.ok()) << g.status();
  auto v = (*g)->Dequantize((*g)->tensors()[0]);
  EXPECT_THAT(v.status().message(), HasSubstr("is Q6_K, which flywheel does not read"));
}

TEST(GgufTest, UnpermutesRotaryRowsAsLlamaCppPermutedThem) {
  // Two heads of 4 rows, 1 column: Hugging Face rows 0..7; llama.cpp stores
  // each head's rows as (0, 2, 1, 3): pairs interleaved from the two halves.
  std::vector<float> w = {0, 2, 1, 3, 4, 6, 5, 7};
  ASSERT_TRUE(UnpermuteRotaryRows(w.data(), 8, 1, 2).ok());
  EXPECT_EQ(w, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(UnpermuteRotaryRows(w.data(), 8, 1, 3).ok());
}

TEST(GgufTest, NamesMapToHuggingFaceLlama) {
  EXPECT_EQ(*HfTensorName("blk.12.attn_output.weight"), "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(*HfTensorName("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(*HfTensorName("blk.0.ffn_gate.weight"), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_FALSE(HfTensorName("blk.x.attn_q.weight").ok());
  EXPECT_FALSE(HfTensorName("mystery").ok());
}

// A tiny but complete llama GGUF: 1 layer, hidden 4, one head of 4 (so the
// Q/K permutation is visible), a 6-token byte-level vocabulary.
GgufBuilder TinyLlama(std::vector<float>* q_rows) {
  GgufBuilder b;
  b.KvString("general.architecture", "llama");
  b.KvU32("llama.block_count", 1);
  b.KvU32("llama.embedding_length", 4);
  b.KvU32("llama.feed_forward_length", 8);
  b.KvU32("llama.attention.head_count", 1);
  b.KvU32("llama.attention.head_count_kv", 1);
  b.KvU32("llama.context_length", 64);
  b.KvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.KvF32("llama.rope.freq_base", 10000.f);
  b.KvString("tokenizer.ggml.model", "gpt2");
  b.KvString("tokenizer.ggml.pre", "smollm");
  b.KvStrings("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "b", "ab", "Ġ", "Ġab"});
  b.KvI32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1});
  b.KvStrings("tokenizer.ggml.merges", {"a b", "Ġ ab"});
  b.KvU32("tokenizer.ggml.eos_token_id", 0);
  b.KvBool("tokenizer.ggml.add_bos_token", false);
  b.KvString("tokenizer.chat_template", "{{ messages[0]['content'] }}");
  auto seq = [](size_t n, float start) {
    std::vector<float> v(n);
    for (size_t k = 0; k < n; ++k) v[k] = start + static_cast<float>(k);
    return v;
  };
  b.F32Tensor("token_embd.weight", {4, 6}, seq(24, 0));
  b.F32Tensor("output_norm.weight", {4}, seq(4, 1));
  b.F32Tensor("blk.0.attn_norm.weight", {4}, seq(4, 1));
  b.F32Tensor("blk.0.ffn_norm.weight", {4}, seq(4, 1));
  *q_rows = seq(16, 100);  // 4 rows x 4 columns, stored permuted
  b.F32Tensor("blk.0.attn_q.weight", {4, 4}, *q_rows);
  b.F32Tensor("blk.0.attn_k.weight", {4, 4}, seq(16, 200));
  b.F32Tensor("blk.0.attn_v.weight", {4, 4}, seq(16, 300));
  b.F32Tensor("blk.0.attn_output.weight", {4, 4}, seq(16, 400));
  b.F32Tensor("blk.0.ffn_gate.weight", {4, 8}, seq(32, 500));
  b.F32Tensor("blk.0.ffn_up.weight", {4, 8}, seq(32, 600));
  b.F32Tensor("blk.0.ffn_down.weight", {8, 4}, seq(32, 700));
  return b;
}

TEST(GgufImportTest, WritesAHuggingFaceCheckpoint) {
  std::vector<float> q;
  const std::string bytes = TinyLlama(&q).Build();
  io::TempDir dir("fw_gguf_import");
  const std::string gguf = dir.path() + "/tiny.gguf";
  ASSERT_TRUE(io::PosixFileSystem()->Put(gguf, bytes).ok());
  auto r = ImportGguf(gguf, dir.path() + "/hf");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tensors, 11);
  EXPECT_EQ(r->tokenizer, "gpt2 BPE (pre-tokenizer smollm)");
  auto config = nlohmann::json::parse(*io::PosixFileSystem()->ReadFile(dir.path() + "/hf/config.json"));
  EXPECT_EQ(config["hidden_size"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 1);
  EXPECT_EQ(config["vocab_size"], 6);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["eos_token_id"], 0);
  auto tok = nlohmann::json::parse(*io::PosixFileSystem()->ReadFile(dir.path() + "/hf/tokenizer.json"));
  EXPECT_EQ(tok["model"]["vocab"]["Ġab"], 5);
  EXPECT_EQ(tok["model"]["merges"][1], "Ġ ab");
  EXPECT_EQ(tok["added_tokens"].size(), 1u);
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  auto tc = nlohmann::json::parse(*io::PosixFileSystem()->ReadFile(dir.path() + "/hf/tokenizer_config.json"));
  EXPECT_EQ(tc["chat_template"], "{{ messages[0]['content'] }}");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");

  auto ck = Checkpoint::Open(dir.path() + "/hf");
  ASSERT_TRUE(ck.ok()) << ck.status();
  const TensorView* e = (*ck)->Find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{6, 4}));
  const TensorView* wq = (*ck)->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(wq, nullptr);
  // Hugging Face rows (0, 1, 2, 3) are llama.cpp's rows (0, 2, 1, 3).
  const float* f = reinterpret_cast<const float*>(wq->data);
  EXPECT_EQ(f[0 * 4], 100);
  EXPECT_EQ(f[1 * 4], 108);
  EXPECT_EQ(f[2 * 4], 104);
  EXPECT_EQ(f[3 * 4], 112);
  EXPECT_EQ((*ck)->Find("lm_head.weight"), nullptr);
}

TEST(GgufImportTest, RefusesWhatItCannotImportByName) {
  GgufBuilder b;
  b.KvString("general.architecture", "mamba");
  io::TempDir dir("fw_gguf_import");
  ASSERT_TRUE(io::PosixFileSystem()->Put(dir.path() + "/m.gguf", b.Build()).ok());
  auto r = ImportGguf(dir.path() + "/m.gguf", dir.path() + "/out");
  EXPECT_THAT(r.status().message(), HasSubstr("general.architecture 'mamba' is not supported"));
  EXPECT_THAT(ImportGguf(dir.path() + "/none.gguf", dir.path() + "/out").status().message(), HasSubstr("none.gguf"));
  EXPECT_THAT(ImportGguf("s3://b/m.gguf", dir.path() + "/out").status().message(), HasSubstr("s3://"));
}

// Files whose headers lie about counts and sizes, each parsed in a child
// capped at 256 MB of address space.
std::string ParseUnderCap(const std::string& bytes) {
  return io::UnderMemoryCap(256, [&]() -> std::string {
    auto g = GgufFile::Parse(bytes);
    if (!g.ok()) return "error: " + std::string(g.status().message());
    for (const GgufTensor& t : (*g)->tensors()) {
      auto v = (*g)->Dequantize(t);
      if (!v.ok()) return "error: " + std::string(v.status().message());
    }
    return "ok";
  });
}

std::string Header(uint64_t tensors, uint64_t kvs) {
  std::string s = "GGUF";
  GgufBuilder b;
  b.Pod(s, uint32_t{3});
  b.Pod(s, tensors);
  b.Pod(s, kvs);
  return s;
}

TEST(GgufHostileTest, CountsAndSizesThatLieAreRefusedUnderTheCap) {
  GgufBuilder b;
  // 2^60 tensors, 2^60 metadata entries in a 24-byte file.
  EXPECT_THAT(ParseUnderCap(Header(uint64_t{1} << 60, 0)), HasSubstr("claims 1152921504606846976 tensors"));
  EXPECT_THAT(ParseUnderCap(Header(0, uint64_t{1} << 60)), HasSubstr("claims 1152921504606846976 metadata entries"));
  // A key claiming 2^40 bytes.
  std::string s = Header(0, 1);
  b.Pod(s, uint64_t{1} << 40);
  s += std::string(32, 'k');
  EXPECT_THAT(ParseUnderCap(s), HasSubstr("claims 1099511627776 bytes"));
  // An array claiming 2^50 strings, and 2^50 uint32s.
  for (uint32_t elem : {8u, 4u}) {
    s = Header(0, 1);
    b.Str(s, "tokenizer.ggml.tokens");
    b.Pod(s, uint32_t{9});
    b.Pod(s, elem);
    b.Pod(s, uint64_t{1} << 50);
    s += std::string(64, 'x');
    EXPECT_THAT(ParseUnderCap(s), HasSubstr("claims 1125899906842624 elements")) << elem;
  }
  // A tensor whose dims claim 2^48 x 2^48 elements, one claiming 1 GB of
  // Q8_0 in a file of bytes, one past the end.
  GgufBuilder big;
  big.Tensor("w", {uint64_t{1} << 48, uint64_t{1} << 48}, 0, "");
  EXPECT_THAT(ParseUnderCap(big.Build()), HasSubstr("overflows"));
  GgufBuilder gig;
  gig.Tensor("w", {32, uint64_t{1} << 25}, 8, std::string(34, '\0'));
  EXPECT_THAT(ParseUnderCap(gig.Build()), HasSubstr("run past the data section"));
  // Arrays of arrays, unknown types, a bad alignment, duplicate keys.
  s = Header(0, 1);
  b.Str(s, "a");
  b.Pod(s, uint32_t{9});
  b.Pod(s, uint32_t{9});
  b.Pod(s, uint64_t{1});
  EXPECT_THAT(ParseUnderCap(s), HasSubstr("array of arrays"));
  s = Header(0, 1);
  b.Str(s, "a");
  b.Pod(s, uint32_t{99});
  EXPECT_THAT(ParseUnderCap(s), HasSubstr("unknown value type 99"));
  GgufBuilder al;
  al.KvU32("general.alignment", 24);
  EXPECT_THAT(ParseUnderCap(al.Build()), HasSubstr("not a power of two"));
  GgufBuilder dup;
  dup.KvU32("k", 1);
  dup.KvU32("k", 2);
  EXPECT_THAT(ParseUnderCap(dup.Build()), HasSubstr("appears twice"));
  EXPECT_THAT(ParseUnderCap("GGML1234"), HasSubstr("not a GGUF file"));
  EXPECT_THAT(ParseUnderCap("GGUF"), HasSubstr("version at byte 4 needs 4 bytes"));
}

}  // namespace
}  // namespace flywheel::llm

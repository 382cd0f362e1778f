// The rollout engine on a small random model: kernels identical across
// instruction sets, row counts and threads; generation deterministic and
// batch-invariant; n samples sharing a prompt; preemption under a tight KV
// budget giving the unconstrained tokens; hot swap both ways; bad input.
#include "flywheel/llm/engine.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flywheel/io/file_system.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/llm/kernels.h"
#include "flywheel/llm/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::llm {
namespace {

using ::testing::HasSubstr;

struct Tiny {
  int64_t vocab = 61, hidden = 32, inter = 48, layers = 2, heads = 4, kv_heads = 2, max_pos = 256;
};

// Writes a random model (scale `scale`, seed `seed`) into `dir`.
void WriteModel(const std::string& dir, uint64_t seed, const Tiny& t = {}, float scale = 0.3f) {
  const int64_t hd = t.hidden / t.heads;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<std::vector<float>> store;
  std::vector<TensorToWrite> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = ones ? 1.0f + nd(rng) * 0.1f : nd(rng);
    store.push_back(std::move(v));
    out.push_back({name, DType::kF32, shape, nullptr});
  };
  add("model.embed_tokens.weight", {t.vocab, t.hidden});
  add("model.norm.weight", {t.hidden}, true);
  for (int64_t l = 0; l < t.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {t.hidden}, true);
    add(p + "post_attention_layernorm.weight", {t.hidden}, true);
    add(p + "self_attn.q_proj.weight", {t.heads * hd, t.hidden});
    add(p + "self_attn.k_proj.weight", {t.kv_heads * hd, t.hidden});
    add(p + "self_attn.v_proj.weight", {t.kv_heads * hd, t.hidden});
    add(p + "self_attn.o_proj.weight", {t.hidden, t.heads * hd});
    add(p + "mlp.gate_proj.weight", {t.inter, t.hidden});
    add(p + "mlp.up_proj.weight", {t.inter, t.hidden});
    add(p + "mlp.down_proj.weight", {t.hidden, t.inter});
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].data = store[i].data();
  ASSERT_TRUE(WriteCheckpoint(dir, out).ok());
  const std::string config = "{\"model_type\": \"llama\", \"vocab_size\": " + std::to_string(t.vocab) +
                             ", \"hidden_size\": " + std::to_string(t.hidden) + ", \"intermediate_size\": " +
                             std::to_string(t.inter) + ", \"num_hidden_layers\": " + std::to_string(t.layers) +
                             ", \"num_attention_heads\": " + std::to_string(t.heads) + ", \"num_key_value_heads\": " +
                             std::to_string(t.kv_heads) + ", \"max_position_embeddings\": " + std::to_string(t.max_pos) +
                             ", \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, "
                             "\"eos_token_id\": 2, \"hidden_act\": \"silu\"}";
  ASSERT_TRUE(io::PosixFileSystem()->Replace(dir + "/config.json", config).ok());
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteModel(dir_.path() + "/a", 1);
    WriteModel(dir_.path() + "/b", 2);
  }
  std::unique_ptr<Engine> Open(EngineOptions o = {}, const std::string& which = "a", int64_t version = 0) {
    auto e = Engine::Open(dir_.path() + "/" + which, o, version);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }
  static std::vector<int64_t> Prompt(int64_t len, int64_t salt) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back((i * 7 + salt * 13 + 3) % 61);
    return p;
  }
  io::TempDir dir_{"fw_engine"};
};

TEST(KernelsTest, DotsAndAxpyEqualTheirScalarDefinitionsBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (int64_t n : {64, 83, 16}) {
    std::vector<float> q(static_cast<size_t>(n));
    for (float& v : q) v = nd(rng);
    std::vector<std::vector<float>> rows(37, std::vector<float>(static_cast<size_t>(n)));
    std::vector<const float*> ptrs;
    for (auto& r : rows) {
      for (float& v : r) v = nd(rng);
      ptrs.push_back(r.data());
    }
    for (int64_t count : {0, 1, 15, 16, 17, 32, 37}) {
      std::vector<float> out(static_cast<size_t>(count) + 1, -1.0f);
      Dots(q.data(), ptrs.data(), count, n, out.data());
      for (int64_t i = 0; i < count; ++i) {
        const float want = Dot(q.data(), ptrs[i], n);
        EXPECT_EQ(std::memcmp(&out[i], &want, 4), 0) << "n " << n << " count " << count << " row " << i;
      }
      EXPECT_EQ(out[count], -1.0f);  // nothing written past count
    }
    {
      std::vector<float> coef(rows.size());
      for (float& c : coef) c = nd(rng);
      std::vector<float> got(static_cast<size_t>(n)), ref(static_cast<size_t>(n), 0.0f);
      WeightedSum(coef.data(), ptrs.data(), static_cast<int64_t>(ptrs.size()), n, got.data());
      for (size_t j = 0; j < ptrs.size(); ++j) {
        for (int64_t d = 0; d < n; ++d) {
          const float prod = coef[j] * ptrs[j][d];
          ref[d] = ref[d] + prod;
        }
      }
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * 4), 0) << "weighted sum, n " << n;
    }
    std::vector<float> y(q.size()), want(q.size());
    for (size_t i = 0; i < y.size(); ++i) want[i] = y[i] = nd(rng);
    Axpy(0.37f, q.data(), y.data(), n);
    for (size_t i = 0; i < y.size(); ++i) {
      const float prod = 0.37f * q[i];
      want[i] = want[i] + prod;
      EXPECT_EQ(std::memcmp(&y[i], &want[i], 4), 0) << i;
    }
  }
}

TEST(KernelsTest, MatMulIsIdenticalAcrossIsasRowCountsAndThreads) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  // 83: not a multiple of 16 (the tail path); 96: full 4 x 4 tiles reduced together.
  for (const auto& case_ : std::vector<std::pair<DType, int64_t>>{{DType::kF32, 83},
                                                                  {DType::kBF16, 83},
                                                                  {DType::kI8, 83},
                                                                  {DType::kF32, 96},
                                                                  {DType::kBF16, 96},
                                                                  {DType::kI8, 96}}) {
    const DType dt = case_.first;
    const int64_t cols = case_.second;
    Matrix w;
    w.rows = 37;
    w.cols = cols;
    w.dtype = dt;
    std::vector<float> wf(static_cast<size_t>(w.rows * w.cols));
    for (float& v : wf) v = nd(rng);
    if (dt == DType::kF32) {
      w.data.resize(wf.size() * 4);
      std::memcpy(w.data.data(), wf.data(), w.data.size());
    } else if (dt == DType::kI8) {
      w.data.resize(wf.size());
      w.scale.resize(static_cast<size_t>(w.rows));
      for (int64_t r = 0; r < w.rows; ++r) {
        w.scale[r] = 0.01f * static_cast<float>(r + 1);
        for (int64_t k = 0; k < w.cols; ++k) {
          w.data[r * w.cols + k] = static_cast<uint8_t>(static_cast<int8_t>((r * 31 + k * 17) % 255 - 127));
        }
      }
    } else {
      w.data.resize(wf.size() * 2);
      for (size_t i = 0; i < wf.size(); ++i) {
        uint32_t b;
        std::memcpy(&b, &wf[i], 4);
        const uint16_t h = static_cast<uint16_t>(b >> 16);
        std::memcpy(w.data.data() + 2 * i, &h, 2);
      }
    }
    const int64_t rows = 29;
    std::vector<float> x(static_cast<size_t>(rows * w.cols));
    for (float& v : x) v = nd(rng);
    std::vector<float> ref(static_cast<size_t>(rows * w.rows));
    MakeCpuKernels(1, "portable")->MatMul(x.data(), rows, w, ref.data());
    // Close to a double-precision reference.
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t n = 0; n < w.rows; ++n) {
        w.Row(n, row.data());
        double d = 0;
        for (int64_t k = 0; k < w.cols; ++k) d += static_cast<double>(row[k]) * x[t * w.cols + k];
        EXPECT_NEAR(ref[t * w.rows + n], d, 1e-4 * (1 + std::fabs(d)));
      }
    }
    for (const char* isa : {"avx512", "avx2", "portable"}) {
      for (int threads : {1, 2, 3}) {
        std::vector<float> y(ref.size());
        MakeCpuKernels(threads, isa)->MatMul(x.data(), rows, w, y.data());
        EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0) << isa << " x" << threads;
        // Each row alone gives the same bits as in the batch.
        for (int64_t t : {int64_t{0}, int64_t{13}, rows - 1}) {
          std::vector<float> one(static_cast<size_t>(w.rows));
          MakeCpuKernels(threads, isa)->MatMul(x.data() + t * w.cols, 1, w, one.data());
          EXPECT_EQ(std::memcmp(one.data(), ref.data() + t * w.rows, one.size() * 4), 0) << isa << " row " << t;
        }
      }
    }
  }
}

TEST_F(EngineTest, GreedyIsDeterministicAndBatchInvariant) {
  auto e = Open();
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 20;
  greedy.ignore_eos = true;
  auto alone = e->Generate({{Prompt(9, 1), greedy}});
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_EQ(alone[0].tokens.size(), 20u);
  EXPECT_EQ(alone[0].finish, FinishReason::kLength);
  // The same request among others of different lengths, with another engine
  // configuration (threads, step budget, block size).
  EngineOptions o;
  o.threads = 1;
  o.max_step_tokens = 7;
  o.block_tokens = 4;
  auto e2 = Open(o);
  auto batch = e2->Generate({{Prompt(31, 2), greedy}, {Prompt(9, 1), greedy}, {Prompt(3, 3), greedy}});
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[1].tokens, alone[0].tokens);
  EXPECT_EQ(std::memcmp(batch[1].logprobs.data(), alone[0].logprobs.data(), 20 * 4), 0);
  // Greedy log-probs are the largest of each position's distribution.
  for (float lp : alone[0].logprobs) EXPECT_LE(lp, 0.f);
}

TEST_F(EngineTest, SampledTokensAreBatchInvariantAndSamplesSharePrompts) {
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 20;
  p.top_p = 0.95;
  p.max_new_tokens = 12;
  p.ignore_eos = true;
  p.seed = 42;
  auto e = Open();
  auto one = e->Generate({{Prompt(17, 4), p}});
  SamplingParams many = p;
  many.n = 4;
  auto e2 = Open();
  auto four = e2->Generate({{Prompt(5, 9), p}, {Prompt(17, 4), many}});
  ASSERT_EQ(four.size(), 5u);
  EXPECT_EQ(four[1].tokens, one[0].tokens);  // sample 0 of n = 4 equals the n = 1 request
  EXPECT_EQ(std::memcmp(four[1].logprobs.data(), one[0].logprobs.data(), 12 * 4), 0);
  // The other samples draw differently.
  int differ = 0;
  for (int i = 2; i < 5; ++i) differ += four[i].tokens != four[1].tokens;
  EXPECT_GE(differ, 2);
  // Versions stamp every token.
  for (int64_t v : four[3].versions) EXPECT_EQ(v, 0);
}

TEST_F(EngineTest, WorkloadFourTimesTheKvBudgetCompletesWithPreemptionAndSameTokens) {
  SamplingParams p;
  p.temperature = 0.8;
  p.max_new_tokens = 40;
  p.ignore_eos = true;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    p.seed = static_cast<uint64_t>(i);
    reqs.push_back({Prompt(20 + i, i), p});
  }
  auto free_run = Open()->Generate(reqs);
  // 8 sequences of ~64 positions in blocks of 8: ~64 blocks in all; give 16.
  EngineOptions tight;
  tight.block_tokens = 8;
  const int64_t block_bytes = 2 /*layers*/ * 2 * (2 * 8) /*kv_dim*/ * 8 * 4;
  tight.kv_cache_bytes = 16 * block_bytes;
  auto e = Open(tight);
  auto constrained = e->Generate(reqs);
  ASSERT_EQ(constrained.size(), 8u);
  EXPECT_GT(e->stats().preemptions, 0);
  int64_t preempted = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(constrained[i].tokens, free_run[i].tokens) << i;
    EXPECT_EQ(std::memcmp(constrained[i].logprobs.data(), free_run[i].logprobs.data(), 40 * 4), 0) << i;
    preempted += constrained[i].preemptions;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(e->stats().blocks_free, e->stats().blocks_total);
}

TEST_F(EngineTest, HotSwapKeepsEarlierTokensAndStampsVersions) {
  SamplingParams g;
  g.temperature = 0;
  g.max_new_tokens = 16;
  g.ignore_eos = true;
  const auto prompt = Prompt(11, 5);
  auto base = Open()->Generate({{prompt, g}});
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "keep KV");
    EngineOptions o;
    o.recompute_on_swap = recompute;
    auto e = Open(o);
    ASSERT_TRUE(e->Submit({prompt, g}).ok());
    SamplingParams abort = g;
    abort.abort_on_weight_update = true;
    ASSERT_TRUE(e->Submit({Prompt(4, 8), abort}).ok());
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(e->Step().ok());  // prefill + 5 decodes: 6 tokens
    ASSERT_TRUE(e->UpdateWeights(dir_.path() + "/b", 7).ok());
    while (!e->Idle()) ASSERT_TRUE(e->Step().ok());
    auto done = e->TakeFinished();
    ASSERT_EQ(done.size(), 2u);
    const Completion& aborted = done[0].finish == FinishReason::kAborted ? done[0] : done[1];
    const Completion& swapped = done[0].finish == FinishReason::kAborted ? done[1] : done[0];
    EXPECT_EQ(aborted.tokens.size(), 6u);
    ASSERT_EQ(swapped.tokens.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(swapped.versions[i], i < 6 ? 0 : 7) << i;
    for (int i = 0; i < 6; ++i) EXPECT_EQ(swapped.tokens[i], base[0].tokens[i]) << i;
    if (recompute) {
      // After the swap: exactly what the new weights generate from that prefix.
      std::vector<int64_t> prefix = prompt;
      prefix.insert(prefix.end(), swapped.tokens.begin(), swapped.tokens.begin() + 6);
      SamplingParams rest = g;
      rest.max_new_tokens = 10;
      auto fresh = Open({}, "b", 7)->Generate({{prefix, rest}});
      EXPECT_EQ(std::vector<int64_t>(swapped.tokens.begin() + 6, swapped.tokens.end()), fresh[0].tokens);
    }
  }
}

TEST_F(EngineTest, BadInputIsRefusedByNameAndOthersStillRun) {
  auto e = Open();
  SamplingParams p;
  p.max_new_tokens = 4;
  EXPECT_THAT(e->Submit({{1, 2, 99}, p}).status().message(), HasSubstr("prompt token 2 is 99, outside the vocabulary"));
  EXPECT_THAT(e->Submit({{}, p}).status().message(), HasSubstr("empty"));
  SamplingParams long_p = p;
  long_p.max_new_tokens = 300;
  EXPECT_THAT(e->Submit({{1, 2}, long_p}).status().message(), HasSubstr("exceeds the context of 256"));
  SamplingParams bad = p;
  bad.temperature = -1;
  EXPECT_THAT(e->Submit({{1}, bad}).status().message(), HasSubstr("temperature"));
  bad = p;
  bad.top_p = 0;
  EXPECT_THAT(e->Submit({{1}, bad}).status().message(), HasSubstr("top_p"));
  auto mixed = e->Generate({{{1, 2, 3}, p}, {{5, 1000}, p}, {{4, 4}, p}});
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_EQ(mixed[1].finish, FinishReason::kError);
  EXPECT_THAT(mixed[1].error, HasSubstr("1000"));
  EXPECT_NE(mixed[0].finish, FinishReason::kError);
  EXPECT_NE(mixed[2].finish, FinishReason::kError);
  // Weights that do not match the config, and a missing version folder.
  EXPECT_THAT(e->UpdateWeights(dir_.path() + "/none", 3).message(), HasSubstr("none"));
  Tiny other;
  other.hidden = 16;
  other.inter = 24;
  WriteModel(dir_.path() + "/c", 3, other);
  EXPECT_THAT(e->UpdateWeights(dir_.path() + "/c", 3).message(), HasSubstr("differs in shape"));
  ASSERT_TRUE(io::PosixFileSystem()->Replace(dir_.path() + "/c/config.json",
                                             "{\"vocab_size\": 61, \"hidden_size\": 32, \"intermediate_size\": 48, "
                                             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4}")
                  .ok());
  EXPECT_THAT(Engine::Open(dir_.path() + "/c").status().message(),
              HasSubstr("tensor 'model.embed_tokens.weight' is [61, 16], config.json implies [61, 32]"));
  EXPECT_THAT(ModelConfig::FromJson("{\"vocab_size\": 10}").status().message(), HasSubstr("hidden_size is missing"));
  EXPECT_THAT(ModelConfig::FromJson("{\"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, "
                                    "\"num_hidden_layers\": 1, \"num_attention_heads\": 3}")
                  .status()
                  .message(),
              HasSubstr("multiple of num_attention_heads"));
  // Each size within its own bound, but together past 10^12 parameters (products would overflow).
  EXPECT_THAT(ModelConfig::FromJson("{\"vocab_size\": 4294967296, \"hidden_size\": 4294967296, "
                                    "\"intermediate_size\": 4294967296, \"num_hidden_layers\": 4294967296, "
                                    "\"num_attention_heads\": 1}")
                  .status()
                  .message(),
              HasSubstr("more than 10^12"));
}

}  // namespace
}  // namespace flywheel::llm

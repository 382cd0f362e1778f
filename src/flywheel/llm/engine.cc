#include "flywheel/llm/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"

namespace flywheel::llm {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Counter-based draws: the uniform for (seed, sample, position) is the same
// whatever else the engine runs, so sampling is batch-invariant.
uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double Uniform(uint64_t seed, int64_t sample, int64_t position) {
  const uint64_t h = SplitMix(SplitMix(SplitMix(seed) ^ static_cast<uint64_t>(sample)) ^ static_cast<uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

struct Sampled {
  int64_t token;
  float logprob;
};

// One token from `logits` (vocab) under `p`: greedy when temperature is 0,
// else softmax(logits / T) truncated to top_k / top_p and drawn with `u`.
// The log-prob is of the untruncated softmax(logits / T) (T = 1 for greedy).
Sampled Sample(const float* logits, int64_t vocab, const SamplingParams& p, double u) {
  const double t = p.temperature > 0 ? p.temperature : 1.0;
  double m = -std::numeric_limits<double>::infinity();
  int64_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  m = logits[best] / t;
  std::vector<double> e(static_cast<size_t>(vocab));
  double z = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    e[i] = std::exp(logits[i] / t - m);
    z += e[i];
  }
  const double logz = std::log(z);
  auto logprob = [&](int64_t i) { return static_cast<float>(logits[i] / t - m - logz); };
  if (p.temperature <= 0) return {best, logprob(best)};
  if (p.top_k > 0 || p.top_p < 1.0) {
    std::vector<int64_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const int64_t k = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return e[a] != e[b] ? e[a] > e[b] : a < b; });
    int64_t keep = 0;
    double mass = 0;
    while (keep < k) {
      mass += e[order[keep]];
      ++keep;
      if (mass / z >= p.top_p) break;
    }
    double r = u * mass, acc = 0;
    for (int64_t j = 0; j < keep; ++j) {
      acc += e[order[j]];
      if (r < acc) return {order[j], logprob(order[j])};
    }
    return {order[keep - 1], logprob(order[keep - 1])};
  }
  double r = u * z, acc = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    acc += e[i];
    if (r < acc) return {i, logprob(i)};
  }
  return {best, logprob(best)};
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "aborted";
    case FinishReason::kError: return "error";
  }
  return "?";
}

struct Engine::Impl {
  struct Request {
    int64_t id;
    std::vector<int64_t> prompt;
    SamplingParams params;
    std::set<int64_t> stops;
    Clock::time_point submitted;
  };
  struct Seq {
    std::shared_ptr<Request> req;
    int64_t sample = 0;  // -1: the prompt of an n > 1 request, forked when its prefill ends
    std::vector<int64_t> tokens;  // prompt + response
    int64_t computed = 0;         // positions whose K/V are in the cache
    std::vector<int32_t> blocks;
    std::vector<float> logprobs;
    std::vector<int64_t> versions;
    int64_t admitted = 0;
    int64_t preemptions = 0;
    bool started = false;
    double queue_s = 0, first_token_s = 0;
    bool all_logits = false;  // PromptLogits: logits at every position

    int64_t response_len() const { return static_cast<int64_t>(tokens.size()) - static_cast<int64_t>(req->prompt.size()); }
    int64_t pending() const { return static_cast<int64_t>(tokens.size()) - computed; }
  };
  struct Chunk {
    Seq* seq;
    int64_t start, len;
    int64_t row;  // first row of this chunk in the step's token matrix
  };

  EngineOptions opt;
  std::shared_ptr<const ModelWeights> w;
  std::shared_ptr<const ModelWeights> spare;  // the weights swapped out last, for their buffers
  ModelConfig cfg;
  std::unique_ptr<Kernels> k;
  int64_t bs = 16;
  int64_t q_dim = 0, kv_dim = 0, qkv_dim = 0;
  // KV pool
  std::vector<float> kv;
  int64_t block_floats = 0;
  std::vector<int32_t> refs;
  std::vector<int32_t> free_blocks;
  // State
  int64_t next_request = 0;
  int64_t next_admission = 0;
  std::deque<std::unique_ptr<Seq>> waiting;
  std::vector<std::unique_ptr<Seq>> running;  // in admission order
  std::vector<Completion> finished;
  EngineStats st;
  // Step buffers
  std::vector<float> x, xn, qkv, attn, tmp, gu, act, logits;
  std::vector<float> rope_inv_freq;

  Status Init(std::shared_ptr<const ModelWeights> weights, const EngineOptions& o) {
    opt = o;
    if (o.block_tokens < 1 || o.block_tokens > 4096) return absl::InvalidArgumentError("block_tokens must be in [1, 4096]");
    if (o.max_step_tokens < 1) return absl::InvalidArgumentError("max_step_tokens must be at least 1");
    if (o.max_running < 1) return absl::InvalidArgumentError("max_running must be at least 1");
    if (o.kv_cache_bytes < 1) return absl::InvalidArgumentError("kv_cache_bytes must be positive");
    w = std::move(weights);
    cfg = w->config;
    bs = o.block_tokens;
    q_dim = cfg.num_heads * cfg.head_dim;
    kv_dim = cfg.num_kv_heads * cfg.head_dim;
    qkv_dim = q_dim + 2 * kv_dim;
    block_floats = cfg.num_layers * 2 * kv_dim * bs;
    const int64_t blocks = o.kv_cache_bytes / (block_floats * 4);
    if (blocks < 1) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_bytes ", o.kv_cache_bytes, " holds no block (one is ",
                                                     block_floats * 4, " bytes)"));
    }
    kv.assign(static_cast<size_t>(blocks * block_floats), 0.f);
    refs.assign(static_cast<size_t>(blocks), 0);
    for (int64_t b = blocks - 1; b >= 0; --b) free_blocks.push_back(static_cast<int32_t>(b));
    st.blocks_total = blocks;
    int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    k = MakeCpuKernels(std::max(1, threads), o.isa);
    rope_inv_freq.resize(static_cast<size_t>(cfg.head_dim / 2));
    for (int64_t i = 0; i < cfg.head_dim / 2; ++i) {
      // As transformers computes it: 1 / theta^(2i / d) in float32.
      const float e = static_cast<float>(2 * i) / static_cast<float>(cfg.head_dim);
      rope_inv_freq[i] = 1.0f / std::pow(static_cast<float>(cfg.rope_theta), e);
    }
    return absl::OkStatus();
  }

  // ---------------------------------------------------------------- blocks
  float* KvAt(int32_t block, int64_t layer, int which, int64_t slot) {
    return kv.data() + ((static_cast<int64_t>(block) * cfg.num_layers + layer) * 2 + which) * kv_dim * bs +
           slot * kv_dim;
  }
  void Release(Seq* s) {
    for (int32_t b : s->blocks) {
      if (--refs[b] == 0) free_blocks.push_back(b);
    }
    s->blocks.clear();
  }
  // Blocks for positions [s->computed, s->computed + len): allocates what is
  // missing and copies a shared partial block before it is written. False
  // (nothing changed) when the pool lacks them.
  bool Reserve(Seq* s, int64_t len) {
    const int64_t end = s->computed + len;
    const int64_t need = (end + bs - 1) / bs - static_cast<int64_t>(s->blocks.size());
    const int64_t first = s->computed / bs;
    const bool cow = s->computed % bs != 0 && first < static_cast<int64_t>(s->blocks.size()) && refs[s->blocks[first]] > 1;
    if (std::max<int64_t>(need, 0) + (cow ? 1 : 0) > static_cast<int64_t>(free_blocks.size())) return false;
    if (cow) {
      const int32_t nb = free_blocks.back();
      free_blocks.pop_back();
      refs[nb] = 1;
      std::memcpy(kv.data() + nb * block_floats, kv.data() + s->blocks[first] * block_floats,
                  static_cast<size_t>(block_floats) * 4);
      --refs[s->blocks[first]];
      s->blocks[first] = nb;
    }
    for (int64_t i = 0; i < need; ++i) {
      const int32_t nb = free_blocks.back();
      free_blocks.pop_back();
      refs[nb] = 1;
      s->blocks.push_back(nb);
    }
    return true;
  }
  // Largest chunk (<= want) of s's pending positions the pool can hold now.
  int64_t Fit(Seq* s, int64_t want) {
    int64_t lo = 0, hi = want;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const int64_t end = s->computed + mid;
      const int64_t need = (end + bs - 1) / bs - static_cast<int64_t>(s->blocks.size());
      const int64_t first = s->computed / bs;
      const bool cow = s->computed % bs != 0 && first < static_cast<int64_t>(s->blocks.size()) && refs[s->blocks[first]] > 1;
      if (std::max<int64_t>(need, 0) + (cow ? 1 : 0) <= static_cast<int64_t>(free_blocks.size())) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
  void Preempt(size_t index) {
    std::unique_ptr<Seq> s = std::move(running[index]);
    running.erase(running.begin() + static_cast<ptrdiff_t>(index));
    Release(s.get());
    s->computed = 0;
    ++s->preemptions;
    ++st.preemptions;
    waiting.push_front(std::move(s));
  }

  // ---------------------------------------------------------------- compute
  void RmsNorm(const float* in, const std::vector<float>& weight, float* out, int64_t rows) {
    const int64_t h = cfg.hidden_size;
    k->ParallelFor(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xi = in + r * h;
        const float ms = Dot(xi, xi, h) / static_cast<float>(h);
        const float inv = 1.0f / std::sqrt(ms + static_cast<float>(cfg.rms_eps));
        float* o = out + r * h;
        for (int64_t i = 0; i < h; ++i) o[i] = weight[i] * (xi[i] * inv);
      }
    });
  }

  void Rope(float* v, int64_t pos, int64_t heads) {
    const int64_t hd = cfg.head_dim, half = hd / 2;
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(pos) * rope_inv_freq[i];
      const float c = std::cos(a), s = std::sin(a);
      for (int64_t hh = 0; hh < heads; ++hh) {
        float* p = v + hh * hd;
        const float x0 = p[i], x1 = p[i + half];
        p[i] = x0 * c - x1 * s;
        p[i + half] = x1 * c + x0 * s;
      }
    }
  }

  // One forward pass over the chunks' tokens; fills `logits` for the rows
  // in `out_rows` (in that order).
  void Forward(const std::vector<Chunk>& chunks, int64_t rows, const std::vector<int64_t>& out_rows) {
    const int64_t h = cfg.hidden_size, hd = cfg.head_dim, inter = cfg.intermediate_size;
    x.resize(static_cast<size_t>(rows * h));
    xn.resize(x.size());
    tmp.resize(x.size());
    qkv.resize(static_cast<size_t>(rows * qkv_dim));
    attn.resize(static_cast<size_t>(rows * q_dim));
    gu.resize(static_cast<size_t>(rows * 2 * inter));
    act.resize(static_cast<size_t>(rows * inter));
    // Row -> (sequence, position).
    std::vector<Seq*> row_seq(static_cast<size_t>(rows));
    std::vector<int64_t> row_pos(static_cast<size_t>(rows));
    for (const Chunk& c : chunks) {
      for (int64_t i = 0; i < c.len; ++i) {
        row_seq[c.row + i] = c.seq;
        row_pos[c.row + i] = c.start + i;
        w->embed.Row(c.seq->tokens[c.start + i], x.data() + (c.row + i) * h);
      }
    }
    const int64_t group = cfg.num_heads / cfg.num_kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const LayerWeights& lw = w->layers[l];
      RmsNorm(x.data(), lw.attn_norm, xn.data(), rows);
      k->MatMul(xn.data(), rows, lw.qkv, qkv.data());
      // Rotary embeddings on q and k; k and v into the cache.
      k->ParallelFor(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* q = qkv.data() + r * qkv_dim;
          Rope(q, row_pos[r], cfg.num_heads);
          Rope(q + q_dim, row_pos[r], cfg.num_kv_heads);
          Seq* s = row_seq[r];
          const int64_t p = row_pos[r];
          const int32_t b = s->blocks[p / bs];
          std::memcpy(KvAt(b, l, 0, p % bs), q + q_dim, static_cast<size_t>(kv_dim) * 4);
          std::memcpy(KvAt(b, l, 1, p % bs), q + q_dim + kv_dim, static_cast<size_t>(kv_dim) * 4);
        }
      });
      // Attention of each (row, head) over its sequence's positions 0..p,
      // read block by block from the cache (no contiguous copy).
      k->ParallelFor(rows * cfg.num_heads, [&](int64_t i0, int64_t i1) {
        std::vector<float> scores;
        std::vector<const float*> keys, values;
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = i / cfg.num_heads, head = i % cfg.num_heads, g = head / group;
          const float* q = qkv.data() + r * qkv_dim + head * hd;
          Seq* s = row_seq[r];
          const int64_t p = row_pos[r];
          scores.resize(static_cast<size_t>(p + 1));
          keys.resize(static_cast<size_t>(p + 1));
          values.resize(static_cast<size_t>(p + 1));
          for (int64_t j = 0; j <= p; ++j) {
            keys[j] = KvAt(s->blocks[j / bs], l, 0, j % bs) + g * hd;
            values[j] = KvAt(s->blocks[j / bs], l, 1, j % bs) + g * hd;
          }
          Dots(q, keys.data(), p + 1, hd, scores.data());  // each score exactly Dot(q, k_j)
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= p; ++j) {
            scores[j] *= scale;
            m = std::max(m, scores[j]);
          }
          float sum = 0;
          for (int64_t j = 0; j <= p; ++j) {
            scores[j] = std::exp(scores[j] - m);
            sum += scores[j];
          }
          const float inv = 1.0f / sum;
          for (int64_t j = 0; j <= p; ++j) scores[j] *= inv;
          WeightedSum(scores.data(), values.data(), p + 1, hd, attn.data() + r * q_dim + head * hd);
        }
      });
      k->MatMul(attn.data(), rows, lw.o, tmp.data());
      for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
      RmsNorm(x.data(), lw.mlp_norm, xn.data(), rows);
      k->MatMul(xn.data(), rows, lw.gate_up, gu.data());
      k->ParallelFor(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* g = gu.data() + r * 2 * inter;
          const float* u = g + inter;
          float* a = act.data() + r * inter;
          for (int64_t i = 0; i < inter; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        }
      });
      k->MatMul(act.data(), rows, lw.down, tmp.data());
      for (size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }
    // Final norm and logits for the rows that sample (or all, for scoring).
    const int64_t n = static_cast<int64_t>(out_rows.size());
    std::vector<float> last(static_cast<size_t>(n * h));
    for (int64_t i = 0; i < n; ++i) std::memcpy(last.data() + i * h, x.data() + out_rows[i] * h, static_cast<size_t>(h) * 4);
    std::vector<float> normed(last.size());
    RmsNorm(last.data(), w->final_norm, normed.data(), n);
    logits.resize(static_cast<size_t>(n * cfg.vocab_size));
    k->MatMul(normed.data(), n, w->output(), logits.data());
  }

  // ---------------------------------------------------------------- requests
  Status Validate(const GenerationRequest& r) const {
    const SamplingParams& p = r.params;
    if (r.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= cfg.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", r.prompt[i],
                                                       ", outside the vocabulary [0, ", cfg.vocab_size, ")"));
      }
    }
    if (p.max_new_tokens < 1) return absl::InvalidArgumentError("max_new_tokens must be at least 1");
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + p.max_new_tokens;
    if (total > cfg.max_position) {
      return absl::InvalidArgumentError(absl::StrCat("prompt of ", r.prompt.size(), " tokens + max_new_tokens ",
                                                     p.max_new_tokens, " exceeds the context of ", cfg.max_position));
    }
    if ((total + bs - 1) / bs > st.blocks_total) {
      return absl::InvalidArgumentError(absl::StrCat("a sequence of ", total, " tokens needs ", (total + bs - 1) / bs,
                                                     " KV blocks, the cache holds ", st.blocks_total,
                                                     " (raise kv_cache_bytes)"));
    }
    if (p.n < 1 || p.n > opt.max_running) {
      return absl::InvalidArgumentError(absl::StrCat("n must be in [1, max_running = ", opt.max_running, "], got ", p.n));
    }
    if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
      return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", p.temperature));
    }
    if (!(p.top_p > 0 && p.top_p <= 1)) return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
    if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
    for (int64_t s : p.stop_ids) {
      if (s < 0 || s >= cfg.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("stop id ", s, " is outside the vocabulary"));
      }
    }
    return absl::OkStatus();
  }

  void Finish(std::unique_ptr<Seq> s, FinishReason why) {
    Release(s.get());
    Completion c;
    c.request_id = s->req->id;
    c.sample = std::max<int64_t>(s->sample, 0);
    c.tokens.assign(s->tokens.begin() + static_cast<ptrdiff_t>(s->req->prompt.size()), s->tokens.end());
    c.logprobs = std::move(s->logprobs);
    c.versions = std::move(s->versions);
    c.finish = why;
    c.preemptions = s->preemptions;
    c.queue_seconds = s->queue_s;
    c.first_token_seconds = s->first_token_s;
    c.total_seconds = Since(s->req->submitted);
    finished.push_back(std::move(c));
  }

  // Appends a sampled token to s; true when s is finished (and why).
  bool Append(Seq* s, const float* row, FinishReason* why) {
    const SamplingParams& p = s->req->params;
    const int64_t position = s->response_len();
    const Sampled t = Sample(row, cfg.vocab_size, p, Uniform(p.seed, std::max<int64_t>(s->sample, 0), position));
    if (position == 0) s->first_token_s = Since(s->req->submitted);
    s->tokens.push_back(t.token);
    s->logprobs.push_back(t.logprob);
    s->versions.push_back(w->version);
    ++st.tokens_generated;
    if (s->req->stops.count(t.token)) {
      *why = FinishReason::kStop;
      return true;
    }
    if (s->response_len() >= p.max_new_tokens || static_cast<int64_t>(s->tokens.size()) >= cfg.max_position) {
      *why = FinishReason::kLength;
      return true;
    }
    return false;
  }

  Status Step() {
    if (running.empty() && waiting.empty()) return absl::OkStatus();
    std::vector<Chunk> chunks;
    int64_t budget = opt.max_step_tokens;
    int64_t rows = 0;
    auto add = [&](Seq* s, int64_t len) {
      chunks.push_back({s, s->computed, len, rows});
      rows += len;
      budget -= len;
    };
    // 1. Decodes (one pending position), in admission order; a sequence that
    // cannot get a block preempts the sequence admitted last.
    for (size_t i = 0; i < running.size() && budget > 0;) {
      Seq* s = running[i].get();
      if (s->pending() != 1) {
        ++i;
        continue;
      }
      if (Reserve(s, 1)) {
        add(s, 1);
        ++i;
        continue;
      }
      const size_t victim = running.size() - 1;
      Preempt(victim);
      if (victim == i) break;  // it was the last admitted itself
    }
    // 2. Prefill chunks of running sequences, then 3. admissions.
    for (auto& up : running) {
      Seq* s = up.get();
      if (budget <= 0) break;
      if (s->pending() <= 1 || std::any_of(chunks.begin(), chunks.end(), [&](const Chunk& c) { return c.seq == s; })) {
        continue;
      }
      const int64_t len = Fit(s, std::min(budget, s->pending()));
      if (len > 0 && Reserve(s, len)) add(s, len);
    }
    while (budget > 0 && !waiting.empty()) {
      Seq* s = waiting.front().get();
      const int64_t slots = s->sample < 0 ? s->req->params.n : 1;
      if (static_cast<int64_t>(running.size()) + slots > opt.max_running) break;
      const int64_t len = Fit(s, std::min(budget, s->pending()));
      if (len == 0 || !Reserve(s, len)) break;
      if (!s->started) {
        s->started = true;
        s->queue_s = Since(s->req->submitted);
      }
      s->admitted = next_admission++;
      running.push_back(std::move(waiting.front()));
      waiting.pop_front();
      add(s, len);
    }
    if (chunks.empty()) {
      if (!waiting.empty() && running.empty()) {
        return absl::InternalError("the engine cannot admit a waiting sequence into an empty cache");
      }
      return absl::OkStatus();
    }
    // Rows that produce logits: each chunk's last row when it completes the
    // sequence's pending positions (every row when scoring).
    std::vector<int64_t> out_rows;
    std::vector<Chunk*> sampling;
    for (Chunk& c : chunks) {
      if (c.seq->all_logits) {
        for (int64_t i = 0; i < c.len; ++i) out_rows.push_back(c.row + i);
      } else if (c.start + c.len == static_cast<int64_t>(c.seq->tokens.size())) {
        out_rows.push_back(c.row + c.len - 1);
        sampling.push_back(&c);
      }
    }
    Forward(chunks, rows, out_rows);
    ++st.steps;
    for (const Chunk& c : chunks) {
      c.seq->computed += c.len;
      if (c.len > 1 || c.seq->response_len() == 0) st.tokens_prefilled += c.len;
    }
    // Sample, fork n > 1 prompts, finish.
    size_t out_i = 0;
    std::vector<std::pair<Seq*, FinishReason>> done;
    std::vector<std::unique_ptr<Seq>> forks;
    for (Chunk* c : sampling) {
      const float* row = logits.data() + static_cast<int64_t>(out_i++) * cfg.vocab_size;
      Seq* s = c->seq;
      FinishReason why;
      if (s->sample < 0) {
        for (int64_t i = 0; i < s->req->params.n; ++i) {
          auto child = std::make_unique<Seq>(*s);
          child->sample = i;
          for (int32_t b : child->blocks) ++refs[b];
          if (Append(child.get(), row, &why)) {
            done.emplace_back(child.get(), why);
          }
          forks.push_back(std::move(child));
        }
        done.emplace_back(s, FinishReason::kError);  // the parent itself goes away (not reported)
      } else if (Append(s, row, &why)) {
        done.emplace_back(s, why);
      }
    }
    // Children take the parent's place in admission order.
    for (auto& f : forks) running.push_back(std::move(f));
    for (const auto& entry : done) {
      Seq* s = entry.first;
      FinishReason why = entry.second;
      auto it = std::find_if(running.begin(), running.end(), [s](const auto& p) { return p.get() == s; });
      std::unique_ptr<Seq> owned = std::move(*it);
      running.erase(it);
      if (owned->sample < 0) {
        Release(owned.get());
      } else {
        Finish(std::move(owned), why);
      }
    }
    std::stable_sort(running.begin(), running.end(), [](const auto& a, const auto& b) { return a->admitted < b->admitted; });
    return absl::OkStatus();
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Open(const std::string& dir, const EngineOptions& options, int64_t version) {
  FW_ASSIGN_OR_RETURN(auto w, ModelWeights::Load(dir, options.weight_dtype, version));
  return FromWeights(std::move(w), options);
}

Result<std::unique_ptr<Engine>> Engine::FromWeights(std::shared_ptr<const ModelWeights> weights,
                                                    const EngineOptions& options) {
  if (weights == nullptr) return absl::InvalidArgumentError("no weights");
  auto impl = std::make_unique<Impl>();
  FW_RETURN_IF_ERROR(impl->Init(std::move(weights), options));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<int64_t> Engine::Submit(GenerationRequest request) {
  FW_RETURN_IF_ERROR(impl_->Validate(request));
  auto req = std::make_shared<Impl::Request>();
  req->id = impl_->next_request++;
  req->prompt = std::move(request.prompt);
  req->params = std::move(request.params);
  if (!req->params.ignore_eos) req->stops.insert(impl_->cfg.eos_token_ids.begin(), impl_->cfg.eos_token_ids.end());
  req->stops.insert(req->params.stop_ids.begin(), req->params.stop_ids.end());
  req->submitted = Clock::now();
  auto s = std::make_unique<Impl::Seq>();
  s->req = req;
  s->sample = req->params.n > 1 ? -1 : 0;
  s->tokens = req->prompt;
  impl_->waiting.push_back(std::move(s));
  return req->id;
}

Status Engine::Step() { return impl_->Step(); }

bool Engine::Idle() const { return impl_->running.empty() && impl_->waiting.empty(); }

std::vector<Completion> Engine::TakeFinished() {
  std::vector<Completion> out;
  out.swap(impl_->finished);
  return out;
}

std::vector<Completion> Engine::Generate(const std::vector<GenerationRequest>& requests) {
  std::vector<int64_t> ids(requests.size(), -1);
  std::vector<Completion> out;
  std::map<int64_t, size_t> slot;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = Submit(requests[i]);
    if (id.ok()) {
      ids[i] = *id;
      slot[*id] = i;
    } else {
      Completion c;
      c.request_id = -1;
      c.finish = FinishReason::kError;
      c.error = std::string(id.status().message());
      out.push_back(std::move(c));
    }
  }
  std::vector<Completion> got;
  while (!Idle()) {
    Status s = Step();
    if (!s.ok()) {
      Completion c;
      c.finish = FinishReason::kError;
      c.error = std::string(s.message());
      got.push_back(std::move(c));
      break;
    }
    for (Completion& c : TakeFinished()) got.push_back(std::move(c));
  }
  // Request order (then sample order); refused requests first in their place.
  std::vector<std::vector<Completion>> by_request(requests.size());
  size_t refused = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ids[i] < 0) by_request[i].push_back(std::move(out[refused++]));
  }
  for (Completion& c : got) {
    auto it = slot.find(c.request_id);
    if (it != slot.end()) by_request[it->second].push_back(std::move(c));
  }
  std::vector<Completion> result;
  for (auto& v : by_request) {
    std::sort(v.begin(), v.end(), [](const Completion& a, const Completion& b) { return a.sample < b.sample; });
    for (Completion& c : v) result.push_back(std::move(c));
  }
  return result;
}

Status Engine::UpdateWeights(std::shared_ptr<const ModelWeights> weights) {
  if (weights == nullptr) return absl::InvalidArgumentError("no weights");
  const ModelConfig& a = impl_->cfg;
  const ModelConfig& b = weights->config;
  if (a.vocab_size != b.vocab_size || a.hidden_size != b.hidden_size || a.intermediate_size != b.intermediate_size ||
      a.num_layers != b.num_layers || a.num_heads != b.num_heads || a.num_kv_heads != b.num_kv_heads ||
      a.head_dim != b.head_dim) {
    return absl::InvalidArgumentError("the new weights' config differs in shape from the engine's model");
  }
  impl_->w = std::move(weights);
  // Requests that asked to stop at a weight change come back partial.
  for (size_t i = 0; i < impl_->running.size();) {
    Impl::Seq* s = impl_->running[i].get();
    if (s->req->params.abort_on_weight_update && s->sample >= 0) {
      std::unique_ptr<Impl::Seq> owned = std::move(impl_->running[i]);
      impl_->running.erase(impl_->running.begin() + static_cast<ptrdiff_t>(i));
      impl_->Finish(std::move(owned), FinishReason::kAborted);
    } else {
      ++i;
    }
  }
  if (impl_->opt.recompute_on_swap) {
    for (auto& s : impl_->running) {
      impl_->Release(s.get());
      s->computed = 0;
    }
  }
  return absl::OkStatus();
}

Status Engine::UpdateWeights(const std::string& dir, int64_t version) {
  FW_ASSIGN_OR_RETURN(auto w, ModelWeights::Load(dir, impl_->opt.weight_dtype, version));
  return UpdateWeights(std::move(w));
}

Status Engine::UpdateWeights(const std::vector<const TensorView*>& tensors, int64_t version) {
  // Double buffering: the weights swapped out last time lend their buffers
  // when nothing else holds them (the engine never does between steps).
  std::shared_ptr<const ModelWeights> spare = std::move(impl_->spare);
  ModelWeights* recycle = spare != nullptr && spare.use_count() == 1 ? const_cast<ModelWeights*>(spare.get()) : nullptr;
  FW_ASSIGN_OR_RETURN(auto w, ModelWeights::FromTensors(impl_->cfg, tensors, impl_->opt.weight_dtype, version, recycle));
  spare.reset();
  std::shared_ptr<const ModelWeights> old = impl_->w;
  FW_RETURN_IF_ERROR(UpdateWeights(std::move(w)));
  impl_->spare = std::move(old);
  return absl::OkStatus();
}

int64_t Engine::weight_version() const { return impl_->w->version; }

Result<std::vector<std::vector<float>>> Engine::PromptLogits(const std::vector<std::vector<int64_t>>& prompts) {
  if (!Idle()) return absl::FailedPreconditionError("PromptLogits runs on an idle engine");
  Impl& m = *impl_;
  std::vector<std::vector<float>> out;
  // As many prompts per forward pass as the cache holds.
  size_t i = 0;
  while (i < prompts.size()) {
    std::vector<std::unique_ptr<Impl::Seq>> seqs;
    std::vector<Impl::Chunk> chunks;
    std::vector<int64_t> rows;
    int64_t n = 0;
    for (; i < prompts.size(); ++i) {
      GenerationRequest r{prompts[i], {}};
      r.params.max_new_tokens = 1;
      FW_RETURN_IF_ERROR_CTX(m.Validate(r), "prompt ", i);
      auto s = std::make_unique<Impl::Seq>();
      s->req = std::make_shared<Impl::Request>();
      s->req->prompt = prompts[i];
      s->tokens = prompts[i];
      s->all_logits = true;
      const int64_t len = static_cast<int64_t>(prompts[i].size());
      if (!m.Reserve(s.get(), len)) {
        if (seqs.empty()) return absl::ResourceExhaustedError("a prompt does not fit the KV cache");
        break;
      }
      chunks.push_back({s.get(), 0, len, n});
      for (int64_t j = 0; j < len; ++j) rows.push_back(n + j);
      n += len;
      seqs.push_back(std::move(s));
    }
    m.Forward(chunks, n, rows);
    int64_t at = 0;
    for (auto& s : seqs) {
      const int64_t len = static_cast<int64_t>(s->tokens.size());
      out.emplace_back(m.logits.begin() + at * m.cfg.vocab_size, m.logits.begin() + (at + len) * m.cfg.vocab_size);
      at += len;
      m.Release(s.get());
    }
  }
  return out;
}

EngineStats Engine::stats() const {
  EngineStats s = impl_->st;
  s.blocks_free = static_cast<int64_t>(impl_->free_blocks.size());
  s.running = static_cast<int64_t>(impl_->running.size());
  s.waiting = static_cast<int64_t>(impl_->waiting.size());
  s.weight_version = impl_->w->version;
  return s;
}

const ModelConfig& Engine::config() const { return impl_->cfg; }
std::string Engine::kernels_name() const { return impl_->k->name(); }

}  // namespace flywheel::llm

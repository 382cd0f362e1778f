// The rollout engine: batched autoregressive generation for a Llama-style
// model over a paged KV cache with continuous batching. docs/llm.md ("The
// engine") describes the scheduler, the cache and the guarantees.
//
//   auto e = Engine::Open("ckpt/", EngineOptions{});
//   auto done = (*e)->Generate({{prompt_ids, SamplingParams{.max_new_tokens = 64}}});
//
// - Paged KV cache: fixed-size blocks (block_tokens positions, every layer's
//   K and V) from a pool sized by a byte budget. `n` samples of one prompt
//   share the prompt's blocks (a shared partial block is copied on the first
//   write). When a sequence needs a block and none is free, the sequence
//   admitted last is preempted: its blocks are freed and it is recomputed
//   from its tokens when blocks free up. Never an out-of-memory crash.
// - Continuous batching: each step decodes one token for every running
//   sequence and fills the rest of a token budget with prompt chunks
//   (chunked prefill); a finished sequence's place is taken at the next step.
// - Deterministic and batch-invariant: a sequence's tokens and log-probs
//   depend only on (weights, prompt, seed, sample index, sampling options),
//   not on what else is in the batch, the thread count or preemption (kernels.h;
//   sampling draws are keyed by seed, sample and position).
// - Hot swap: UpdateWeights between steps; running sequences continue and
//   their later tokens carry the new version (or, per request, stop as
//   kAborted with what they have). The prefix's KV from the old weights is
//   kept unless EngineOptions::recompute_on_swap.
//
// Thread-safety: one thread drives an Engine (Submit, Step, Generate,
// UpdateWeights); kernels use their own threads inside a step.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/llm/kernels.h"
#include "flywheel/llm/model.h"

namespace flywheel::llm {

struct EngineOptions {
  DType weight_dtype = DType::kF32;       // F32, BF16 or I8 (weight-only int8, a scale per row)
  int64_t kv_cache_bytes = int64_t{512} << 20;
  int block_tokens = 16;                  // positions per KV block
  int64_t max_step_tokens = 256;          // tokens computed per step (decodes + prefill chunks)
  int64_t max_running = 256;              // sequences decoding at once
  int threads = 0;                        // 0: the machine's cores
  std::string isa;                        // "" = best; "avx512", "avx2", "portable"
  bool recompute_on_swap = false;         // recompute running prefixes with new weights
};

struct SamplingParams {
  int64_t max_new_tokens = 16;
  std::vector<int64_t> stop_ids;          // besides the config's eos ids (ignore_eos drops those)
  bool ignore_eos = false;
  double temperature = 1.0;               // 0: greedy
  int64_t top_k = 0;                      // 0: all
  double top_p = 1.0;
  int64_t n = 1;                          // samples sharing the prompt's KV
  uint64_t seed = 0;
  bool abort_on_weight_update = false;    // stop (kAborted, partial) when the weights change
};

struct GenerationRequest {
  std::vector<int64_t> prompt;
  SamplingParams params;
};

enum class FinishReason { kStop, kLength, kAborted, kError };
const char* FinishReasonName(FinishReason r);

struct Completion {
  int64_t request_id = 0;
  int64_t sample = 0;
  std::vector<int64_t> tokens;       // the response
  std::vector<float> logprobs;       // log p(token) under softmax(logits / T) (T = 1 when greedy)
  std::vector<int64_t> versions;     // the weight version that produced each token
  FinishReason finish = FinishReason::kLength;
  std::string error;
  int64_t preemptions = 0;
  double queue_seconds = 0;          // submit -> first computed token
  double first_token_seconds = 0;    // submit -> first response token
  double total_seconds = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t tokens_generated = 0;
  int64_t tokens_prefilled = 0;
  int64_t preemptions = 0;
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t weight_version = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Open(const std::string& checkpoint_dir, const EngineOptions& options = {},
                                              int64_t version = 0);
  static Result<std::unique_ptr<Engine>> FromWeights(std::shared_ptr<const ModelWeights> weights,
                                                     const EngineOptions& options = {});
  ~Engine();

  // Queues a request; InvalidArgument naming what is wrong (a token id
  // outside the vocabulary, a prompt that with max_new_tokens exceeds the
  // context, n < 1, ...). Returns the request id.
  Result<int64_t> Submit(GenerationRequest request);
  // One scheduling step: admits, computes, samples. No-op when idle.
  Status Step();
  bool Idle() const;
  // Completions finished since the last call.
  std::vector<Completion> TakeFinished();
  // Submits all, steps until they finish, returns them in request order
  // (a refused request comes back as kError with its message; the others run).
  std::vector<Completion> Generate(const std::vector<GenerationRequest>& requests);

  // New weights between steps (same config shape; InvalidArgument otherwise).
  Status UpdateWeights(std::shared_ptr<const ModelWeights> weights);
  Status UpdateWeights(const std::string& checkpoint_dir, int64_t version);
  // From named tensors in Hugging Face names (a version from the weight
  // service); converted into the engine's layout during the call.
  Status UpdateWeights(const std::vector<const TensorView*>& tensors, int64_t version);
  int64_t weight_version() const;

  // Logits (vocab per position) of every position of each prompt, computed
  // through the same paged-cache path as generation (tests, scoring).
  Result<std::vector<std::vector<float>>> PromptLogits(const std::vector<std::vector<int64_t>>& prompts);

  EngineStats stats() const;
  const ModelConfig& config() const;
  std::string kernels_name() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::llm

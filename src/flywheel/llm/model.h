// The engine's view of a Llama-style model: its config.json and its weights,
// loaded from a Hugging Face-format checkpoint folder (safetensors.h) and
// checked against the config (every tensor present, shaped as the config
// implies, none unexpected; errors name the field or tensor). Weights are
// kept in F32 or BF16; Q/K/V and gate/up are fused into one matrix each so a
// layer runs as four matrix products. docs/llm.md ("The engine").
//
// Thread-safety: a ModelWeights is immutable once loaded and shared (by
// shared_ptr) between the engine and sequences that still use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/llm/safetensors.h"

namespace flywheel::llm {

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Parses Hugging Face's config.json for LlamaForCausalLM (the fields
  // transformers 4 and 5 write, incl. `rope_parameters`); InvalidArgument
  // naming the field for a missing, mistyped or inconsistent value, and
  // Unimplemented for what the engine does not run (rope scaling, biases,
  // an activation other than silu).
  static Result<ModelConfig> FromJson(std::string_view text);
  static Result<ModelConfig> FromFile(const std::string& path);
};

// A weight matrix, rows x cols, row-major, in F32, BF16 or I8. I8 is
// weight-only quantization: row n holds round(w / scale[n]) in [-127, 127],
// scale[n] = max |w[n, :]| / 127 (docs/llm.md, "Kernels").
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;
  std::vector<uint8_t> data;
  std::vector<float> scale;  // I8: one per row

  const float* f32() const { return reinterpret_cast<const float*>(data.data()); }
  const uint16_t* bf16() const { return reinterpret_cast<const uint16_t*>(data.data()); }
  // Row r as float32 into out[cols].
  void Row(int64_t r, float* out) const;
};

struct LayerWeights {
  std::vector<float> attn_norm;  // hidden
  Matrix qkv;                    // (heads + 2 kv_heads) * head_dim x hidden
  Matrix o;                      // hidden x heads * head_dim
  std::vector<float> mlp_norm;   // hidden
  Matrix gate_up;                // 2 * intermediate x hidden (gate rows, then up rows)
  Matrix down;                   // hidden x intermediate
};

struct ModelWeights {
  ModelConfig config;
  int64_t version = 0;
  Matrix embed;    // vocab x hidden
  Matrix lm_head;  // vocab x hidden (a copy of embed's data only when untied)
  bool tied = false;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;

  const Matrix& output() const { return tied ? embed : lm_head; }
  int64_t bytes() const;

  // Loads `dir` (config.json + safetensors) as `dtype` (F32, BF16, or I8:
  // weight-only int8 with a scale per row).
  static Result<std::shared_ptr<const ModelWeights>> Load(const std::string& dir, DType dtype, int64_t version);
  // The same from named tensors in Hugging Face names (F32, BF16 or F16),
  // e.g. a version fetched from the weight service; the views are read
  // during the call only. `recycle` (may be null): weights no one else
  // holds whose buffers are reused (their contents are lost), so a swap
  // touches no fresh pages.
  static Result<std::shared_ptr<const ModelWeights>> FromTensors(ModelConfig config,
                                                                 const std::vector<const TensorView*>& tensors,
                                                                 DType dtype, int64_t version,
                                                                 ModelWeights* recycle = nullptr);
};

}  // namespace flywheel::llm

// `flywheel llm import FILE.gguf DIR`: a Llama-architecture GGUF file as a
// Hugging Face-format checkpoint folder (config.json, model.safetensors or
// shards, tokenizer.json, tokenizer_config.json, generation_config.json)
// that transformers' LlamaForCausalLM, flywheel.llm and flywheel's engine
// load. Tensors are dequantized (F32, F16, BF16, Q8_0, Q4_0, Q4_1) and
// renamed; llama.cpp's interleaved row order of the Q and K projections
// (its converter permutes each head's rows for its rotary kernel) is undone.
// docs/llm.md ("GGUF import").
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/llm/safetensors.h"

namespace flywheel::llm {

class GgufFile;

struct ImportOptions {
  DType dtype = DType::kF32;  // F32, BF16 or F16
  uint64_t max_shard_bytes = uint64_t{5} << 30;
  // Called after each tensor: (tensors done, tensors in all, its name).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct ImportResult {
  int64_t tensors = 0;
  int64_t parameters = 0;
  std::string tokenizer;  // "gpt2 BPE (pre-tokenizer smollm)"
};

Result<ImportResult> ImportGguf(const std::string& gguf_path, const std::string& dir, const ImportOptions& options = {});

// The pieces, for tests and tools:
// config.json's contents for `g` (a llama-architecture file).
Result<std::string> ConfigJsonFromGguf(const GgufFile& g);
// tokenizer.json's contents for `g`'s gpt2-style BPE vocabulary.
Result<std::string> TokenizerJsonFromGguf(const GgufFile& g);
// The Hugging Face name of GGUF tensor `name` ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); NotFound for names it does not know.
Result<std::string> HfTensorName(const std::string& name);
// Undoes llama.cpp's permutation of a Q or K projection in place: `rows` x
// `cols` row-major, `heads` heads of rows / heads rows each.
Status UnpermuteRotaryRows(float* w, int64_t rows, int64_t cols, int64_t heads);

}  // namespace flywheel::llm

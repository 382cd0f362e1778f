#include "flywheel/llm/gguf_import.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "flywheel/base/half.h"
#include "flywheel/base/utf8.h"
#include "flywheel/io/file_system.h"
#include "flywheel/llm/gguf.h"
#include "nlohmann/json.hpp"

namespace flywheel::llm {
namespace {

using json = nlohmann::json;

// Token types in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;

// The pre-tokenizers of the GGUF `tokenizer.ggml.pre` names flywheel maps to
// Hugging Face's equivalents.
Result<json> PreTokenizer(const std::string& pre, bool add_prefix_space) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
                           {"use_regex", true}};
  if (pre == "gpt2" || pre == "default") return byte_level;
  if (pre == "smollm") {
    // Digits one by one, then GPT-2's byte-level split.
    return json{{"type", "Sequence"},
                {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  }
  std::string pattern;
  if (pre == "llama-bpe" || pre == "llama3") {
    pattern =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  } else if (pre == "qwen2") {
    pattern =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  } else {
    return absl::UnimplementedError(absl::StrCat("tokenizer.ggml.pre '", pre,
                                                 "' is not supported (flywheel maps gpt2, default, smollm, "
                                                 "llama-bpe, qwen2)"));
  }
  return json{{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"},
                             {"pattern", {{"Regex", pattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", false}}})}};
}

Result<const GgufValue*> StringArray(const GgufFile& g, std::string_view key) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata '", AsAbsl(key), "' is missing"));
  if (v->type != GgufType::kArray || v->elem != GgufType::kString) {
    return absl::InvalidArgumentError(absl::StrCat("metadata '", AsAbsl(key), "' is not an array of strings"));
  }
  return v;
}

Status CheckArchitecture(const GgufFile& g) {
  FW_ASSIGN_OR_RETURN(const std::string arch, g.String("general.architecture"));
  if (arch != "llama") {
    return absl::UnimplementedError(absl::StrCat("general.architecture '", arch,
                                                 "' is not supported (flywheel imports 'llama')"));
  }
  return absl::OkStatus();
}

int64_t IntOr(const GgufFile& g, std::string_view key, int64_t fallback) {
  auto v = g.Int(key);
  return v.ok() ? *v : fallback;
}

// A float from the metadata as the shortest decimal that reads back as the
// same float32 (1e-05, not 9.999999747378752e-06), as config.json has it.
Result<double> ConfigFloat(const GgufFile& g, std::string_view key) {
  FW_ASSIGN_OR_RETURN(const double v, g.Float(key));
  const GgufValue* raw = g.Find(key);
  if (raw->type != GgufType::kFloat32 || !std::isfinite(v)) return v;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string TokenText(const GgufValue& tokens, int64_t id) {
  return id >= 0 && static_cast<uint64_t>(id) < tokens.strings.size() ? std::string(tokens.strings[id]) : "";
}

}  // namespace

Result<std::string> HfTensorName(const std::string& name) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (const auto& [from, to] : kTop) {
    if (name == from) return std::string(to);
  }
  static const std::pair<const char*, const char*> kBlock[] = {
      {"attn_norm.weight", "input_layernorm.weight"},    {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
  int layer = -1;
  if (parts.size() == 3 && parts[0] == "blk" && absl::SimpleAtoi(parts[1], &layer) && layer >= 0) {
    for (const auto& [from, to] : kBlock) {
      if (parts[2] == from) return absl::StrCat("model.layers.", layer, ".", to);
    }
  }
  return absl::NotFoundError(absl::StrCat("tensor '", name, "' has no Hugging Face Llama name"));
}

Status UnpermuteRotaryRows(float* w, int64_t rows, int64_t cols, int64_t heads) {
  if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(rows, " rows do not split into ", heads, " heads of even size"));
  }
  const int64_t hd = rows / heads;
  std::vector<float> head(static_cast<size_t>(hd * cols));
  for (int64_t h = 0; h < heads; ++h) {
    float* base = w + h * hd * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    // llama.cpp row i * 2 + j holds Hugging Face row j * hd / 2 + i.
    for (int64_t i = 0; i < hd / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        std::memcpy(base + (j * hd / 2 + i) * cols, head.data() + (i * 2 + j) * cols, cols * sizeof(float));
      }
    }
  }
  return absl::OkStatus();
}

Result<std::string> ConfigJsonFromGguf(const GgufFile& g) {
  FW_RETURN_IF_ERROR(CheckArchitecture(g));
  FW_ASSIGN_OR_RETURN(const int64_t hidden, g.Int("llama.embedding_length"));
  FW_ASSIGN_OR_RETURN(const int64_t layers, g.Int("llama.block_count"));
  FW_ASSIGN_OR_RETURN(const int64_t ffn, g.Int("llama.feed_forward_length"));
  FW_ASSIGN_OR_RETURN(const int64_t heads, g.Int("llama.attention.head_count"));
  const int64_t kv_heads = IntOr(g, "llama.attention.head_count_kv", heads);
  FW_ASSIGN_OR_RETURN(const double eps, ConfigFloat(g, "llama.attention.layer_norm_rms_epsilon"));
  auto theta = ConfigFloat(g, "llama.rope.freq_base");
  if (g.Find("llama.rope.scaling.type") != nullptr) {
    FW_ASSIGN_OR_RETURN(const std::string scaling, g.String("llama.rope.scaling.type"));
    if (scaling != "none") {
      return absl::UnimplementedError(absl::StrCat("llama.rope.scaling.type '", scaling, "' is not supported"));
    }
  }
  if (heads <= 0 || hidden <= 0 || hidden % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("llama.embedding_length ", hidden,
                                                   " is not a multiple of llama.attention.head_count ", heads));
  }
  int64_t vocab = IntOr(g, "llama.vocab_size", -1);
  if (vocab < 0) {
    FW_ASSIGN_OR_RETURN(const GgufValue* tokens, StringArray(g, "tokenizer.ggml.tokens"));
    vocab = static_cast<int64_t>(tokens->count);
  }
  const int64_t head_dim = IntOr(g, "llama.attention.key_length", hidden / heads);
  json c = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", vocab},
      {"hidden_size", hidden},
      {"intermediate_size", ffn},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", IntOr(g, "llama.context_length", 2048)},
      {"rms_norm_eps", eps},
      {"rope_theta", theta.ok() ? *theta : 10000.0},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", g.FindTensor("output.weight") == nullptr},
      {"torch_dtype", "float32"},
  };
  for (const char* k : {"bos", "eos", "padding"}) {
    const int64_t id = IntOr(g, absl::StrCat("tokenizer.ggml.", k, "_token_id"), -1);
    if (id >= 0) c[std::string(k) == "padding" ? "pad_token_id" : absl::StrCat(k, "_token_id")] = id;
  }
  return c.dump(2);
}

Result<std::string> TokenizerJsonFromGguf(const GgufFile& g) {
  FW_ASSIGN_OR_RETURN(const std::string model, g.String("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return absl::UnimplementedError(absl::StrCat("tokenizer.ggml.model '", model,
                                                 "' is not supported (flywheel imports gpt2-style byte-level BPE)"));
  }
  FW_ASSIGN_OR_RETURN(const GgufValue* tokens, StringArray(g, "tokenizer.ggml.tokens"));
  FW_ASSIGN_OR_RETURN(const GgufValue* merges, StringArray(g, "tokenizer.ggml.merges"));
  const GgufValue* types = g.Find("tokenizer.ggml.token_type");
  if (types != nullptr && (types->type != GgufType::kArray || !types->elems || types->count != tokens->count)) {
    return absl::InvalidArgumentError("metadata 'tokenizer.ggml.token_type' is not an integer array as long as the tokens");
  }
  auto pre_name = g.String("tokenizer.ggml.pre");
  const bool prefix_space = [&] {
    const GgufValue* v = g.Find("tokenizer.ggml.add_space_prefix");
    return v != nullptr && v->type == GgufType::kBool && v->u != 0;
  }();
  FW_ASSIGN_OR_RETURN(json pre, PreTokenizer(pre_name.ok() ? *pre_name : "default", prefix_space));
  json vocab = json::object();
  json added = json::array();
  for (uint64_t id = 0; id < tokens->count; ++id) {
    const std::string_view t = tokens->strings[id];
    if (!IsValidUtf8(t)) return absl::DataLossError(absl::StrCat("token ", id, " is not valid UTF-8"));
    const std::string text(t);
    if (vocab.contains(text)) return absl::DataLossError(absl::StrCat("token ", id, " '", text, "' appears twice"));
    vocab[text] = id;
    const int64_t type = types != nullptr ? types->IntAt(id) : 1;
    if (type == kTokenControl || type == kTokenUserDefined) {
      added.push_back({{"id", id},
                       {"content", text},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type == kTokenUserDefined},
                       {"special", type == kTokenControl}});
    }
  }
  json merge_list = json::array();
  for (uint64_t k = 0; k < merges->count; ++k) {
    const std::string_view m = merges->strings[k];
    if (!IsValidUtf8(m)) return absl::DataLossError(absl::StrCat("merge ", k, " is not valid UTF-8"));
    const size_t space = m.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string_view::npos) {
      return absl::DataLossError(absl::StrCat("merge ", k, " '", AsAbsl(m), "' is not two tokens separated by one space"));
    }
    merge_list.push_back(std::string(m));
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre},
      {"post_processor", byte_level},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
  return tok.dump();
}

namespace {

// tokenizer_config.json and generation_config.json: special tokens and the
// chat template, where transformers looks for them.
Result<std::pair<std::string, std::string>> SideConfigs(const GgufFile& g) {
  FW_ASSIGN_OR_RETURN(const GgufValue* tokens, StringArray(g, "tokenizer.ggml.tokens"));
  json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
             {"clean_up_tokenization_spaces", false},
             {"model_max_length", IntOr(g, "llama.context_length", 2048)}};
  json gen = json::object();
  const std::pair<const char*, const char*> kSpecial[] = {
      {"bos", "bos_token"}, {"eos", "eos_token"}, {"unknown", "unk_token"}, {"padding", "pad_token"}};
  for (const auto& [key, name] : kSpecial) {
    const int64_t id = IntOr(g, absl::StrCat("tokenizer.ggml.", AsAbsl(key), "_token_id"), -1);
    if (id < 0) continue;
    if (static_cast<uint64_t>(id) >= tokens->count) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.", AsAbsl(key), "_token_id ", id, " is outside the ",
                                                     tokens->count, "-token vocabulary"));
    }
    tc[name] = TokenText(*tokens, id);
    if (std::string(key) == "bos" || std::string(key) == "eos") gen[absl::StrCat(AsAbsl(key), "_token_id")] = id;
    if (std::string(key) == "padding") gen["pad_token_id"] = id;
  }
  if (const GgufValue* v = g.Find("tokenizer.ggml.add_bos_token"); v && v->type == GgufType::kBool) {
    tc["add_bos_token"] = v->u != 0;
  }
  if (g.Find("tokenizer.chat_template") != nullptr) {
    FW_ASSIGN_OR_RETURN(const std::string tmpl, g.String("tokenizer.chat_template"));
    if (!IsValidUtf8(tmpl)) return absl::DataLossError("tokenizer.chat_template is not valid UTF-8");
    tc["chat_template"] = tmpl;
  }
  return std::make_pair(tc.dump(2), gen.dump(2));
}

// The tensor's bytes in `dtype` from float32 values.
std::vector<uint8_t> Convert(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * DTypeBytes(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else if (dtype == DType::kF16) {
    for (size_t k = 0; k < v.size(); ++k) {
      const uint16_t h = FloatToHalf(v[k]);
      std::memcpy(out.data() + 2 * k, &h, 2);
    }
  } else {  // BF16, round to nearest even
    for (size_t k = 0; k < v.size(); ++k) {
      const uint16_t h = FloatToBf16(v[k]);
      std::memcpy(out.data() + 2 * k, &h, 2);
    }
  }
  return out;
}

}  // namespace

Result<ImportResult> ImportGguf(const std::string& gguf_path, const std::string& dir, const ImportOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16 && options.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype ", AsAbsl(DTypeName(options.dtype)), " (use F32, BF16 or F16)"));
  }
  FW_ASSIGN_OR_RETURN(const std::string local_gguf, io::LocalPath(gguf_path));
  FW_ASSIGN_OR_RETURN(const std::string local_dir, io::LocalPath(dir));
  FW_ASSIGN_OR_RETURN(auto g, GgufFile::Open(local_gguf));
  FW_ASSIGN_OR_RETURN(const std::string config, ConfigJsonFromGguf(*g));
  FW_ASSIGN_OR_RETURN_CTX(const std::string tokenizer, TokenizerJsonFromGguf(*g), gguf_path);
  FW_ASSIGN_OR_RETURN(auto side, SideConfigs(*g));
  const int64_t heads = *g->Int("llama.attention.head_count");
  const int64_t kv_heads = IntOr(*g, "llama.attention.head_count_kv", heads);

  ImportResult result;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TensorToWrite> out;
  bytes.reserve(g->tensors().size());
  for (const GgufTensor& t : g->tensors()) {
    if (t.name == "rope_freqs.weight") {
      return absl::UnimplementedError("tensor 'rope_freqs.weight' (Llama 3 rope scaling) is not supported");
    }
    FW_ASSIGN_OR_RETURN_CTX(std::string name, HfTensorName(t.name), gguf_path);
    FW_ASSIGN_OR_RETURN_CTX(std::vector<float> v, g->Dequantize(t), gguf_path);
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    const bool q = t.name.ends_with(".attn_q.weight");
    const bool k = t.name.ends_with(".attn_k.weight");
    if (q || k) {
      if (shape.size() != 2) return absl::DataLossError(absl::StrCat("tensor '", t.name, "' is not a matrix"));
      FW_RETURN_IF_ERROR_CTX(UnpermuteRotaryRows(v.data(), shape[0], shape[1], q ? heads : kv_heads), "tensor '",
                             t.name, "'");
    }
    bytes.push_back(Convert(v, options.dtype));
    out.push_back({std::move(name), options.dtype, std::move(shape), bytes.back().data()});
    result.parameters += static_cast<int64_t>(t.elements);
    ++result.tensors;
    if (options.progress) options.progress(out.size(), g->tensors().size(), t.name);
  }
  auto fs = io::PosixFileSystem();
  FW_RETURN_IF_ERROR(fs->CreateDirs(local_dir));
  WriteOptions wo;
  wo.max_shard_bytes = options.max_shard_bytes;
  wo.metadata = {{"format", "pt"}, {"source", "flywheel llm import"}};
  FW_RETURN_IF_ERROR(WriteCheckpoint(local_dir, out, wo));
  FW_RETURN_IF_ERROR(fs->Replace(local_dir + "/config.json", config));
  FW_RETURN_IF_ERROR(fs->Replace(local_dir + "/tokenizer.json", tokenizer));
  FW_RETURN_IF_ERROR(fs->Replace(local_dir + "/tokenizer_config.json", side.first));
  FW_RETURN_IF_ERROR(fs->Replace(local_dir + "/generation_config.json", side.second));
  auto pre = g->String("tokenizer.ggml.pre");
  result.tokenizer = absl::StrCat("gpt2 BPE (pre-tokenizer ", pre.ok() ? *pre : "default", ")");
  return result;
}

}  // namespace flywheel::llm

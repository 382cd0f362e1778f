#include "flywheel/llm/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/half.h"
#include "flywheel/io/file_system.h"
#include "nlohmann/json.hpp"

namespace flywheel::llm {
namespace {

using json = nlohmann::json;

Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", AsAbsl(field), " ", AsAbsl(why)));
}

Result<int64_t> PositiveInt(const json& j, const char* field, int64_t fallback = -1) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback > 0) return fallback;
    return Bad(field, "is missing");
  }
  if (!it->is_number_integer()) return Bad(field, absl::StrCat("must be a positive integer, got ", it->dump()));
  const int64_t v = it->get<int64_t>();
  if (v <= 0 || v > (int64_t{1} << 32)) return Bad(field, absl::StrCat("must be a positive integer, got ", v));
  return v;
}

Result<double> Number(const json& j, const char* field, double fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Bad(field, absl::StrCat("must be a number, got ", it->dump()));
  return it->get<double>();
}


using TensorMap = std::map<std::string_view, const TensorView*>;

// Tensor `name`, checked against `shape`; marked used.
Result<const TensorView*> Expect(const TensorMap& tensors, const std::string& name, const std::vector<int64_t>& shape,
                                 std::set<std::string>* used) {
  auto found = tensors.find(name);
  if (found == tensors.end()) return absl::NotFoundError(absl::StrCat("the checkpoint lacks tensor '", name, "'"));
  const TensorView* t = found->second;
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is [", absl::StrJoin(t->shape, ", "),
                                                   "], config.json implies [", absl::StrJoin(shape, ", "), "]"));
  }
  if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' is ", AsAbsl(DTypeName(t->dtype)),
                                                   " (the engine reads F32, BF16 and F16 weights)"));
  }
  used->insert(name);
  return t;
}

// The elements of `t` converted to `to` (F32 or BF16) into `dst`, in one
// pass: no intermediate copy of a weight matrix.
void Convert(const TensorView& t, DType to, uint8_t* dst) {
  const size_t n = static_cast<size_t>(t.elements());
  if (t.dtype == to) {
    std::memcpy(dst, t.data, n * (to == DType::kF32 ? 4 : 2));
    return;
  }
  auto source = [&](size_t k) -> float {
    if (t.dtype == DType::kF32) {
      float f;
      std::memcpy(&f, t.data + 4 * k, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, t.data + 2 * k, 2);
    return t.dtype == DType::kBF16 ? Bf16ToFloat(h) : static_cast<float>(HalfToDouble(h));
  };
  if (to == DType::kF32) {
    float* d = reinterpret_cast<float*>(dst);
    for (size_t k = 0; k < n; ++k) d[k] = source(k);
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (size_t k = 0; k < n; ++k) d[k] = FloatToBf16(source(k));
  }
}

// Tensor `name` as float32 values (norm weights).
Result<std::vector<float>> Floats(const TensorMap& tensors, const std::string& name, std::vector<int64_t> shape,
                                  std::set<std::string>* used) {
  FW_ASSIGN_OR_RETURN(const TensorView* t, Expect(tensors, name, shape, used));
  std::vector<float> out(static_cast<size_t>(t->elements()));
  Convert(*t, DType::kF32, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

// Row `row` of `m` (I8) from float values: scale = max |v| / 127, q =
// round(v / scale) (ties away from zero), in [-127, 127].
void QuantizeRow(const float* v, int64_t cols, Matrix* m, int64_t row) {
  float amax = 0;
  for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(v[k]));
  const float scale = amax / 127.0f;
  int8_t* q = reinterpret_cast<int8_t*>(m->data.data()) + row * cols;
  for (int64_t k = 0; k < cols; ++k) {
    q[k] = scale > 0 ? static_cast<int8_t>(std::clamp(std::lround(v[k] / scale), -127L, 127L)) : 0;
  }
  m->scale[static_cast<size_t>(row)] = scale;
}

// The tensors `names` (rows[i] x cols each) stacked by rows into one matrix
// of `dtype`, allocated once at its final size.
Result<Matrix> Stack(const TensorMap& tensors, const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                     int64_t cols, DType dtype, std::set<std::string>* used, Matrix* recycle) {
  Matrix m;
  if (recycle != nullptr) m.data = std::move(recycle->data);  // pages already touched: no faults, no zeroing
  m.cols = cols;
  m.dtype = dtype;
  std::vector<const TensorView*> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    FW_ASSIGN_OR_RETURN(const TensorView* t, Expect(tensors, names[i], {rows[i], cols}, used));
    parts.push_back(t);
    m.rows += rows[i];
  }
  if (dtype == DType::kI8) {
    m.scale = recycle != nullptr ? std::move(recycle->scale) : std::vector<float>();
    m.data.resize(static_cast<size_t>(m.rows * cols));
    m.scale.resize(static_cast<size_t>(m.rows));
    int64_t row = 0;
    std::vector<float> f;
    for (const TensorView* t : parts) {
      f.resize(static_cast<size_t>(t->elements()));
      Convert(*t, DType::kF32, reinterpret_cast<uint8_t*>(f.data()));
      for (int64_t r = 0; r < t->shape[0]; ++r, ++row) QuantizeRow(f.data() + r * cols, cols, &m, row);
    }
    return m;
  }
  const size_t width = dtype == DType::kF32 ? 4 : 2;
  m.data.resize(static_cast<size_t>(m.rows * cols) * width);
  uint8_t* dst = m.data.data();
  for (const TensorView* t : parts) {
    Convert(*t, dtype, dst);
    dst += static_cast<size_t>(t->elements()) * width;
  }
  return m;
}

}  // namespace

void Matrix::Row(int64_t r, float* out) const {
  if (dtype == DType::kI8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(data.data()) + r * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = static_cast<float>(q[k]) * scale[static_cast<size_t>(r)];
  } else if (dtype == DType::kBF16) {
    const uint16_t* p = bf16() + r * cols;
    for (int64_t k = 0; k < cols; ++k) out[k] = Bf16ToFloat(p[k]);
  } else {
    std::memcpy(out, f32() + r * cols, static_cast<size_t>(cols) * 4);
  }
}

Result<ModelConfig> ModelConfig::FromJson(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ModelConfig c;
  if (auto mt = j.find("model_type"); mt != j.end() && !(mt->is_string() && (*mt == "llama" || *mt == "mistral" ||
                                                                              *mt == "qwen2"))) {
    return absl::UnimplementedError(absl::StrCat("config.json: model_type ", mt->dump(),
                                                 " is not a Llama-style decoder the engine runs"));
  }
  FW_ASSIGN_OR_RETURN(c.vocab_size, PositiveInt(j, "vocab_size"));
  FW_ASSIGN_OR_RETURN(c.hidden_size, PositiveInt(j, "hidden_size"));
  FW_ASSIGN_OR_RETURN(c.intermediate_size, PositiveInt(j, "intermediate_size"));
  FW_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(j, "num_hidden_layers"));
  FW_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(j, "num_attention_heads"));
  FW_ASSIGN_OR_RETURN(c.num_kv_heads, PositiveInt(j, "num_key_value_heads", c.num_heads));
  if (c.hidden_size % c.num_heads != 0 && !j.contains("head_dim")) {
    return Bad("hidden_size", "must be a multiple of num_attention_heads (or head_dim given)");
  }
  FW_ASSIGN_OR_RETURN(c.head_dim, PositiveInt(j, "head_dim", c.hidden_size / std::max<int64_t>(c.num_heads, 1)));
  FW_ASSIGN_OR_RETURN(c.max_position, PositiveInt(j, "max_position_embeddings", 2048));
  if (c.num_heads % c.num_kv_heads != 0) {
    return Bad("num_key_value_heads", absl::StrCat("must divide num_attention_heads (", c.num_heads, ")"));
  }
  if (c.head_dim % 2 != 0) return Bad("head_dim", "must be even (rotary embeddings rotate pairs)");
  {
    // Every size the engine multiplies stays far from overflow: at most
    // 10^12 parameters (each field alone may be up to 2^32).
    const double h = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim);
    const double q = static_cast<double>(c.num_heads) * hd, kv = static_cast<double>(c.num_kv_heads) * hd;
    const double per_layer = h * (q + 2 * kv) + q * h + 3 * h * static_cast<double>(c.intermediate_size);
    const double params = per_layer * static_cast<double>(c.num_layers) + 2 * static_cast<double>(c.vocab_size) * h;
    if (params > 1e12) {
      return Bad("hidden_size", absl::StrFormat("with the other sizes describes %.3g parameters, more than 10^12", params));
    }
  }
  FW_ASSIGN_OR_RETURN(c.rms_eps, Number(j, "rms_norm_eps", 1e-6));
  if (!(c.rms_eps > 0 && c.rms_eps < 1)) return Bad("rms_norm_eps", "must be in (0, 1)");
  FW_ASSIGN_OR_RETURN(c.rope_theta, Number(j, "rope_theta", 10000.0));
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    if (!rp->is_object() || rp->value("rope_type", std::string("default")) != "default") {
      return absl::UnimplementedError(absl::StrCat("config.json: rope_parameters ", rp->dump(),
                                                   ": only plain rotary embeddings (rope_type default) run"));
    }
    FW_ASSIGN_OR_RETURN(c.rope_theta, Number(*rp, "rope_theta", c.rope_theta));
  }
  if (!(c.rope_theta > 1)) return Bad("rope_theta", "must be > 1");
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null() && !(rs->is_object() && rs->empty())) {
    return absl::UnimplementedError(absl::StrCat("config.json: rope_scaling ", rs->dump(), " is not supported"));
  }
  if (auto act = j.find("hidden_act"); act != j.end() && *act != "silu") {
    return absl::UnimplementedError(absl::StrCat("config.json: hidden_act ", act->dump(), " (the engine runs silu)"));
  }
  for (const char* f : {"attention_bias", "mlp_bias"}) {
    if (auto b = j.find(f); b != j.end() && *b == true) {
      return absl::UnimplementedError(absl::StrCat("config.json: ", f, " true is not supported"));
    }
  }
  if (auto t = j.find("tie_word_embeddings"); t != j.end() && !t->is_null()) {
    if (!t->is_boolean()) return Bad("tie_word_embeddings", "must be true or false");
    c.tie_embeddings = t->get<bool>();
  }
  auto token = [&](const json& v, const char* field) -> Result<int64_t> {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.vocab_size) {
      return Bad(field, absl::StrCat("must be token ids below vocab_size (", c.vocab_size, "), got ", v.dump()));
    }
    return v.get<int64_t>();
  };
  if (auto b = j.find("bos_token_id"); b != j.end() && !b->is_null()) {
    FW_ASSIGN_OR_RETURN(c.bos_token_id, token(*b, "bos_token_id"));
  }
  if (auto e = j.find("eos_token_id"); e != j.end() && !e->is_null()) {
    if (e->is_array()) {
      for (const auto& x : *e) {
        FW_ASSIGN_OR_RETURN(const int64_t id, token(x, "eos_token_id"));
        c.eos_token_ids.push_back(id);
      }
    } else {
      FW_ASSIGN_OR_RETURN(const int64_t id, token(*e, "eos_token_id"));
      c.eos_token_ids.push_back(id);
    }
  }
  return c;
}

Result<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  FW_ASSIGN_OR_RETURN(const std::string text, io::PosixFileSystem()->ReadFile(path));
  FW_ASSIGN_OR_RETURN_CTX(ModelConfig c, FromJson(text), path);
  return c;
}

int64_t ModelWeights::bytes() const {
  int64_t n = static_cast<int64_t>(embed.data.size() + (tied ? 0 : lm_head.data.size()) + final_norm.size() * 4);
  for (const LayerWeights& l : layers) {
    n += static_cast<int64_t>(l.qkv.data.size() + l.o.data.size() + l.gate_up.data.size() + l.down.data.size() +
                              (l.attn_norm.size() + l.mlp_norm.size()) * 4);
  }
  return n;
}

Result<std::shared_ptr<const ModelWeights>> ModelWeights::Load(const std::string& dir, DType dtype, int64_t version) {
  FW_ASSIGN_OR_RETURN(const std::string local, io::LocalPath(dir));
  FW_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(local + "/config.json"));
  FW_ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(local));
  return FromTensors(std::move(config), ck->tensors(), dtype, version, nullptr);
}

Result<std::shared_ptr<const ModelWeights>> ModelWeights::FromTensors(ModelConfig config,
                                                                      const std::vector<const TensorView*>& tensors,
                                                                      DType dtype, int64_t version,
                                                                      ModelWeights* recycle) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kI8) {
    return absl::InvalidArgumentError("the engine keeps weights in F32, BF16 or I8");
  }
  TensorMap by_name;
  for (const TensorView* t : tensors) {
    if (!by_name.emplace(t->name, t).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "' given twice"));
    }
  }
  auto w = std::make_shared<ModelWeights>();
  w->config = std::move(config);
  const ModelConfig& c = w->config;
  w->version = version;
  std::set<std::string> used;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const bool has_head = by_name.count("lm_head.weight") != 0;
  // A recycled ModelWeights of the same config lends its buffers.
  if (recycle != nullptr && (recycle->layers.size() != static_cast<size_t>(c.num_layers))) recycle = nullptr;
  auto old = [&](auto member) -> Matrix* { return recycle == nullptr ? nullptr : &(recycle->*member); };
  auto old_layer = [&](int64_t l, Matrix LayerWeights::*member) -> Matrix* {
    return recycle == nullptr ? nullptr : &(recycle->layers[static_cast<size_t>(l)].*member);
  };
  FW_ASSIGN_OR_RETURN(w->embed, Stack(by_name, {"model.embed_tokens.weight"}, {c.vocab_size}, h, dtype, &used,
                                      old(&ModelWeights::embed)));
  w->tied = c.tie_embeddings || !has_head;
  if (!w->tied) {
    FW_ASSIGN_OR_RETURN(w->lm_head, Stack(by_name, {"lm_head.weight"}, {c.vocab_size}, h, dtype, &used,
                                          old(&ModelWeights::lm_head)));
  } else if (has_head) {
    used.insert("lm_head.weight");  // tied: transformers may still store it
  }
  FW_ASSIGN_OR_RETURN(w->final_norm, Floats(by_name, "model.norm.weight", {h}, &used));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LayerWeights lw;
    FW_ASSIGN_OR_RETURN(lw.attn_norm, Floats(by_name, p + "input_layernorm.weight", {h}, &used));
    FW_ASSIGN_OR_RETURN(lw.mlp_norm, Floats(by_name, p + "post_attention_layernorm.weight", {h}, &used));
    FW_ASSIGN_OR_RETURN(lw.qkv, Stack(by_name,
                                      {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                       p + "self_attn.v_proj.weight"},
                                      {q, kv, kv}, h, dtype, &used, old_layer(l, &LayerWeights::qkv)));
    FW_ASSIGN_OR_RETURN(lw.o, Stack(by_name, {p + "self_attn.o_proj.weight"}, {h}, q, dtype, &used,
                                    old_layer(l, &LayerWeights::o)));
    FW_ASSIGN_OR_RETURN(lw.gate_up, Stack(by_name, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                                          {inter, inter}, h, dtype, &used, old_layer(l, &LayerWeights::gate_up)));
    FW_ASSIGN_OR_RETURN(lw.down, Stack(by_name, {p + "mlp.down_proj.weight"}, {h}, inter, dtype, &used,
                                       old_layer(l, &LayerWeights::down)));
    w->layers.push_back(std::move(lw));
  }
  for (const auto& [name, t] : by_name) {
    if (!used.count(std::string(name)) && !name.ends_with("rotary_emb.inv_freq")) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", AsAbsl(name), "' is not part of the model config.json describes"));
    }
  }
  return std::shared_ptr<const ModelWeights>(std::move(w));
}

}  // namespace flywheel::llm

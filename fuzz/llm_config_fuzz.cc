// Model config.json (src/flywheel/llm/model.h, ModelConfig::FromJson): any
// bytes give a config whose sizes the engine can trust or an error naming
// the field, never a crash. An accepted config's derived sizes are computed
// to show they do not overflow.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flywheel/llm/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flywheel::llm;
  auto c = ModelConfig::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!c.ok()) return 0;
  // Sizes the engine allocates from: each must be positive and fit.
  const int64_t q = c->num_heads * c->head_dim;
  const int64_t kv = c->num_kv_heads * c->head_dim;
  const int64_t per_layer = c->hidden_size * (q + 2 * kv) + q * c->hidden_size + 3 * c->hidden_size * c->intermediate_size;
  if (q <= 0 || kv <= 0 || per_layer <= 0 || c->num_heads % c->num_kv_heads != 0) __builtin_trap();
  for (int64_t id : c->eos_token_ids) {
    if (id < 0 || id >= c->vocab_size) __builtin_trap();
  }
  return 0;
}

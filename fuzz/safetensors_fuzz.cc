// safetensors files (src/flywheel/llm/safetensors.h): any bytes give tensor
// views inside the file or an error, never a crash or a read out of bounds
// (every view is read end to end).
#include <cstddef>
#include <cstdint>
#include <string>

#include "flywheel/llm/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flywheel::llm;
  auto s = SafetensorsFile::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!s.ok()) return 0;
  uint64_t sum = 0;
  for (const TensorView& t : (*s)->tensors()) {
    for (uint64_t k = 0; k < t.bytes; ++k) sum += t.data[k];
    (void)t.elements();
  }
  return static_cast<int>(sum & 0);
}

// GGUF files (src/flywheel/llm/gguf.h): any bytes give a parsed file or an
// error, never a crash, a hang or an allocation beyond what the bytes justify;
// every tensor of a file that parses is dequantized, and the import's
// config.json and tokenizer.json are built from its metadata.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flywheel/llm/gguf.h"
#include "flywheel/llm/gguf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flywheel::llm;
  auto g = GgufFile::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!g.ok()) return 0;
  for (const GgufTensor& t : (*g)->tensors()) {
    if (t.elements > (uint64_t{16} << 20)) continue;  // valid but slow to fuzz
    (void)(*g)->Dequantize(t);
    (void)HfTensorName(t.name);
  }
  (void)ConfigJsonFromGguf(**g);
  (void)TokenizerJsonFromGguf(**g);
  return 0;
}

// Fuzzes the JSON Lines and CSV sources (src/flywheel/interop/text) on
// in-memory input handed out a few bytes at a time, so records straddle
// buffer refills and the inference rewind.
//
// Input: byte 0 and 1 choose options (batch/infer rows, CSV dialect, an
// explicit schema, projection, overrides, read size); the rest is the file.
// Every batch either side returns must validate, and string columns must be
// valid UTF-8; anything else (or a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "flywheel/base/utf8.h"
#include "flywheel/interop/text/internal.h"

namespace {

using flywheel::interop::RecordBatchReader;
using flywheel::interop::TextReadOptions;
namespace text = flywheel::interop::internal_text;

void Drain(flywheel::Result<std::unique_ptr<RecordBatchReader>> r, const TextReadOptions& o) {
  if (!r.ok()) return;
  for (int i = 0; i < 10000; ++i) {
    auto batch = (*r)->Next();
    if (!batch.ok() || !batch->has_value()) return;
    const flywheel::format::RecordBatch& b = **batch;
    if (!b.Validate().ok() || b.num_rows < 1 || b.num_rows > o.batch_rows ||
        !(b.schema == (*r)->schema())) {
      std::abort();
    }
    for (const auto& c : b.columns) {
      if (c.type.id != flywheel::format::TypeId::kString) continue;
      for (int64_t row = 0; row < c.length; ++row) {
        if (!flywheel::IsValidUtf8(c.GetBytes(row))) std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t a = data[0];
  const uint8_t b = data[1];
  const std::string input(reinterpret_cast<const char*>(data + 2), size - 2);

  TextReadOptions o;
  o.batch_rows = 1 + (a & 3);
  o.infer_rows = 1 + ((a >> 2) & 7);
  o.header = (a & 0x20) == 0;
  if (a & 0x40) o.delimiter = '\t';
  if (a & 0x80) {
    static const auto* schema = new flywheel::format::Schema(
        flywheel::format::Schema::Parse(
            "a:int8?, b:list<float16>?, c:string?, d:float32[2]?, e:bool?, f:binary?, g:uint64?")
            .value());
    o.schema = *schema;
  }
  if (b & 0x10) o.null_text = "NA";
  if (b & 0x20) o.columns = {"c", "a"};
  if (b & 0x40) o.overrides = {{"a", "int16?"}};
  if (b & 0x80) o.quote = '\'';
  const size_t chunk = 1 + (b & 15) * 5;

  Drain(text::OpenJsonLinesInput("fuzz.jsonl", text::InputBuffer::FromMemory(input, chunk), o), o);
  Drain(text::OpenCsvInput("fuzz.csv", text::InputBuffer::FromMemory(input, chunk), o), o);
  return 0;
}

// The replay server's insert log segments (src/flywheel/replay/service/
// insert_log.h): any bytes give items or an error, never a crash, a hang or
// an allocation beyond what the bytes justify. Record checksums are not
// verified here, so the fuzzer reaches the record decoders; every item that
// decodes is decoded further (its trajectory columns).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "flywheel/replay/service/insert_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flywheel::replay;
  InsertLogReplay stats;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)InsertLog::ReplaySegment(
      bytes, "fuzz", /*last=*/true, &stats,
      [](const std::string&, Item item) -> flywheel::Status {
        for (const auto& col : item.columns) {
          if (!col.Validate().ok()) continue;
          const uint64_t bytes = static_cast<uint64_t>(col.length) * col.step_type().fixed_width();
          if (bytes > (uint64_t{64} << 20)) continue;  // a column this large is valid but slow to fuzz
          std::vector<uint8_t> out(bytes);
          (void)col.Decode(out.data());
        }
        return flywheel::Status();
      },
      /*verify_checksums=*/false);
  return 0;
}

// Fuzzes the loader state parser (flywheel/loader/state.h; docs/loader.md,
// "State"): what `load_state_dict()` feeds the loader.
//
// Beyond "no crash": a state that parses must be internally valid, write back
// to JSON that parses to an equal state (the parser never silently misreads a
// field), and be resumable against itself.
#include <cstdint>
#include <string_view>

#include "flywheel/loader/state.h"

namespace {
void Check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using flywheel::loader::LoaderState;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto s = LoaderState::FromJson(text);
  if (!s.ok()) {
    Check(!s.status().message().empty());
    return 0;
  }
  Check(s->Validate().ok());
  auto again = LoaderState::FromJson(s->ToJson());
  Check(again.ok());
  Check(*again == *s);
  Check(flywheel::loader::CheckResumable(*s, *again).ok());
  return 0;
}

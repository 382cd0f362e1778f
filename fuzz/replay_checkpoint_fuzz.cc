// Fuzzes what a replay checkpoint restore parses (docs/replay.md,
// "Checkpoints"): the CHECKPOINT marker (JSON), selector descriptions and
// signatures as the `tables` table stores them. Byte 0 picks the target:
//   0: the marker of a real checkpoint is replaced by the input and the
//      checkpoint restored (an error, never a crash or a wrong restore)
//   1: SelectorFromDescription; a parsed selector must describe itself the same way
//   2: SignatureFromJson; a parsed signature must round-trip through SignatureToJson
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "flywheel/io/file_system.h"
#include "flywheel/replay/checkpoint.h"

namespace {

using namespace flywheel;
using namespace flywheel::replay;

struct Fixture {
  std::string root;
  std::string marker_path;
  std::string marker;  // the valid marker
  int64_t items = 0;
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    char tmpl[] = "/tmp/fw_ckpt_fuzz.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    fx->root = std::string(tmpl) + "/ckpt";
    static std::string scratch = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
    });
    ReplayTableOptions o;
    o.name = "t";
    o.sampler = NewPrioritizedSelector(0.5);
    o.signature = Signature{{{"x", *format::DataType::Parse("int32")}}};
    auto t = ReplayTable::Create(std::move(o));
    if (!t.ok()) std::abort();
    int32_t steps[4] = {1, 2, 3, 4};
    auto chunk = Chunk::Make(7, *format::DataType::Parse("int32"), 4, steps);
    if (!chunk.ok()) std::abort();
    for (int i = 0; i < 3; ++i) {
      Item item;
      item.key = static_cast<ItemKey>(i + 1);
      item.priority = i + 1;
      item.columns.push_back({"x", {*chunk}, i, 2});
      if (!(*t)->Insert(std::move(item)).ok()) std::abort();
    }
    CheckpointOptions co;
    co.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    auto c = Checkpoint({t->get()}, fx->root, co);
    if (!c.ok()) std::abort();
    fx->marker_path = c->path + "/CHECKPOINT";
    std::ifstream in(fx->marker_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    fx->marker = ss.str();
    fx->items = c->num_items;
    return fx;
  }();
  return *f;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      Fixture& f = Get();
      WriteFile(f.marker_path, body);
      RestoreOptions ro;
      ro.watchdog = absl::ZeroDuration();
      auto r = Restore(f.root, kLatestCheckpoint, ro);
      // Whatever the marker says, a restore either fails or holds the
      // checkpoint's items: rows it names beyond the tables' are refused.
      if (r.ok() && r->tables.size() == 1 && r->tables[0]->Info().size != f.items) __builtin_trap();
      ListCheckpoints(f.root).status().IgnoreError();
      WriteFile(f.marker_path, f.marker);
      break;
    }
    case 1: {
      auto s = SelectorFromDescription(body);
      if (s.ok()) {
        auto again = SelectorFromDescription((*s)->Describe());
        if (!again.ok() || (*again)->Describe() != (*s)->Describe()) __builtin_trap();
      }
      break;
    }
    default: {
      auto sig = SignatureFromJson(body);
      if (sig.ok()) {
        auto json = SignatureToJson(*sig);
        if (json.ok()) {
          auto again = SignatureFromJson(*json);
          if (!again.ok() || again->columns != sig->columns) __builtin_trap();
        }
      }
      break;
    }
  }
  return 0;
}

// The dashboard's static files (src/flywheel/obs/dashboard/), compiled into
// the binary by cmake/embed_files.cmake so `flywheel serve` needs no files
// on disk and no network.
#pragma once

#include <cstddef>

namespace flywheel::obs {

struct EmbeddedAsset {
  const char* name;  // file name, e.g. "app.js"; nullptr ends the table
  const char* data;
  size_t size;
};

extern const EmbeddedAsset kEmbeddedAssets[];

}  // namespace flywheel::obs

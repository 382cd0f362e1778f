// io::TempDir: a fresh directory under $TMPDIR (default /tmp) that is deleted
// with everything in it when the object goes away. For tests and benchmarks.
//
//   io::TempDir tmp("fw_table_test");
//   const std::string uri = tmp.path() + "/t";
//
// Thread-safety: immutable after construction.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace flywheel::io {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "flywheel") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + ".XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();  // no scratch space: nothing sensible to do in a test
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace flywheel::io

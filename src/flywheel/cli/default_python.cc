// The interpreter `flywheel run` starts the learner with when neither
// --python nor $FLYWHEEL_PYTHON names one (common.h, DefaultPython).
#include <unistd.h>

#include <string>
#include <system_error>
#include <filesystem>

#include "flywheel/cli/common.h"

#ifndef FLYWHEEL_DEFAULT_PYTHON
#define FLYWHEEL_DEFAULT_PYTHON "python3"
#endif

namespace flywheel::cli {

std::string DefaultPython() {
  // Installed by `pip install .`, the CLI sits in the environment's bin/
  // beside its interpreter: that one has flywheel and torch.
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* name : {"python3", "python"}) {
      const std::filesystem::path p = self.parent_path() / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  // A build tree's CLI: the interpreter the project was configured with.
  return FLYWHEEL_DEFAULT_PYTHON;
}

}  // namespace flywheel::cli

#include "flywheel/cli/common.h"
#include "flywheel/catalog/read_policy.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "flywheel/base/logging.h"
#include "flywheel/cli/commands.h"

namespace flywheel::cli {

int Fail(const Status& s) {
  std::fprintf(stderr, "flywheel: error: %s\n", std::string(s.message()).c_str());
  // One mapping for every command (README, docs/ingest.md, docs/catalog.md):
  // 2 bad input, invalid or corrupt data; 3 not found; 4 aborted (commit
  // conflict); 5 audit tampering (catalog audit verify); 6 permission denied;
  // 1 anything else (I/O, internal).
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kDataLoss: return 2;
    case absl::StatusCode::kNotFound: return 3;
    case absl::StatusCode::kAborted: return 4;
    case absl::StatusCode::kPermissionDenied: return 6;
    default: return 1;
  }
}

Result<int64_t> ParseDurationMs(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty duration");
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v > 1e15) {
    return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "' (use e.g. 30s, 10m, 2h, 7d)"));
  }
  const std::string unit(end);
  double mult = 1000;
  if (unit == "ms") mult = 1;
  else if (unit == "" || unit == "s") mult = 1000;
  else if (unit == "m") mult = 60e3;
  else if (unit == "h") mult = 3600e3;
  else if (unit == "d") mult = 86400e3;
  else return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "' (use e.g. 30s, 10m, 2h, 7d)"));
  if (v < 0) return absl::InvalidArgumentError(absl::StrCat("negative duration '", text, "'"));
  return static_cast<int64_t>(v * mult);
}

namespace {
std::string g_catalog_spec;
bool g_catalog_opened = false;
std::unique_ptr<catalog::Catalog> g_catalog;
}  // namespace

void SetCatalogSpec(const std::string& spec) { g_catalog_spec = spec; }

Result<catalog::Catalog*> CliCatalog() {
  if (!g_catalog_opened) {
    g_catalog_opened = true;
    if (!g_catalog_spec.empty()) {
      FW_ASSIGN_OR_RETURN(g_catalog, catalog::Catalog::Open(g_catalog_spec));
    } else {
      FW_ASSIGN_OR_RETURN(g_catalog, catalog::Catalog::FromEnvironment());
    }
  }
  return g_catalog.get();
}

Result<std::string> AuthorizedTable(const std::string& arg, catalog::Privilege p, const std::string& action,
                                    bool for_create) {
  FW_ASSIGN_OR_RETURN(catalog::Catalog * c, CliCatalog());
  return catalog::AuthorizeTable(c, arg, p, action, for_create);
}

Result<std::shared_ptr<const catalog::ReadGuard>> ReadGuardFor(const table::Table& t) {
  FW_ASSIGN_OR_RETURN(catalog::Catalog * c, CliCatalog());
  return catalog::ReadGuard::For(c, {t.uri()});
}

void RecordTableWrite(const std::string& job_type, const table::Table& after, int64_t before,
                      const std::string& params_json) {
  auto c = CliCatalog();
  if (!c.ok() || *c == nullptr) return;
  const Status s = catalog::RecordTableWrite(**c, "", job_type, after.uri(), before, after.version(), params_json);
  if (!s.ok()) {
    FW_LOG(WARNING) << "catalog: recording the " << job_type << " of " << after.uri() << ": " << s.message();
  }
}

CLI::Validator AtLeast(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (end == text.c_str() || *end != '\0' || errno == ERANGE) return "'" + text + "' is not an integer";
        if (v < min) return "must be at least " + std::to_string(min) + ", got " + text;
        return std::string();
      },
      ">=" + std::to_string(min));
}

}  // namespace flywheel::cli

// Fuzzes the Prometheus text format parser (flywheel/obs/prometheus.h).
//
// Beyond "no crash": errors are InvalidArgument naming a line that exists;
// a parsed scrape is self-consistent (names valid, Find() finds every sample,
// every sample belongs to a family) and, written back out as text (all HELP
// and TYPE lines first, then the samples in order), parses to an equal
// scrape, so the parser never silently misreads its input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "flywheel/base/metrics.h"
#include "flywheel/obs/prometheus.h"

namespace {

using flywheel::obs::PromFamily;
using flywheel::obs::PromSample;
using flywheel::obs::PromScrape;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

bool ValidName(const std::string& s, bool metric) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool SameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

void AppendValue(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    *out += buf;
  }
}

std::string Emit(const PromScrape& scrape) {
  std::string out;
  for (const auto& [name, family] : scrape.families) {
    if (!family.help.empty()) {
      out += "# HELP " + name + " ";
      for (char c : family.help) {
        if (c == '\\')
          out += "\\\\";
        else if (c == '\n')
          out += "\\n";
        else
          out += c;
      }
      out += "\n";
    }
    out += "# TYPE " + name + " " + family.type + "\n";
  }
  for (const PromSample& s : scrape.samples) {
    out += s.name;
    if (!s.labels.empty()) {
      out += "{";
      for (const auto& [k, v] : s.labels) {
        out += k + "=\"" + flywheel::PrometheusEscapeLabelValue(v) + "\",";
      }
      out += "}";
    }
    out += " ";
    AppendValue(s.value, &out);
    if (s.timestamp_ms) out += " " + std::to_string(*s.timestamp_ms);
    out += "\n";
  }
  return out;
}

// The family `name` belongs to: itself, or the histogram/summary it is a
// sample name of.
const PromFamily* FamilyOf(const PromScrape& scrape, const std::string& name) {
  if (auto it = scrape.families.find(name); it != scrape.families.end()) return &it->second;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    auto it = scrape.families.find(name.substr(0, name.size() - suffix.size()));
    if (it == scrape.families.end()) continue;
    if (it->second.type == "histogram" || (it->second.type == "summary" && suffix != "_bucket"))
      return &it->second;
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto scrape = flywheel::obs::ParsePrometheusText(text);
  if (!scrape.ok()) {
    Check(scrape.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string message(scrape.status().message());
    Check(message.rfind("line ", 0) == 0);
    size_t i = 5;
    long line = 0;
    while (i < message.size() && message[i] >= '0' && message[i] <= '9' && line < 1'000'000'000) {
      line = line * 10 + (message[i++] - '0');
    }
    Check(message.compare(i, 2, ": ") == 0);
    long lines = 1;
    for (char c : text) lines += c == '\n';
    Check(line >= 1 && line <= lines);
    return 0;
  }

  for (const auto& [name, family] : scrape->families) {
    Check(name == family.name && ValidName(name, /*metric=*/true));
    Check(family.type == "counter" || family.type == "gauge" || family.type == "histogram" ||
          family.type == "summary" || family.type == "untyped");
  }
  for (const PromSample& s : scrape->samples) {
    Check(ValidName(s.name, /*metric=*/true));
    for (const auto& [k, v] : s.labels) Check(ValidName(k, /*metric=*/false));
    const auto found = scrape->Find(s.name, s.labels);  // series are unique
    Check(found.has_value() && SameValue(*found, s.value));
    Check(FamilyOf(*scrape, s.name) != nullptr);
  }

  const std::string again = Emit(*scrape);
  auto reparsed = flywheel::obs::ParsePrometheusText(again);
  if (!reparsed.ok()) {
    std::fprintf(stderr, "re-emitted exposition failed to parse: %s\n%s\n",
                 std::string(reparsed.status().message()).c_str(), again.c_str());
    __builtin_trap();
  }
  Check(reparsed->families.size() == scrape->families.size());
  for (const auto& [name, family] : scrape->families) {
    auto it = reparsed->families.find(name);
    Check(it != reparsed->families.end() && it->second.type == family.type &&
          it->second.help == family.help);
  }
  Check(reparsed->samples.size() == scrape->samples.size());
  for (size_t i = 0; i < scrape->samples.size(); ++i) {
    const PromSample& a = scrape->samples[i];
    const PromSample& b = reparsed->samples[i];
    Check(a.name == b.name && a.labels == b.labels && a.timestamp_ms == b.timestamp_ms &&
          SameValue(a.value, b.value));
  }
  return 0;
}

// Parser for the Prometheus text exposition format 0.0.4:
// https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
//
// The syntax follows the reference parser (Go, prometheus/common expfmt):
// tokens separated by blanks or tabs, values as Go's strconv.ParseFloat reads
// them, timestamps as strconv.ParseInt. Where the reference parser lets
// ambiguous input through, this one refuses it, because its users (tests,
// doctor) want to know the exposition is right, not merely readable:
//   - every line, the last one included, ends with '\n';
//   - TYPE comes before the family's samples and at most once; HELP at most
//     once;
//   - a histogram's or summary's sample names (x_bucket, x_sum, x_count) cannot
//     also be families of their own, so a sample name belongs to one family;
//   - the same series (name and label set) appears once;
//   - histogram buckets of one series come in increasing le order with
//     non-decreasing counts and end with le="+Inf" equal to x_count.
#include "flywheel/obs/prometheus.h"

#include "flywheel/base/metrics.h"

#include <locale.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"

namespace flywheel::obs {
namespace {

using LabelMap = std::map<std::string, std::string>;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsMetricNameStart(char c) { return IsAsciiAlpha(c) || c == '_' || c == ':'; }
bool IsMetricNameChar(char c) { return IsMetricNameStart(c) || IsDigit(c); }
bool IsLabelNameStart(char c) { return IsAsciiAlpha(c) || c == '_'; }
bool IsLabelNameChar(char c) { return IsLabelNameStart(c) || IsDigit(c); }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (x != b[i]) return false;
  }
  return true;
}

// `s` in double quotes, with bytes that would garble a message escaped.
std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(AsAbsl(s)), "\"");
}

// The shortest decimal text that reads back as `v` (what the registry writes).
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// `name{k="v",...}` for messages.
std::string SeriesText(std::string_view name, const LabelMap& labels) {
  std::string out(name);
  if (labels.empty()) return out;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    absl::StrAppend(&out, k, "=\"", absl::CHexEscape(PrometheusEscapeLabelValue(v)), "\"");
  }
  out += '}';
  return out;
}

enum class NumberParse { kOk, kSyntax, kRange };

locale_t CLocale() {
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  return c_locale;
}

// Reads `t` as Go's strconv.ParseFloat(t, 64) does, except that digit
// separators ('_', which Go allows only after a base prefix) are refused:
// decimal and hexadecimal ('p' exponent required) literals with an optional
// sign, "Inf"/"Infinity" with an optional sign and "NaN", case-insensitively.
// Overflow is an error, underflow rounds towards zero (as in Go).
NumberParse ParseGoFloat(std::string_view t, double* out) {
  size_t i = 0;
  bool negative = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    negative = t[0] == '-';
    i = 1;
  }
  const std::string_view rest = t.substr(i);
  if (EqualsIgnoreCase(rest, "inf") || EqualsIgnoreCase(rest, "infinity")) {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return NumberParse::kOk;
  }
  if (i == 0 && EqualsIgnoreCase(rest, "nan")) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return NumberParse::kOk;
  }
  const bool hex = rest.size() >= 2 && rest[0] == '0' && (rest[1] == 'x' || rest[1] == 'X');
  size_t j = hex ? 2 : 0;
  auto is_digit = hex ? IsHexDigit : IsDigit;
  size_t digits = 0;
  while (j < rest.size() && is_digit(rest[j])) ++j, ++digits;
  if (j < rest.size() && rest[j] == '.') {
    ++j;
    while (j < rest.size() && is_digit(rest[j])) ++j, ++digits;
  }
  if (digits == 0) return NumberParse::kSyntax;
  const bool has_exponent = j < rest.size() && (hex ? (rest[j] == 'p' || rest[j] == 'P')
                                                    : (rest[j] == 'e' || rest[j] == 'E'));
  if (hex && !has_exponent) return NumberParse::kSyntax;
  if (has_exponent) {
    ++j;
    if (j < rest.size() && (rest[j] == '+' || rest[j] == '-')) ++j;
    size_t exponent_digits = 0;
    while (j < rest.size() && IsDigit(rest[j])) ++j, ++exponent_digits;
    if (exponent_digits == 0) return NumberParse::kSyntax;
  }
  if (j != rest.size()) return NumberParse::kSyntax;
  // The grammar above is a subset of strtod's; the "C" locale keeps '.' the
  // decimal point whatever setlocale() the process made.
  const std::string copy(t);
  char* end = nullptr;
  errno = 0;
  const double v = strtod_l(copy.c_str(), &end, CLocale());
  if (end != copy.c_str() + copy.size()) return NumberParse::kSyntax;
  if (errno == ERANGE && std::isinf(v)) return NumberParse::kRange;
  *out = v;
  return NumberParse::kOk;
}

// Go's strconv.ParseInt(t, 10, 64): optional sign, decimal digits.
bool ParseTimestamp(std::string_view t, int64_t* out) {
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  if (t.empty() || t[0] == '+') return false;
  const char* end = t.data() + t.size();
  auto [ptr, ec] = std::from_chars(t.data(), end, *out, 10);
  return ec == std::errc() && ptr == end;
}

// A position in one line (without its '\n').
class Cursor {
 public:
  explicit Cursor(std::string_view line) : s_(line) {}
  bool AtEnd() const { return i_ >= s_.size(); }
  char Peek() const { return s_[i_]; }
  void Advance() { ++i_; }
  void SkipBlanks() {
    while (!AtEnd() && IsBlank(Peek())) ++i_;
  }
  std::string_view TakeWhile(bool (*first)(char), bool (*rest)(char)) {
    const size_t start = i_;
    if (!AtEnd() && first(Peek())) {
      ++i_;
      while (!AtEnd() && rest(Peek())) ++i_;
    }
    return s_.substr(start, i_ - start);
  }
  std::string_view TakeUntilBlank() {
    const size_t start = i_;
    while (!AtEnd() && !IsBlank(Peek())) ++i_;
    return s_.substr(start, i_ - start);
  }
  std::string_view Rest() {
    const std::string_view rest = s_.substr(i_);
    i_ = s_.size();
    return rest;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

constexpr std::string_view kBucket = "_bucket";
constexpr std::string_view kSum = "_sum";
constexpr std::string_view kCount = "_count";

class Parser {
 public:
  Result<PromScrape> Run(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
      ++line_;
      const size_t nl = text.find('\n', pos);
      const std::string_view line =
          text.substr(pos, nl == std::string_view::npos ? text.size() - pos : nl - pos);
      FW_RETURN_IF_ERROR(ParseLine(line));
      if (nl == std::string_view::npos) return Error("the last line does not end with a newline");
      pos = nl + 1;
    }
    FW_RETURN_IF_ERROR(CheckHistograms());
    for (auto& [name, state] : families_) scrape_.families.emplace(name, std::move(state.family));
    return std::move(scrape_);
  }

 private:
  struct FamilyState {
    PromFamily family;
    int declared_line = 0;      // where the family first appeared
    int type_line = 0;          // 0: no TYPE line
    int help_line = 0;          // 0: no HELP line
    int first_sample_line = 0;  // 0: no samples yet
  };

  // One histogram series: the buckets, _sum and _count with the same labels
  // (le aside).
  struct HistogramSeries {
    std::string family;
    LabelMap labels;  // without le
    int first_line = 0;
    int last_bucket_line = 0;  // 0: no bucket yet
    double last_le = 0;
    std::string last_le_text;
    double last_bucket_count = 0;
    int inf_line = 0;  // 0: no le="+Inf" bucket
    double inf_count = 0;
    int count_line = 0;  // 0: no _count
    double count = 0;
  };

  Status Error(std::string_view what) const { return ErrorAt(line_, what); }
  static Status ErrorAt(int line, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", AsAbsl(what)));
  }

  Status ParseLine(std::string_view line) {
    Cursor c(line);
    c.SkipBlanks();
    if (c.AtEnd()) return absl::OkStatus();
    if (c.Peek() == '#') {
      c.Advance();
      return ParseComment(c);
    }
    return ParseSample(c);
  }

  Status ParseComment(Cursor& c) {
    c.SkipBlanks();
    const std::string_view keyword = c.TakeUntilBlank();
    if (keyword != "HELP" && keyword != "TYPE") return absl::OkStatus();  // a comment
    c.SkipBlanks();
    const std::string_view name = c.TakeWhile(IsMetricNameStart, IsMetricNameChar);
    if (name.empty() || (!c.AtEnd() && !IsBlank(c.Peek()))) {
      return Error(absl::StrCat(AsAbsl(keyword), " line without a valid metric name"));
    }
    c.SkipBlanks();
    if (keyword == "HELP") return ParseHelp(name, c.Rest());
    return ParseType(name, c.Rest());
  }

  Status ParseHelp(std::string_view name, std::string_view text) {
    std::string help;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\\') {
        help += text[i];
        continue;
      }
      if (++i == text.size()) return Error("HELP text ends with an unfinished escape '\\'");
      if (text[i] == '\\')
        help += '\\';
      else if (text[i] == 'n')
        help += '\n';
      else
        return Error(absl::StrCat("invalid escape sequence ", Quote(std::string{'\\', text[i]}),
                                  " in HELP text (only \\\\ and \\n)"));
    }
    if (const size_t bad = FirstInvalidUtf8(help); bad != std::string_view::npos) {
      return Error(
          absl::StrCat("HELP text for ", AsAbsl(name), " is not valid UTF-8 (byte ", bad, ")"));
    }
    FW_ASSIGN_OR_RETURN(FamilyState * state, Declare(name, "HELP"));
    if (state->help_line != 0) {
      return Error(absl::StrCat("second HELP line for ", AsAbsl(name), " (first on line ",
                                state->help_line, ")"));
    }
    state->help_line = line_;
    state->family.help = std::move(help);
    return absl::OkStatus();
  }

  Status ParseType(std::string_view name, std::string_view type) {
    if (type.empty()) return Error(absl::StrCat("TYPE line for ", AsAbsl(name), " without a type"));
    if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
        type != "untyped") {
      return Error(absl::StrCat("unknown metric type ", Quote(type),
                                " (counter, gauge, histogram, summary or untyped)"));
    }
    if (auto it = families_.find(std::string(name)); it != families_.end()) {
      if (it->second.type_line != 0) {
        return Error(absl::StrCat("second TYPE line for ", AsAbsl(name), " (first on line ",
                                  it->second.type_line, ")"));
      }
      if (it->second.first_sample_line != 0) {
        return Error(absl::StrCat("TYPE line for ", AsAbsl(name), " comes after its samples (line ",
                                  it->second.first_sample_line, ")"));
      }
    }
    if (type == "histogram" || type == "summary") {
      // x_bucket / x_sum / x_count must not already be families of their own.
      for (std::string_view suffix : {kBucket, kSum, kCount}) {
        if (type == "summary" && suffix == kBucket) continue;
        const std::string sample_name = absl::StrCat(AsAbsl(name), AsAbsl(suffix));
        auto it = families_.find(sample_name);
        if (it == families_.end()) continue;
        if (it->second.first_sample_line != 0 && it->second.type_line == 0 &&
            it->second.help_line == 0) {
          return Error(absl::StrCat("TYPE line for ", AsAbsl(name), " comes after its samples (",
                                    sample_name, " on line ", it->second.first_sample_line, ")"));
        }
        return Error(absl::StrCat(AsAbsl(type), " ", AsAbsl(name), " conflicts with the family ",
                                  sample_name, " (line ", it->second.declared_line, ")"));
      }
    }
    FW_ASSIGN_OR_RETURN(FamilyState * state, Declare(name, "TYPE"));
    state->type_line = line_;
    state->family.type = std::string(type);
    return absl::OkStatus();
  }

  // The histogram or summary whose sample `name` is (x for x_count), if any.
  FamilyState* OwnerOf(std::string_view name) {
    for (std::string_view suffix : {kBucket, kSum, kCount}) {
      if (!EndsWith(name, suffix)) continue;
      auto it = families_.find(std::string(name.substr(0, name.size() - suffix.size())));
      if (it == families_.end()) continue;
      const std::string& type = it->second.family.type;
      if (type == "histogram" || (type == "summary" && suffix != kBucket)) return &it->second;
    }
    return nullptr;
  }

  // The family a HELP or TYPE line names, created on first mention.
  Result<FamilyState*> Declare(std::string_view name, std::string_view keyword) {
    auto it = families_.find(std::string(name));
    if (it != families_.end()) return &it->second;
    if (const FamilyState* owner = OwnerOf(name)) {
      return Error(absl::StrCat(AsAbsl(keyword), " line for ", AsAbsl(name),
                                ", which is a sample name of ", owner->family.type, " ",
                                owner->family.name, " (line ", owner->declared_line, ")"));
    }
    return NewFamily(name);
  }

  FamilyState* NewFamily(std::string_view name) {
    FamilyState& state = families_[std::string(name)];
    state.family.name = std::string(name);
    state.family.type = "untyped";
    state.declared_line = line_;
    return &state;
  }

  Status ParseLabels(Cursor& c, LabelMap* labels) {
    c.Advance();  // '{'
    while (true) {
      c.SkipBlanks();
      if (c.AtEnd()) return Error("unterminated label set (missing '}')");
      if (c.Peek() == '}') {
        c.Advance();
        return absl::OkStatus();
      }
      const std::string_view name = c.TakeWhile(IsLabelNameStart, IsLabelNameChar);
      if (name.empty()) {
        return Error(
            absl::StrCat("invalid label name starting at ", Quote(c.Rest().substr(0, 16))));
      }
      c.SkipBlanks();
      if (c.AtEnd() || c.Peek() != '=')
        return Error(absl::StrCat("expected '=' after label name ", AsAbsl(name)));
      c.Advance();
      c.SkipBlanks();
      if (c.AtEnd() || c.Peek() != '"') {
        return Error(absl::StrCat("expected '\"' to open the value of label ", AsAbsl(name)));
      }
      c.Advance();
      std::string value;
      while (true) {
        if (c.AtEnd()) return Error(absl::StrCat("unterminated value of label ", AsAbsl(name)));
        const char ch = c.Peek();
        c.Advance();
        if (ch == '"') break;
        if (ch != '\\') {
          value += ch;
          continue;
        }
        if (c.AtEnd()) return Error(absl::StrCat("unterminated value of label ", AsAbsl(name)));
        const char esc = c.Peek();
        c.Advance();
        if (esc == '\\')
          value += '\\';
        else if (esc == '"')
          value += '"';
        else if (esc == 'n')
          value += '\n';
        else {
          return Error(absl::StrCat("invalid escape sequence ", Quote(std::string{'\\', esc}),
                                    " in the value of label ", AsAbsl(name),
                                    " (only \\\\, \\\" and \\n)"));
        }
      }
      if (const size_t bad = FirstInvalidUtf8(value); bad != std::string_view::npos) {
        return Error(
            absl::StrCat("value of label ", AsAbsl(name), " is not valid UTF-8 (byte ", bad, ")"));
      }
      if (name == "__name__") return Error("label name __name__ is reserved");
      if (!labels->emplace(std::string(name), std::move(value)).second) {
        return Error(absl::StrCat("duplicate label ", AsAbsl(name)));
      }
      c.SkipBlanks();
      if (c.AtEnd()) return Error("unterminated label set (missing '}')");
      if (c.Peek() == ',') {
        c.Advance();
      } else if (c.Peek() != '}') {
        return Error(absl::StrCat("expected ',' or '}' after the value of label ", AsAbsl(name)));
      }
    }
  }

  Status ParseSample(Cursor& c) {
    PromSample sample;
    const std::string_view name = c.TakeWhile(IsMetricNameStart, IsMetricNameChar);
    if (name.empty()) {
      return Error(absl::StrCat("expected a metric name, found ", Quote(c.Rest().substr(0, 16))));
    }
    sample.name = std::string(name);
    c.SkipBlanks();
    if (!c.AtEnd() && c.Peek() == '{') {
      FW_RETURN_IF_ERROR(ParseLabels(c, &sample.labels));
      c.SkipBlanks();
    }
    const std::string_view value = c.TakeUntilBlank();
    if (value.empty())
      return Error(absl::StrCat("sample ", SeriesText(name, sample.labels), " has no value"));
    switch (ParseGoFloat(value, &sample.value)) {
      case NumberParse::kOk:
        break;
      case NumberParse::kSyntax:
        return Error(
            absl::StrCat("invalid value ", Quote(value), " for ", SeriesText(name, sample.labels)));
      case NumberParse::kRange:
        return Error(absl::StrCat("value ", Quote(value), " for ", SeriesText(name, sample.labels),
                                  " is out of the range of a double"));
    }
    c.SkipBlanks();
    if (!c.AtEnd()) {
      const std::string_view ts = c.TakeUntilBlank();
      int64_t ms = 0;
      if (!ParseTimestamp(ts, &ms)) {
        return Error(absl::StrCat("invalid timestamp ", Quote(ts),
                                  " (an int64 of milliseconds) for ",
                                  SeriesText(name, sample.labels)));
      }
      sample.timestamp_ms = ms;
      c.SkipBlanks();
      if (!c.AtEnd())
        return Error(
            absl::StrCat("unexpected text after the timestamp: ", Quote(c.Rest().substr(0, 16))));
    }
    FW_RETURN_IF_ERROR(Classify(sample));
    scrape_.samples.push_back(std::move(sample));
    return absl::OkStatus();
  }

  // Finds the sample's family and checks what its type asks of it.
  Status Classify(const PromSample& sample) {
    auto key = std::make_pair(sample.name, sample.labels);
    if (auto [it, inserted] = series_lines_.emplace(std::move(key), line_); !inserted) {
      return Error(absl::StrCat("duplicate sample ", SeriesText(sample.name, sample.labels),
                                " (first on line ", it->second, ")"));
    }
    FamilyState* state = nullptr;
    if (auto it = families_.find(sample.name); it != families_.end()) {
      state = &it->second;
    } else if (FamilyState* owner = OwnerOf(sample.name)) {
      state = owner;
    } else {
      state = NewFamily(sample.name);
    }
    if (state->first_sample_line == 0) state->first_sample_line = line_;
    const PromFamily& family = state->family;
    const std::string_view suffix = std::string_view(sample.name).substr(family.name.size());
    if (family.type == "histogram") {
      if (suffix.empty()) {
        return Error(absl::StrCat("sample ", sample.name, " of histogram ", family.name,
                                  " must be ", family.name, "_bucket, _sum or _count"));
      }
      return HistogramSample(family.name, suffix, sample);
    }
    if (family.type == "summary") {
      const bool has_quantile = sample.labels.count("quantile") != 0;
      if (!suffix.empty()) {
        if (has_quantile) {
          return Error(absl::StrCat(SeriesText(sample.name, sample.labels), " of summary ",
                                    family.name, " has a quantile label"));
        }
        return absl::OkStatus();
      }
      if (!has_quantile) {
        return Error(absl::StrCat("sample ", SeriesText(sample.name, sample.labels), " of summary ",
                                  family.name, " has no quantile label"));
      }
      double q = 0;
      if (ParseGoFloat(sample.labels.at("quantile"), &q) != NumberParse::kOk) {
        return Error(absl::StrCat("quantile ", Quote(sample.labels.at("quantile")), " of ",
                                  family.name, " is not a number"));
      }
    }
    return absl::OkStatus();
  }

  HistogramSeries& SeriesFor(const std::string& family, const LabelMap& labels) {
    auto [it, inserted] =
        histogram_index_.emplace(std::make_pair(family, labels), histograms_.size());
    if (inserted) {
      HistogramSeries series;
      series.family = family;
      series.labels = labels;
      series.first_line = line_;
      histograms_.push_back(std::move(series));
    }
    return histograms_[it->second];
  }

  Status HistogramSample(const std::string& family, std::string_view suffix,
                         const PromSample& sample) {
    const std::string series = SeriesText(sample.name, sample.labels);
    if (suffix != kBucket) {
      if (sample.labels.count("le") != 0) {
        return Error(absl::StrCat(series, " of histogram ", family,
                                  " has an le label (only buckets have one)"));
      }
      HistogramSeries& h = SeriesFor(family, sample.labels);
      if (suffix == kCount) {
        h.count_line = line_;
        h.count = sample.value;
      }
      return absl::OkStatus();
    }
    auto le_it = sample.labels.find("le");
    if (le_it == sample.labels.end())
      return Error(absl::StrCat("bucket ", series, " has no le label"));
    const std::string& le_text = le_it->second;
    double le = 0;
    if (ParseGoFloat(le_text, &le) != NumberParse::kOk || std::isnan(le)) {
      return Error(absl::StrCat("bucket ", series, ": le=", Quote(le_text), " is not a number"));
    }
    if (std::isnan(sample.value) || sample.value < 0) {
      return Error(absl::StrCat("bucket ", series, " has count ", FormatValue(sample.value),
                                " (a count is a non-negative number)"));
    }
    LabelMap without_le = sample.labels;
    without_le.erase("le");
    HistogramSeries& h = SeriesFor(family, without_le);
    if (h.last_bucket_line != 0) {
      if (!(le > h.last_le)) {
        return Error(absl::StrCat("bucket ", series, " comes after le=", Quote(h.last_le_text),
                                  " (line ", h.last_bucket_line,
                                  "): buckets must be in increasing le order"));
      }
      if (sample.value < h.last_bucket_count) {
        return Error(absl::StrCat("bucket ", series, " has count ", FormatValue(sample.value),
                                  ", less than the ", FormatValue(h.last_bucket_count),
                                  " of le=", Quote(h.last_le_text), " (line ", h.last_bucket_line,
                                  "): bucket counts must be cumulative"));
      }
    }
    h.last_bucket_line = line_;
    h.last_le = le;
    h.last_le_text = le_text;
    h.last_bucket_count = sample.value;
    if (std::isinf(le) && le > 0) {
      h.inf_line = line_;
      h.inf_count = sample.value;
    }
    return absl::OkStatus();
  }

  Status CheckHistograms() const {
    for (const HistogramSeries& h : histograms_) {
      const std::string series = SeriesText(h.family, h.labels);
      if (h.inf_line == 0) {
        return ErrorAt(h.last_bucket_line != 0 ? h.last_bucket_line : h.first_line,
                       absl::StrCat("histogram ", series, " has no le=\"+Inf\" bucket"));
      }
      if (h.count_line == 0) {
        return ErrorAt(h.inf_line,
                       absl::StrCat("histogram ", series, " has no ", h.family, "_count sample"));
      }
      if (!(h.count == h.inf_count)) {
        return ErrorAt(h.count_line,
                       absl::StrCat(SeriesText(h.family + "_count", h.labels), " is ",
                                    FormatValue(h.count), " but its le=\"+Inf\" bucket (line ",
                                    h.inf_line, ") is ", FormatValue(h.inf_count)));
      }
    }
    return absl::OkStatus();
  }

  int line_ = 0;
  PromScrape scrape_;
  std::map<std::string, FamilyState> families_;
  std::map<std::pair<std::string, LabelMap>, int> series_lines_;  // series -> its line
  std::map<std::pair<std::string, LabelMap>, size_t> histogram_index_;
  std::vector<HistogramSeries> histograms_;  // in order of first appearance
};

}  // namespace

std::optional<double> PromScrape::Find(const std::string& name,
                                       const std::map<std::string, std::string>& labels) const {
  for (const PromSample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

Result<PromScrape> ParsePrometheusText(std::string_view text) { return Parser().Run(text); }

}  // namespace flywheel::obs

// Fuzzes the TOML config parser (flywheel/base/toml.h).
//
// Beyond "no crash": every parsed value must have a location and answer every
// accessor consistently, and the tree written back out as TOML (inline form)
// must parse to an equal tree, so the parser never silently misreads input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/toml.h"

namespace {

using flywheel::toml::Type;
using flywheel::toml::Value;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Walks the tree, touching every accessor.
void Walk(const Value& v) {
  Check(v.line() >= 1 && v.column() >= 1);
  Check(v.source() == "fuzz.toml");
  const std::string where = v.Location();
  const auto status = v.Error("boom");
  Check(!status.ok() && status.message() == where + ": boom");
  Check(static_cast<int>(v.is_string()) + v.is_int() + v.is_double() + v.is_bool() + v.is_array() +
            v.is_table() ==
        1);
  switch (v.type()) {
    case Type::kString:
      (void)v.as_string().size();
      break;
    case Type::kInt:
      (void)v.as_int();
      break;
    case Type::kDouble:
      (void)v.as_double();
      break;
    case Type::kBool:
      (void)v.as_bool();
      break;
    case Type::kArray:
      for (const Value& e : v.as_array()) Walk(e);
      break;
    case Type::kTable: {
      std::vector<std::string_view> keys;
      for (const auto& entry : v.as_table()) {
        const std::string& key = entry.first;
        const Value& child = entry.second;
        keys.push_back(key);
        Check(v.Find(key) == &child);
        // Typed getters agree with the value's type.
        Check(flywheel::toml::GetString(v, key).ok() == child.is_string());
        Check(flywheel::toml::GetInt(v, key, 1).ok() == child.is_int());
        Check(flywheel::toml::GetBool(v, key).ok() == child.is_bool());
        if (child.is_double()) Check(flywheel::toml::GetDouble(v, key).ok());
        Walk(child);
      }
      Check(flywheel::toml::CheckKeys(v, keys).ok());
      Check(flywheel::toml::CheckKeys(v, {}).ok() == keys.empty());
      if (v.Find("\x7f") == nullptr) {
        Check(flywheel::toml::GetInt(v, "\x7f", 5).value_or(0) == 5);
        Check(!flywheel::toml::GetInt(v, "\x7f").ok());
      }
      break;
    }
  }
}

void EmitString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04X", c);
      *out += buf;
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

void Emit(const Value& v, std::string* out) {
  switch (v.type()) {
    case Type::kString:
      EmitString(v.as_string(), out);
      break;
    case Type::kInt:
      *out += std::to_string(v.as_int());
      break;
    case Type::kBool:
      *out += v.as_bool() ? "true" : "false";
      break;
    case Type::kDouble: {
      const double d = v.as_double();
      if (std::isnan(d)) {
        *out += std::signbit(d) ? "-nan" : "nan";
      } else if (std::isinf(d)) {
        *out += d < 0 ? "-inf" : "inf";
      } else {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.17g", d);
        *out += buf;
        if (std::strpbrk(buf, ".e") == nullptr) *out += ".0";
      }
      break;
    }
    case Type::kArray: {
      *out += "[";
      for (const Value& e : v.as_array()) {
        Emit(e, out);
        *out += ", ";
      }
      *out += "]";
      break;
    }
    case Type::kTable: {
      *out += "{";
      bool first = true;
      for (const auto& entry : v.as_table()) {
        *out += first ? " " : ", ";
        first = false;
        EmitString(entry.first, out);
        *out += " = ";
        Emit(entry.second, out);
      }
      *out += " }";
      break;
    }
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kString:
      return a.as_string() == b.as_string();
    case Type::kInt:
      return a.as_int() == b.as_int();
    case Type::kBool:
      return a.as_bool() == b.as_bool();
    case Type::kDouble: {
      const double x = a.as_double();
      const double y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) {
        return std::isnan(x) && std::isnan(y) && std::signbit(x) == std::signbit(y);
      }
      return std::memcmp(&x, &y, sizeof(x)) == 0;
    }
    case Type::kArray: {
      const auto& xs = a.as_array();
      const auto& ys = b.as_array();
      if (xs.size() != ys.size()) return false;
      for (size_t i = 0; i < xs.size(); ++i) {
        if (!Equal(xs[i], ys[i])) return false;
      }
      return true;
    }
    case Type::kTable: {
      const auto& xs = a.as_table();
      const auto& ys = b.as_table();
      if (xs.size() != ys.size()) return false;
      for (size_t i = 0; i < xs.size(); ++i) {
        if (xs[i].first != ys[i].first || !Equal(xs[i].second, ys[i].second)) return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto root = flywheel::toml::Parse(text, "fuzz.toml");
  if (!root.ok()) {
    // Every error names the source and a position.
    Check(root.status().code() == absl::StatusCode::kInvalidArgument);
    Check(root.status().message().substr(0, 10) == "fuzz.toml:");
    return 0;
  }
  Check(root->is_table());
  Walk(*root);

  std::string again;
  for (const auto& entry : root->as_table()) {
    EmitString(entry.first, &again);
    again += " = ";
    Emit(entry.second, &again);
    again += "\n";
  }
  auto reparsed = flywheel::toml::Parse(again, "fuzz.toml");
  if (!reparsed.ok()) {
    std::fprintf(stderr, "re-emitted document failed to parse: %s\n%s\n",
                 std::string(reparsed.status().message()).c_str(), again.c_str());
    __builtin_trap();
  }
  Check(Equal(*root, *reparsed));
  return 0;
}

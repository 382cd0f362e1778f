#include "flywheel/format/leaf_stats.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"

namespace flywheel::format {
namespace {

double Number(TypeId id, const uint8_t* p) {
  auto get = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
  switch (id) {
    case TypeId::kBool: return get(uint8_t{}) != 0;
    case TypeId::kInt8: return get(int8_t{});
    case TypeId::kInt16: return get(int16_t{});
    case TypeId::kInt32: return get(int32_t{});
    case TypeId::kInt64: return static_cast<double>(get(int64_t{}));
    case TypeId::kUInt8: return get(uint8_t{});
    case TypeId::kUInt16: return get(uint16_t{});
    case TypeId::kUInt32: return get(uint32_t{});
    case TypeId::kUInt64: return static_cast<double>(get(uint64_t{}));
    case TypeId::kFloat16: return HalfToDouble(get(uint16_t{}));
    case TypeId::kFloat32: return get(float{});
    case TypeId::kFloat64: return get(double{});
    default: return 0;
  }
}

void AddNumber(LeafStats* s, double v) {
  if (std::isnan(v)) return;
  if (!s->has_bounds) {
    s->has_bounds = true;
    s->min = s->max = v;
    return;
  }
  s->min = std::min(s->min, v);
  s->max = std::max(s->max, v);
}

void AddText(LeafStats* s, std::string_view v) {
  s->text = true;
  if (v.size() > kMaxStatsStringBytes) {
    s->bounds_incomplete = true;
    return;
  }
  if (!s->has_bounds) {
    s->has_bounds = true;
    s->min_text = s->max_text = std::string(v);
    return;
  }
  if (v < std::string_view(s->min_text)) s->min_text = std::string(v);
  if (v > std::string_view(s->max_text)) s->max_text = std::string(v);
}

// Walks `c` for the rows where live[i] (an empty live = every row).
void Walk(const Column& c, const std::vector<uint8_t>& live, const std::string& path, LeafStatsMap* out) {
  const int64_t n = c.length;
  auto alive = [&](int64_t i) { return live.empty() || live[static_cast<size_t>(i)] != 0; };
  if (c.type.is_nested()) {
    if (c.type.id == TypeId::kStruct) {
      std::vector<uint8_t> sub(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) sub[static_cast<size_t>(i)] = alive(i) && c.IsValid(i);
      for (size_t k = 0; k < c.children.size(); ++k) {
        Walk(c.children[k], sub, absl::StrCat(path, ".", c.type.children[k].name), out);
      }
      return;
    }
    const int64_t* o = c.offsets_data();
    const int64_t m = c.children[0].length;
    std::vector<uint8_t> sub(static_cast<size_t>(m), 0);
    for (int64_t i = 0; i < n; ++i) {
      if (!alive(i) || !c.IsValid(i)) continue;
      for (int64_t e = o[i]; e < o[i + 1]; ++e) sub[static_cast<size_t>(e)] = 1;
    }
    if (c.type.id == TypeId::kList) {
      Walk(c.children[0], sub, path + "[]", out);
    } else {
      Walk(c.children[0], sub, path + "[key]", out);
      Walk(c.children[1], sub, path + "[value]", out);
    }
    return;
  }
  LeafStats& s = (*out)[path];
  const TypeId id = c.type.id;
  for (int64_t i = 0; i < n; ++i) {
    if (!alive(i)) continue;
    s.values++;
    if (!c.IsValid(i)) {
      s.nulls++;
      continue;
    }
    if (IsScalar(id) && c.type.shape.empty()) {
      AddNumber(&s, Number(id, c.FixedRow(i)));
    } else if (id == TypeId::kString || id == TypeId::kBinary) {
      AddText(&s, c.GetBytes(i));
    }
  }
}

}  // namespace

void AccumulateLeafStats(const Column& c, const std::string& name, LeafStatsMap* out) { Walk(c, {}, name, out); }

void MergeLeafStats(const LeafStatsMap& from, LeafStatsMap* into) {
  for (const auto& [path, s] : from) {
    LeafStats& d = (*into)[path];
    d.values += s.values;
    d.nulls += s.nulls;
    d.bounds_incomplete |= s.bounds_incomplete;
    d.text |= s.text;
    if (!s.has_bounds) continue;
    if (s.text) {
      if (!d.has_bounds) {
        d.min_text = s.min_text;
        d.max_text = s.max_text;
      } else {
        if (s.min_text < d.min_text) d.min_text = s.min_text;
        if (s.max_text > d.max_text) d.max_text = s.max_text;
      }
    } else if (!d.has_bounds) {
      d.min = s.min;
      d.max = s.max;
    } else {
      d.min = std::min(d.min, s.min);
      d.max = std::max(d.max, s.max);
    }
    d.has_bounds = true;
  }
}

std::string LeafStatsToJson(const LeafStatsMap& stats) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [path, s] : stats) {
    nlohmann::ordered_json e{{"values", s.values}, {"nulls", s.nulls}};
    if (s.has_bounds && s.text) {
      // Bytes as hex: strings and binary alike, valid JSON whatever they hold.
      static const char* kHex = "0123456789abcdef";
      auto hex = [](const std::string& b) {
        std::string h;
        for (unsigned char ch : b) {
          h += kHex[ch >> 4];
          h += kHex[ch & 15];
        }
        return h;
      };
      e["min_hex"] = hex(s.min_text);
      e["max_hex"] = hex(s.max_text);
    } else if (s.has_bounds) {
      e["min"] = s.min;
      e["max"] = s.max;
    }
    if (s.bounds_incomplete) e["bounds_incomplete"] = true;
    j[path] = std::move(e);
  }
  return j.dump();
}

Result<LeafStatsMap> LeafStatsFromJson(std::string_view text) {
  LeafStatsMap out;
  try {
    const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end());
    if (!j.is_object()) return absl::DataLossError("leaf statistics are not a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      const nlohmann::json& e = it.value();
      LeafStats s;
      s.values = e.at("values").get<int64_t>();
      s.nulls = e.at("nulls").get<int64_t>();
      s.bounds_incomplete = e.value("bounds_incomplete", false);
      auto unhex = [](const std::string& h) {
        std::string b;
        for (size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
        return b;
      };
      if (e.contains("min_hex")) {
        s.has_bounds = s.text = true;
        s.min_text = unhex(e.at("min_hex").get<std::string>());
        s.max_text = unhex(e.at("max_hex").get<std::string>());
      } else if (e.contains("min")) {
        s.has_bounds = true;
        s.min = e.at("min").get<double>();
        s.max = e.at("max").get<double>();
      }
      out[it.key()] = std::move(s);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("leaf statistics: ", e.what()));
  }
  return out;
}

}  // namespace flywheel::format

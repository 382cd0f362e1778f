#include "flywheel/envs/space.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace flywheel::envs {

size_t ItemSize(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
  }
  return "?";
}

Space Space::Box(std::vector<double> low, std::vector<double> high, std::vector<int64_t> shape,
                 DType dtype) {
  Space s;
  s.kind = Kind::kBox;
  s.shape = std::move(shape);
  s.dtype = dtype;
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

Space Space::UniformBox(double low, double high, std::vector<int64_t> shape, DType dtype) {
  Space s = Box({}, {}, std::move(shape), dtype);
  const auto n = static_cast<size_t>(std::max<int64_t>(s.num_elements(), 0));
  s.low.assign(n, low);
  s.high.assign(n, high);
  return s;
}

Space Space::Discrete(int64_t n, int64_t start) {
  Space s;
  s.kind = Kind::kDiscrete;
  s.dtype = DType::kInt64;
  s.n = n;
  s.start = start;
  return s;
}

int64_t Space::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status Space::Validate() const {
  if (is_discrete()) {
    if (n < 1)
      return absl::InvalidArgumentError(absl::StrCat("Discrete space: n must be >= 1, got ", n));
    return absl::OkStatus();
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Box space: negative dimension in shape (",
                                                     absl::StrJoin(shape, ", "), ")"));
    }
  }
  const auto n = static_cast<size_t>(num_elements());
  if (low.size() != n || high.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Box space: ", low.size(), " low and ", high.size(), " high bounds for ", n, " elements"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(low[i]) || std::isnan(high[i]) || low[i] > high[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Box space: element ", i, " has bounds [", low[i], ", ", high[i], "]"));
    }
  }
  return absl::OkStatus();
}

std::string Space::ToString() const {
  if (is_discrete()) {
    return start == 0 ? absl::StrCat("Discrete(", n, ")")
                      : absl::StrCat("Discrete(", n, ", start=", start, ")");
  }
  const std::string shape_text =
      absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
  const bool uniform = !low.empty() && std::all_of(low.begin(), low.end(), [&](double v) {
    return v == low[0];
  }) && std::all_of(high.begin(), high.end(), [&](double v) { return v == high[0]; });
  if (uniform) {
    return absl::StrCat("Box(", low[0], ", ", high[0], ", ", shape_text, ", ",
                        AsAbsl(DTypeName(dtype)), ")");
  }
  return absl::StrCat("Box(shape=", shape_text, ", ", AsAbsl(DTypeName(dtype)), ")");
}

}  // namespace flywheel::envs

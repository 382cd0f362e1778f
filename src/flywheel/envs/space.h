// Observation and action spaces: Box(low, high, shape, dtype) and
// Discrete(n, start), with Gymnasium's meaning (gymnasium.spaces.Box /
// Discrete), so a Python space object can be built from one field by field.
//
// A space describes one env's observation or action; EnvPool batches rows of
// `row_bytes()` bytes each. Discrete values are int64 (one per row).
//
// Thread-safety: a Space is an immutable value after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::envs {

// Element types a Box can hold (numpy's names by DTypeName()).
enum class DType { kFloat32, kFloat64, kInt32, kInt64, kUInt8 };

size_t ItemSize(DType t);
std::string_view DTypeName(DType t);

struct Space {
  enum class Kind { kBox, kDiscrete };

  // Box with per-element bounds (row-major, one per element of `shape`);
  // infinities are allowed. Gymnasium stores float32 bounds as float32: pass
  // the float32 values (e.g. static_cast<float>(0.07)) to keep them exact.
  static Space Box(std::vector<double> low, std::vector<double> high, std::vector<int64_t> shape,
                   DType dtype = DType::kFloat32);
  // Box with the same bounds for every element.
  static Space UniformBox(double low, double high, std::vector<int64_t> shape,
                          DType dtype = DType::kFloat32);
  // The integers start, start + 1, ..., start + n - 1.
  static Space Discrete(int64_t n, int64_t start = 0);

  Kind kind = Kind::kDiscrete;
  std::vector<int64_t> shape;     // Box: per-env shape; Discrete: {} (a scalar)
  DType dtype = DType::kInt64;    // Box: element type; Discrete: always kInt64
  std::vector<double> low, high;  // Box only; num_elements() each
  int64_t n = 0;                  // Discrete only
  int64_t start = 0;              // Discrete only

  bool is_box() const { return kind == Kind::kBox; }
  bool is_discrete() const { return kind == Kind::kDiscrete; }
  // Elements per env (product of shape; 1 for Discrete).
  int64_t num_elements() const;
  // Bytes per env: num_elements() * ItemSize(dtype).
  size_t row_bytes() const { return static_cast<size_t>(num_elements()) * ItemSize(dtype); }

  // InvalidArgument when the shape has a negative dimension, the bounds do
  // not match it, low > high somewhere, a bound is NaN, or n < 1.
  Status Validate() const;

  // "Discrete(2)", "Discrete(3, start=-1)", "Box(-2.0, 2.0, (1,), float32)"
  // (uniform bounds) or "Box(shape=(4,), float32)".
  std::string ToString() const;
};

}  // namespace flywheel::envs

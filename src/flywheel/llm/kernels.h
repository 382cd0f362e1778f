// The engine's compute kernels behind one interface (a CUDA backend can
// implement it later): matrix products against F32 or BF16 weights, and a
// parallel loop for per-token work (attention, norms).
//
// Determinism and batch invariance: every output element y[t, n] is the dot
// product of row t of x and row n of w computed in one fixed order, whatever
// the number of rows, the tiling and the thread count: 16 partial sums (lane
// l takes k = l mod 16, each step a fused multiply-add), then the lanes
// added in a fixed tree. The AVX-512, AVX2+FMA and portable paths perform the
// same operations, so they give bit-identical results; threads split the
// output columns, never a sum. docs/llm.md ("Kernels").
//
// Thread-safety: a Kernels object runs one call at a time (the engine's step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "flywheel/llm/model.h"

namespace flywheel::llm {

class Kernels {
 public:
  virtual ~Kernels() = default;
  // y[t * w.rows + n] = dot(x[t * w.cols ...], row n of w), t < rows.
  virtual void MatMul(const float* x, int64_t rows, const Matrix& w, float* y) = 0;
  // fn(begin, end) over [0, n) split across the threads; returns when done.
  virtual void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) = 0;
  virtual int threads() const = 0;
  // "cpu avx512 x2 threads", ...
  virtual std::string name() const = 0;
};

// The CPU kernels on `threads` threads (>= 1), using the widest of AVX-512,
// AVX2+FMA and portable code the processor supports (or `isa`: "avx512",
// "avx2", "portable" to force one, for tests).
std::unique_ptr<Kernels> MakeCpuKernels(int threads, const std::string& isa = "");

// The dot product the kernels compute (the same 16-lane order), for
// attention and tests.
float Dot(const float* a, const float* b, int64_t n);
// out[i] = Dot(q, rows[i], n) for i < count, bit for bit, faster (attention
// scores: 16 rows reduced at once where the processor allows).
void Dots(const float* q, const float* const* rows, int64_t count, int64_t n, float* out);
// out[d] = (((0 + coef[0] * rows[0][d]) + coef[1] * rows[1][d]) + ...), each
// product rounded then added, in row order (attention's weighted values).
void WeightedSum(const float* coef, const float* const* rows, int64_t count, int64_t n, float* out);
// y[i] = y[i] + a * x[i] (a product rounded, then a sum: every path alike).
void Axpy(float a, const float* x, float* y, int64_t n);

}  // namespace flywheel::llm

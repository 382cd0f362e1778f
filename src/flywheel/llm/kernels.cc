#include "flywheel/llm/kernels.h"

// GCC 12 reports its own AVX-512 intrinsics' undefined-vector placeholders
// as (maybe-)uninitialized (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"
#include "flywheel/base/thread_pool.h"

namespace flywheel::llm {
namespace {

constexpr int kLanes = 16;

// The fixed tree that adds the 16 lanes of one dot product.
inline float ReduceLanes(float* l) {
  for (int i = 0; i < 8; ++i) l[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) l[i] = l[i] + l[i + 4];
  for (int i = 0; i < 2; ++i) l[i] = l[i] + l[i + 2];
  return l[0] + l[1];
}

inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) { return Bf16ToFloat(*p); }
inline float Load1(const int8_t* p) { return static_cast<float>(*p); }

// The tail k in [k0, K): lane k - k0 (k0 is a multiple of 16), scalar fma as
// every path does it.
template <typename W>
inline void Tail(const float* x, const W* w, int64_t k0, int64_t K, float* lanes) {
  for (int64_t k = k0; k < K; ++k) lanes[k - k0] = std::fmaf(Load1(w + k), x[k], lanes[k - k0]);
}

// ---------------------------------------------------------------- AVX-512
#define FW_AVX512 __attribute__((target("avx512f")))

FW_AVX512 inline __m512 W512(const float* p) { return _mm512_loadu_ps(p); }
FW_AVX512 inline __m512 W512(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
FW_AVX512 inline __m512 W512(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The 16 dot products of a 4 x 4 tile reduced at once, each by exactly
// ReduceLanes's tree (lane i + lane i+8, then +4, +2, +1; IEEE addition is
// commutative, so operand order within a pair does not matter): four levels
// of shuffles and vector adds instead of 16 scalar trees. Fed acc[n][t] in
// order n * 4 + t, the result holds output (t, n) in lane t * 4 + n.
FW_AVX512 inline void Reduce16(const __m512 (&acc)[4][4], float* y, int64_t ldy) {
  const __m512* a = &acc[0][0];
  __m512 v[8], w[4], x[2];
  for (int k = 0; k < 8; ++k) {  // lanes i + i+8
    v[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
  }
  for (int k = 0; k < 4; ++k) {  // + i+4
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xDD));
  }
  for (int k = 0; k < 2; ++k) {  // + i+2
    x[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),  // + i+1
                                 _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
  _mm_storeu_ps(y, _mm512_extractf32x4_ps(r, 0));
  _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(r, 1));
  _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(r, 2));
  _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(r, 3));
}

template <int NR, int TR, typename W, bool PF>
FW_AVX512 void Tile512(const float* x, int64_t K, const W* w, float* y, int64_t ldy) {
  __m512 acc[NR][TR];
  #pragma GCC unroll 4
  for (int n = 0; n < NR; ++n)
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) acc[n][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m512 xv[TR];
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) xv[t] = _mm512_loadu_ps(x + t * K + k);
    #pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) {
      const __m512 wv = W512(w + n * K + k);
      // The next tile's weights, so that streaming them from memory overlaps
      // this tile's arithmetic (a hint only: never faults, never changes a
      // bit). Only the first row tile over these weights prefetches.
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(w + (NR + n) * K + k), _MM_HINT_T0);
      #pragma GCC unroll 4
      for (int t = 0; t < TR; ++t) acc[n][t] = _mm512_fmadd_ps(wv, xv[t], acc[n][t]);
    }
  }
  if constexpr (NR == 4 && TR == 4) {
    if (k == K) {  // no tail: reduce the 16 accumulators together
      Reduce16(acc, y, ldy);
      return;
    }
  }
  alignas(64) float lanes[kLanes];
  #pragma GCC unroll 4
  for (int n = 0; n < NR; ++n) {
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) {
      _mm512_store_ps(lanes, acc[n][t]);
      Tail(x + t * K, w + n * K, k, K, lanes);
      y[t * ldy + n] = ReduceLanes(lanes);
    }
  }
}

FW_AVX512 float Dot512(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc = _mm512_fmadd_ps(_mm512_loadu_ps(b + k), _mm512_loadu_ps(a + k), acc);
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  Tail(a, b, k, n, lanes);
  return ReduceLanes(lanes);
}

// out[i] = Dot512(q, rows[i], n) for i < count, 16 rows at a time reduced
// together (Reduce16: the same bits as Dot512's own tree).
FW_AVX512 void Dots512(const float* q, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t i = 0;
  if (n % kLanes == 0) {
    for (; i + 16 <= count; i += 16) {
      __m512 acc[4][4];
      #pragma GCC unroll 4
      for (int a = 0; a < 4; ++a)
        #pragma GCC unroll 4
        for (int b = 0; b < 4; ++b) acc[a][b] = _mm512_setzero_ps();
      for (int64_t k = 0; k < n; k += kLanes) {
        const __m512 qv = _mm512_loadu_ps(q + k);
        #pragma GCC unroll 4
        for (int a = 0; a < 4; ++a)
          #pragma GCC unroll 4
          for (int b = 0; b < 4; ++b) {
            // acc[a][b] holds row i + b * 4 + a, so Reduce16 writes it at out[b * 4 + a].
            acc[a][b] = _mm512_fmadd_ps(_mm512_loadu_ps(rows[i + b * 4 + a] + k), qv, acc[a][b]);
          }
      }
      Reduce16(acc, out + i, 4);
    }
  }
  for (; i < count; ++i) out[i] = Dot512(q, rows[i], n);
}

FW_AVX512 void Axpy512(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(av, _mm512_loadu_ps(x + i))));
  }
  for (; i < n; ++i) y[i] = y[i] + a * x[i];
}

// out[d] = sum over j in order of coef[j] * rows[j][d] (each product
// rounded, then added), accumulated in registers 64 columns at a time.
FW_AVX512 void WeightedSum512(const float* coef, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t d = 0;
  for (; d + 64 <= n; d += 64) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < count; ++j) {
      const __m512 c = _mm512_set1_ps(coef[j]);
      const float* r = rows[j] + d;
      a0 = _mm512_add_ps(a0, _mm512_mul_ps(c, _mm512_loadu_ps(r)));
      a1 = _mm512_add_ps(a1, _mm512_mul_ps(c, _mm512_loadu_ps(r + 16)));
      a2 = _mm512_add_ps(a2, _mm512_mul_ps(c, _mm512_loadu_ps(r + 32)));
      a3 = _mm512_add_ps(a3, _mm512_mul_ps(c, _mm512_loadu_ps(r + 48)));
    }
    _mm512_storeu_ps(out + d, a0);
    _mm512_storeu_ps(out + d + 16, a1);
    _mm512_storeu_ps(out + d + 32, a2);
    _mm512_storeu_ps(out + d + 48, a3);
  }
  for (; d + 16 <= n; d += 16) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t j = 0; j < count; ++j) a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(coef[j]), _mm512_loadu_ps(rows[j] + d)));
    _mm512_storeu_ps(out + d, a);
  }
  for (; d < n; ++d) {
    float a = 0;
    for (int64_t j = 0; j < count; ++j) a = a + coef[j] * rows[j][d];
    out[d] = a;
  }
}

// ---------------------------------------------------------------- AVX2+FMA
#define FW_AVX2 __attribute__((target("avx2,fma")))

struct V2 {
  __m256 lo, hi;
};
FW_AVX2 inline V2 W256(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
FW_AVX2 inline V2 W256(const int8_t* p) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8));
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(a)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))};
}
FW_AVX2 inline V2 W256(const uint16_t* p) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16)),
          _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16))};
}

template <int NR, int TR, typename W>
FW_AVX2 void Tile256(const float* x, int64_t K, const W* w, float* y, int64_t ldy) {
  V2 acc[NR][TR];
  #pragma GCC unroll 4
  for (int n = 0; n < NR; ++n)
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) acc[n][t] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    V2 xv[TR];
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) xv[t] = W256(x + t * K + k);
    #pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) {
      const V2 wv = W256(w + n * K + k);
      #pragma GCC unroll 4
      for (int t = 0; t < TR; ++t) {
        acc[n][t].lo = _mm256_fmadd_ps(wv.lo, xv[t].lo, acc[n][t].lo);
        acc[n][t].hi = _mm256_fmadd_ps(wv.hi, xv[t].hi, acc[n][t].hi);
      }
    }
  }
  alignas(32) float lanes[kLanes];
  #pragma GCC unroll 4
  for (int n = 0; n < NR; ++n) {
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) {
      _mm256_store_ps(lanes, acc[n][t].lo);
      _mm256_store_ps(lanes + 8, acc[n][t].hi);
      Tail(x + t * K, w + n * K, k, K, lanes);
      y[t * ldy + n] = ReduceLanes(lanes);
    }
  }
}

FW_AVX2 float Dot256(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(b + k), _mm256_loadu_ps(a + k), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(b + k + 8), _mm256_loadu_ps(a + k + 8), hi);
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  Tail(a, b, k, n, lanes);
  return ReduceLanes(lanes);
}

// ---------------------------------------------------------------- portable
template <int NR, int TR, typename W>
void TilePortable(const float* x, int64_t K, const W* w, float* y, int64_t ldy) {
  #pragma GCC unroll 4
  for (int n = 0; n < NR; ++n) {
    #pragma GCC unroll 4
    for (int t = 0; t < TR; ++t) {
      // Lane k mod 16, one fused multiply-add per step: the vector paths' order.
      float lanes[kLanes] = {};
      for (int64_t kk = 0; kk < K; ++kk) lanes[kk % kLanes] = std::fmaf(Load1(w + n * K + kk), x[t * K + kk], lanes[kk % kLanes]);
      y[t * ldy + n] = ReduceLanes(lanes);
    }
  }
}

float DotPortable(const float* a, const float* b, int64_t n) {
  float lanes[kLanes] = {};
  for (int64_t k = 0; k < n; ++k) lanes[k % kLanes] = std::fmaf(b[k], a[k], lanes[k % kLanes]);
  return ReduceLanes(lanes);
}

enum class Isa { kAvx512, kAvx2, kPortable };

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kPortable;
}

using TileFn = void (*)(const float*, int64_t, const void*, float*, int64_t);

template <int NR, int TR, typename W, Isa I, bool PF>
void TileEntry(const float* x, int64_t K, const void* w, float* y, int64_t ldy) {
  const W* wp = static_cast<const W*>(w);
  if constexpr (I == Isa::kAvx512) {
    Tile512<NR, TR, W, PF>(x, K, wp, y, ldy);
  } else if constexpr (I == Isa::kAvx2) {
    Tile256<NR, TR, W>(x, K, wp, y, ldy);
  } else {
    TilePortable<NR, TR, W>(x, K, wp, y, ldy);
  }
}

// Tiles up to 4 x 4 (AVX-512: 16 accumulators; AVX2 up to 2 x 2 in pairs of
// 256-bit halves, else registers spill).
template <typename W, Isa I, bool PF>
struct TileTable {
  TileFn fn[4][4];
  TileTable() {
    Fill<1>();
    Fill<2>();
    Fill<3>();
    Fill<4>();
  }
  template <int NR>
  void Fill() {
    fn[NR - 1][0] = &TileEntry<NR, 1, W, I, PF>;
    fn[NR - 1][1] = &TileEntry<NR, 2, W, I, PF>;
    fn[NR - 1][2] = &TileEntry<NR, 3, W, I, PF>;
    fn[NR - 1][3] = &TileEntry<NR, 4, W, I, PF>;
  }
};

class CpuKernels : public Kernels {
 public:
  CpuKernels(int threads, Isa isa) : pool_(std::max(1, threads)), isa_(isa) {}

  void MatMul(const float* x, int64_t rows, const Matrix& w, float* y) override {
    const int64_t N = w.rows, K = w.cols;
    const size_t wbytes = w.dtype == DType::kBF16 ? 2 : w.dtype == DType::kI8 ? 1 : 4;
    const bool int8 = w.dtype == DType::kI8;
    const float* scale = int8 ? w.scale.data() : nullptr;
    const int max_n = isa_ == Isa::kAvx2 ? 2 : 4;
    const int max_t = isa_ == Isa::kAvx2 ? 2 : 4;
    const TileFn(*table)[4] = Lookup(w.dtype, false);
    const TileFn(*first)[4] = Lookup(w.dtype, true);  // the first row tile over a weight tile prefetches the next
    // Split the output columns into chunks of whole tiles, a few per thread.
    const int64_t tiles = (N + max_n - 1) / max_n;
    const int64_t chunks = std::min<int64_t>(tiles, static_cast<int64_t>(pool_.num_threads()) * 4);
    const uint8_t* wdata = w.data.data();
    auto run = [&](int64_t c) {
      const int64_t n0 = tiles * c / chunks * max_n;
      const int64_t n1 = std::min<int64_t>(N, tiles * (c + 1) / chunks * max_n);
      constexpr int64_t kRowBlock = 64;  // rows of x kept hot in cache while the chunk's weights stream
      for (int64_t t0 = 0; t0 < rows; t0 += kRowBlock) {
        const int64_t t1 = std::min(rows, t0 + kRowBlock);
        for (int64_t n = n0; n < n1; n += max_n) {
          const int nr = static_cast<int>(std::min<int64_t>(max_n, n1 - n));
          const void* wp = wdata + static_cast<size_t>(n * K) * wbytes;
          for (int64_t t = t0; t < t1; t += max_t) {
            const int tr = static_cast<int>(std::min<int64_t>(max_t, t1 - t));
            // With few rows every pass prefetches (memory-bound); with many only the
            // first (compute-bound: prefetches would take load slots).
            const bool pf = (rows <= 16 || t == t0) && n + 2 * max_n <= n1;
            (pf ? first : table)[nr - 1][tr - 1](x + t * K, K, wp, y + t * N + n, N);
            if (int8) {  // y = scale[n] * dot(x, q_n): one rounding after the dot, as every path
              for (int64_t tt = t; tt < t + tr; ++tt) {
                for (int64_t nn = n; nn < n + nr; ++nn) y[tt * N + nn] *= scale[nn];
              }
            }
          }
        }
      }
    };
    if (chunks <= 1 || pool_.num_threads() == 1) {
      for (int64_t c = 0; c < chunks; ++c) run(c);
    } else {
      pool_.ParallelFor(0, chunks, run);
    }
  }

  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) override {
    if (n <= 0) return;
    const int64_t chunks = std::min<int64_t>(n, static_cast<int64_t>(pool_.num_threads()) * 4);
    if (chunks <= 1 || pool_.num_threads() == 1) return fn(0, n);
    pool_.ParallelFor(0, chunks, [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); });
  }

  int threads() const override { return pool_.num_threads(); }
  std::string name() const override {
    return absl::StrCat("cpu ", isa_ == Isa::kAvx512 ? "avx512" : isa_ == Isa::kAvx2 ? "avx2" : "portable", " x",
                        pool_.num_threads(), " threads");
  }

 private:
  template <typename W, Isa I, bool PF>
  static const TileTable<W, I, PF>& Table() {
    static const TileTable<W, I, PF> t;
    return t;
  }
  template <typename W, bool PF>
  const TileFn (*ForIsa() const)[4] {
    switch (isa_) {
      case Isa::kAvx512: return Table<W, Isa::kAvx512, PF>().fn;
      case Isa::kAvx2: return Table<W, Isa::kAvx2, PF>().fn;
      default: return Table<W, Isa::kPortable, PF>().fn;
    }
  }
  template <bool PF>
  const TileFn (*LookupPf(DType dtype) const)[4] {
    if (dtype == DType::kBF16) return ForIsa<uint16_t, PF>();
    if (dtype == DType::kI8) return ForIsa<int8_t, PF>();
    return ForIsa<float, PF>();
  }
  const TileFn (*Lookup(DType dtype, bool prefetch) const)[4] {
    return prefetch ? LookupPf<true>(dtype) : LookupPf<false>(dtype);
  }

  ThreadPool pool_;
  Isa isa_;
};

Isa ParseIsa(const std::string& isa) {
  if (isa == "avx512") return Isa::kAvx512;
  if (isa == "avx2") return Isa::kAvx2;
  if (isa == "portable") return Isa::kPortable;
  return DetectIsa();
}

using DotFn = float (*)(const float*, const float*, int64_t);
DotFn BestDot() {
  switch (DetectIsa()) {
    case Isa::kAvx512: return &Dot512;
    case Isa::kAvx2: return &Dot256;
    default: return &DotPortable;
  }
}

void DotsWith(DotFn dot, const float* q, const float* const* rows, int64_t count, int64_t n, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = dot(q, rows[i], n);
}
void Dots256(const float* q, const float* const* rows, int64_t count, int64_t n, float* out) {
  DotsWith(&Dot256, q, rows, count, n, out);
}
void DotsPortable(const float* q, const float* const* rows, int64_t count, int64_t n, float* out) {
  DotsWith(&DotPortable, q, rows, count, n, out);
}
void AxpyPortable(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + a * x[i];
}

void WeightedSumPortable(const float* coef, const float* const* rows, int64_t count, int64_t n, float* out) {
  for (int64_t d = 0; d < n; ++d) out[d] = 0;
  for (int64_t j = 0; j < count; ++j) AxpyPortable(coef[j], rows[j], out, n);
}

using DotsFn = void (*)(const float*, const float* const*, int64_t, int64_t, float*);
using AxpyFn = void (*)(float, const float*, float*, int64_t);

}  // namespace

std::unique_ptr<Kernels> MakeCpuKernels(int threads, const std::string& isa) {
  Isa want = ParseIsa(isa);
  const Isa have = DetectIsa();
  if (want == Isa::kAvx512 && have != Isa::kAvx512) want = have;
  if (want == Isa::kAvx2 && have == Isa::kPortable) want = have;
  return std::make_unique<CpuKernels>(threads, want);
}

float Dot(const float* a, const float* b, int64_t n) {
  static const DotFn fn = BestDot();
  return fn(a, b, n);
}

void Dots(const float* q, const float* const* rows, int64_t count, int64_t n, float* out) {
  static const DotsFn fn = [] {
    switch (DetectIsa()) {
      case Isa::kAvx512: return &Dots512;
      case Isa::kAvx2: return &Dots256;
      default: return &DotsPortable;
    }
  }();
  fn(q, rows, count, n, out);
}

void WeightedSum(const float* coef, const float* const* rows, int64_t count, int64_t n, float* out) {
  static const DotsFn fn = DetectIsa() == Isa::kAvx512 ? &WeightedSum512 : &WeightedSumPortable;
  fn(coef, rows, count, n, out);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  static const AxpyFn fn = DetectIsa() == Isa::kAvx512 ? &Axpy512 : &AxpyPortable;
  fn(a, x, y, n);
}

}  // namespace flywheel::llm

#include "solver/min_plus.h"

#include <algorithm>
#include <limits>

namespace autoshard {

// The baseline x86-64 target (SSE2) cannot vectorise the select; the AVX2 clone can.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AUTOSHARD_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define AUTOSHARD_AVX2_CLONE
#endif

namespace {
/// Four doubles, one AVX2 register (two SSE2 ones on the baseline target): GCC's and Clang's
/// vector extension, so that the compare-and-select stays in lanes without -ffast-math.
/// Loaded from the double arrays by memcpy (an unaligned load): Clang keeps the vector's
/// 32-byte alignment through a typedef's aligned(8), and UBSan rejects a cast pointer's
/// misaligned load.  (No function takes or returns one: that would change the baseline
/// target's ABI; hence a statement expression.)
using V4 = double __attribute__((vector_size(32)));
constexpr double kInf = std::numeric_limits<double>::infinity();
#define AUTOSHARD_V4(p)                       \
  ({                                          \
    V4 v4_;                                   \
    __builtin_memcpy(&v4_, (p), sizeof(V4));  \
    v4_;                                      \
  })
}  // namespace

AUTOSHARD_AVX2_CLONE
void min_plus_into(double* __restrict out, const double* __restrict row, double x, int32_t n) {
  for (int32_t t = 0; t < n; ++t) out[t] = std::min(out[t], x + row[t]);
}

AUTOSHARD_AVX2_CLONE
double min_plus_dot3(double x, const double* __restrict r, const double* __restrict p, const double* __restrict q,
                     int32_t n) {
  const V4 xv = {x, x, x, x};
  V4 acc0 = {kInf, kInf, kInf, kInf}, acc1 = acc0;
  int32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const V4 v0 = xv + AUTOSHARD_V4(r + t) + AUTOSHARD_V4(p + t) - AUTOSHARD_V4(q + t);
    const V4 v1 = xv + AUTOSHARD_V4(r + t + 4) + AUTOSHARD_V4(p + t + 4) - AUTOSHARD_V4(q + t + 4);
    acc0 = v0 < acc0 ? v0 : acc0;
    acc1 = v1 < acc1 ? v1 : acc1;
  }
  double best = kInf;
  for (int j = 0; j < 4; ++j) best = std::min(best, std::min(acc0[j], acc1[j]));
  for (; t < n; ++t) best = std::min(best, x + r[t] + p[t] - q[t]);
  return best;
}

AUTOSHARD_AVX2_CLONE
bool all_at_most(const double* __restrict a, const double* __restrict b, int32_t n) {
  // Eight comparisons OR-ed in lanes, then one branch: the early exit of a plain loop waits on
  // every compare, and the test runs mostly on rows that are nearly equal.
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto over = (AUTOSHARD_V4(a + i) > AUTOSHARD_V4(b + i)) | (AUTOSHARD_V4(a + i + 4) > AUTOSHARD_V4(b + i + 4));
    if (over[0] | over[1] | over[2] | over[3]) return false;
  }
  for (; i < n; ++i)
    if (a[i] > b[i]) return false;
  return true;
}

#undef AUTOSHARD_V4

AUTOSHARD_AVX2_CLONE
void min_plus_row(double* __restrict row, double* __restrict arg, const double* __restrict onward, double x,
                  double q, int32_t n) {
  for (int32_t r = 0; r < n; ++r) {
    const double y = x + onward[r];
    const double old = row[r];
    const double a = arg[r];
    const bool take = y < old;
    row[r] = take ? y : old;
    arg[r] = take ? q : a;
  }
}

}  // namespace autoshard

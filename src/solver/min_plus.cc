#include "solver/min_plus.h"

namespace autoshard {

// The baseline x86-64 target (SSE2) cannot vectorise the select; the AVX2 clone can.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
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

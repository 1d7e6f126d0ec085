#include "pipeline/pipeline_choice.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace autoshard {

size_t fastest_fitting(const std::vector<double>& pre_step_us,
                       const std::function<AssembledFigures(size_t)>& assemble) {
  if (pre_step_us.empty()) throw std::invalid_argument("fastest_fitting: no candidate");
  std::vector<size_t> order(pre_step_us.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pre_step_us[a] < pre_step_us[b]; });
  size_t best = order.front();
  AssembledFigures best_fig;
  bool any = false;
  for (size_t i : order) {
    if (any && best_fig.fits && pre_step_us[i] >= best_fig.step_us) break;
    const AssembledFigures f = assemble(i);
    const bool better = !any || (f.fits && !best_fig.fits) || (f.fits == best_fig.fits && f.step_us < best_fig.step_us);
    if (better) best = i, best_fig = f, any = true;
  }
  return best;
}

}  // namespace autoshard

#include "pipeline/stage_key.h"

namespace autoshard {

std::pair<int32_t, int32_t> canonical_range(StageKind kind, int32_t k, int32_t L) {
  switch (kind) {
    case kStageFirst: return {0, k};
    case kStageLast: return {L - k, L};
    case kStageMid: return {1, 1 + k};
    case kStageBoth: return {0, L};
  }
  return {0, k};
}

StageKind kind_of(int32_t s, int32_t S) {
  if (S == 1) return kStageBoth;
  return s == 0 ? kStageFirst : s == S - 1 ? kStageLast : kStageMid;
}

}  // namespace autoshard

#pragma once
/// Helpers shared by the planner's unit tests.
#include "mesh/hardware.h"
#include "models/models.h"

namespace autoshard::testing {

/// The preset every planner golden test plans on.
inline Hardware h100() { return *hardware_preset("h100"); }

/// A LLaMA small enough to plan in milliseconds whose activations outweigh its parameters:
/// `layers` layers of width 256, seq 512, 8 sequences per microbatch.
inline Graph small_llama(int64_t layers) {
  ModelOptions o{8, 512, layers, {}};
  o.hidden = 256;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 512;
  o.vocab = 512;
  return build_model("llama3-8b", o);
}

}  // namespace autoshard::testing

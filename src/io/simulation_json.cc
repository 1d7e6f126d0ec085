#include "io/simulation_json.h"

#include <cmath>

#include "io/plan_json.h"

namespace autoshard {


nlohmann::ordered_json simulation_summary_json(const StepSimulation& sim,
                                               const SimulationOptions& o) {
  nlohmann::ordered_json j;
  j["step_us"] = number_or_null(sim.step_us);
  j["additive_us"] = number_or_null(sim.additive_us);
  j["compute_us"] = number_or_null(sim.compute_us);
  j["comm_us"] = number_or_null(sim.comm_us);
  j["exposed_comm_us"] = number_or_null(sim.exposed_comm_us);
  // Communication hidden behind compute.
  j["overlap_us"] = number_or_null(sim.comm_us - sim.exposed_comm_us);
  j["model_flops"] = number_or_null(sim.model_flops);
  j["mfu"] = number_or_null(sim.mfu);
  j["peak_memory_bytes"] = sim.peak_memory_bytes;
  j["prefetch_peak_bytes"] = sim.prefetch_peak_bytes;
  j["layers"] = sim.num_layers;
  j["prefetch_layers"] = o.prefetch_layers;
  j["bucketing"] = std::string(bucketing_name(o.bucketing));
  nlohmann::ordered_json streams = nlohmann::ordered_json::array();
  for (size_t s = 0; s < sim.streams.size(); ++s) {
    double busy = 0;
    for (const SimEvent& e : sim.streams[s]) busy += e.end_us - e.start_us;
    streams.push_back({{"name", sim.stream_names[s]},
                       {"events", sim.streams[s].size()},
                       {"busy_us", number_or_null(busy)}});
  }
  j["streams"] = streams;
  return j;
}

}  // namespace autoshard

#include "report/trace.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

#include "cost/collective.h"
#include "cost/compute.h"
#include "io/placements_json.h"
#include "planner/sharding_optimizer.h"
#include "report/report_data.h"

namespace autoshard {

std::string chrome_trace_json(ShardingOptimizer& opt, const Plan& plan) {
  return chrome_trace_json(opt, plan, simulate_step(opt, plan));
}

std::string chrome_trace_json(ShardingOptimizer& opt, const Plan& plan, const StepSimulation& sim) {
  using Json = nlohmann::ordered_json;
  const Graph& g = opt.graph();
  std::map<int32_t, EdgeView> by_edge;
  for (EdgeView& e : plan_edges(opt, plan))
    if (e.cost_us > 0) by_edge.emplace(e.edge, std::move(e));
  Json events = Json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0},
                    {"args", {{"name", "autoshard " + g.name + " on " + opt.mesh().describe()}}}});
  for (size_t s = 0; s < sim.stream_names.size(); ++s) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", sim.stream_names[s]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"sort_index", s}}}});
  }
  for (size_t s = 0; s < sim.streams.size(); ++s)
    for (const SimEvent& e : sim.streams[s]) {
      const Node& n = g.node(e.node);
      const auto& np = plan.nodes[static_cast<size_t>(e.node)];
      Json args;
      args["node"] = n.name;
      if (!n.module_path.empty()) args["module"] = n.module_path;
      Json ev;
      if (e.stream == 0) {
        ev["name"] = std::string(aten_packet(n.op));
        ev["cat"] = e.recomputed ? std::string("recompute") : std::string(phase_name(n.phase));
        if (np) {
          args["output"] = output_spec_string(np->chosen);
          Json ins = Json::array();
          for (const ShardingSpec& sp : np->chosen.inputs) ins.push_back(sp.to_string());
          args["inputs"] = ins;
        }
      } else {
        ev["name"] = e.context_parallel ? std::string("context_parallel_kv")
                                        : std::string(collective_name(e.collective));
        ev["cat"] = e.prefetched ? "prefetch" : "comm";
        args["bytes"] = e.bytes;
        auto it = by_edge.find(e.edge);
        if (it != by_edge.end()) {
          const EdgeView& v = it->second;
          args["producer"] = g.node(v.producer).name;
          args["input"] = v.slot < 0 ? std::string("gradient") : std::to_string(v.slot);
          args["from"] = v.from;
          args["to"] = v.to;
          args["redistribution"] = v.collectives;
          args["step"] = e.step;
        }
      }
      ev["ph"] = "X";
      ev["ts"] = round_milli(e.start_us);
      ev["dur"] = round_milli(e.end_us - e.start_us);
      ev["pid"] = 0;
      ev["tid"] = s;
      ev["args"] = std::move(args);
      events.push_back(std::move(ev));
    }
  Json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"model", g.name}, {"mesh", opt.mesh().describe()},
                    {"step_us", round_milli(sim.step_us)}, {"exposed_comm_us", round_milli(sim.exposed_comm_us)},
                    {"additive_us", round_milli(sim.additive_us)},
                    // What a replay of the lowered step (autoshard.replay) needs to price its
                    // collectives on the same mesh with the same model.
                    {"mesh_shape", opt.mesh().shape()}, {"mesh_dim_names", opt.mesh().names()},
                    {"hardware", opt.mesh().hardware().name},
                    {"comm_model", std::string(comm_model_name(opt.options().comm_model))}};
  return j.dump() + "\n";
}

}  // namespace autoshard

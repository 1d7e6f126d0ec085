/// Writing side of io/state_codec.h.
#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

#include "io/state.pb.h"
#include "io/state_codec.h"

namespace autoshard {

namespace pb = autoshard::state;

uint32_t placement_code(const Placement& p) {
  uint32_t value = 0;
  if (p.is_shard()) {
    if (p.dim < 0) throw std::runtime_error(fmt::format("cannot save placement S({})", p.dim));
    value = static_cast<uint32_t>(p.dim);
    // A strided shard keeps its split factor above the dim's 6 bits (plain shards: 0, so older
    // files read the same); the code has 30 bits for the value.
    if (p.split_factor > 1) {
      if (p.dim >= 64 || p.split_factor - 1 >= (int64_t{1} << 24))
        throw std::runtime_error(fmt::format("cannot save placement {}", p.to_string()));
      value |= static_cast<uint32_t>(p.split_factor - 1) << 6;
    }
  } else if (p.is_partial()) {
    value = static_cast<uint32_t>(p.reduce);
  }
  return static_cast<uint32_t>(p.kind) | (value << 2);
}

namespace {

void put_meta(const TensorMeta& m, pb::TensorMeta* out) {
  for (int64_t d : m.shape) out->add_shape(d);
  out->set_dtype(static_cast<uint32_t>(m.dtype));
}

void put_graph(const Graph& g, pb::Graph* out) {
  out->set_name(g.name);
  out->mutable_nodes()->Reserve(static_cast<int>(g.nodes.size()));
  for (const Node& n : g.nodes) {
    pb::Node* x = out->add_nodes();
    x->set_name(n.name);
    x->set_kind(static_cast<uint32_t>(n.kind));
    x->set_op(n.op);
    x->set_phase(static_cast<uint32_t>(n.phase));
    for (const TensorRef& r : n.inputs) {
      x->add_input_node(r.node);
      x->add_input_output(r.output);
    }
    for (const TensorMeta& m : n.outputs) put_meta(m, x->add_outputs());
    for (const auto& [key, value] : n.attrs) {
      pb::Attr* a = x->add_attrs();
      a->set_key(key);
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) a->set_b(v);
            else if constexpr (std::is_same_v<T, int64_t>) a->set_i(v);
            else if constexpr (std::is_same_v<T, double>) a->set_d(v);
            else if constexpr (std::is_same_v<T, std::string>) a->set_s(v);
            else  // set the list even when empty (an empty dim list is still a value)
              for (pb::IntList* l = a->mutable_ints(); int64_t e : v) l->add_values(e);
          },
          value);
    }
    x->set_module_path(n.module_path);
    x->set_source(n.source);
  }
  for (const GradPair& gp : g.grad_pairs) {
    pb::GradPair* x = out->add_grad_pairs();
    x->set_param(gp.param);
    x->mutable_grad()->set_node(gp.grad.node);
    x->mutable_grad()->set_output(gp.grad.output);
  }
  if (g.loss) {
    out->mutable_loss()->set_node(g.loss->node);
    out->mutable_loss()->set_output(g.loss->output);
  }
  for (NodeIdx t : g.tangents) out->add_tangents(t);
  for (const EagerIsland& island : g.islands) {
    pb::EagerIsland* x = out->add_islands();
    x->set_module(island.module);
    for (const std::string& s : island.sources) x->add_sources(s);
  }
}

void put_mesh(const Mesh& m, pb::Mesh* out) {
  for (MeshDimIdx i = 0; i < m.ndim(); ++i) {
    const MeshDim& d = m.dim(i);
    pb::MeshDim* x = out->add_dims();
    x->set_name(d.name);
    x->set_size(d.size);
    x->set_inter_node(d.inter_node);
    x->set_busbw_gbps(d.busbw_gbps);
    x->set_latency_us(d.latency_us);
  }
  const Hardware& h = m.hardware();
  pb::Hardware* x = out->mutable_hardware();
  x->set_name(h.name);
  x->set_peak_bf16_tflops(h.peak_bf16_tflops);
  x->set_peak_fp32_tflops(h.peak_fp32_tflops);
  x->set_hbm_gbps(h.hbm_gbps);
  x->set_memory_bytes(h.memory_bytes);
  x->set_nvlink_gbps(h.nvlink_gbps);
  x->set_intra_busbw_gbps(h.intra_busbw_gbps);
  x->set_inter_busbw_gbps(h.inter_busbw_gbps);
  x->set_intra_latency_us(h.intra_latency_us);
  x->set_inter_latency_us(h.inter_latency_us);
  x->set_base_latency_us(h.base_latency_us);
  x->set_gpus_per_node(h.gpus_per_node);
  x->set_efficiency(h.efficiency);
  x->set_launch_floor_us(h.launch_floor_us);
  x->set_peak_fp8_tflops(h.peak_fp8_tflops);
  x->set_compile_memory_speedup(h.compile_memory_speedup);
  x->set_float8_linear(h.kernels.float8_linear);
  x->set_compiled(h.kernels.compiled);
  out->set_backend(static_cast<uint32_t>(m.backend()));
}

void put_options(const PlannerOptions& o, pb::Options* out) {
  out->set_comm_model(static_cast<uint32_t>(o.comm_model));
  out->set_memory_limit_bytes(o.memory_limit_bytes);
  out->set_time_limit_s(o.time_limit_s);
  out->set_mip_gap(o.mip_gap);
  // The thread count is left out (stored as 0): it is the machine's, not the problem's, and
  // the same plan solved with 1 or 2 threads must give the same bytes (issue 14).
  out->set_skip_fully_replicated(o.skip_fully_replicated);
  out->set_cluster(o.cluster);
  out->set_require_divisible(o.require_divisible);
  out->set_optimizer_kind(static_cast<uint32_t>(o.optimizer.kind));
  out->set_sgd_momentum(o.optimizer.sgd_momentum);
  out->set_run_checks(o.run_checks);
  // preload_solution / ilp_solution_file are not saved: a path from a file someone else wrote
  // must never make a later solve write there.
  out->set_recompute(static_cast<uint32_t>(o.recompute));
  out->set_overlap(o.overlap);
  out->set_overlap_discount(o.overlap_discount);
  out->set_objective(o.objective == Objective::kOverlap ? 1 : 0);
  out->set_no_context_parallel(!o.context_parallel);
  out->set_shard_orders(o.shard_orders);
}

void put_placements(const std::vector<Placement>& p, google::protobuf::RepeatedField<uint32_t>* out) {
  for (const Placement& x : p) out->Add(placement_code(x));
}

void put_constraints(const std::vector<Constraint>& cs,
                     google::protobuf::RepeatedPtrField<pb::Constraint>* out) {
  for (const Constraint& c : cs) {
    pb::Constraint* x = out->Add();
    x->set_name(c.name);
    x->set_kind(static_cast<uint32_t>(c.kind));
    x->set_node(c.node);
    put_placements(c.output, x->mutable_output());
    x->set_has_inputs(c.inputs.has_value());
    if (c.inputs)
      for (const auto& in : *c.inputs) put_placements(in, x->add_inputs()->mutable_codes());
    x->set_low(c.low);
    x->set_high(c.high);
  }
}

/// Default meta of a spec: the node's output meta, or the producer's meta of that input.
const TensorMeta* default_meta(const Graph& g, NodeIdx gi, bool output, size_t k) {
  if (gi < 0 || gi >= g.size()) return nullptr;
  const Node& n = g.node(gi);
  if (output) return k < n.outputs.size() ? &n.outputs[k] : nullptr;
  if (k >= n.inputs.size()) return nullptr;
  const TensorRef& r = n.inputs[k];
  if (r.node < 0 || r.node >= g.size() || r.output < 0 ||
      static_cast<size_t>(r.output) >= g.node(r.node).outputs.size())
    return nullptr;
  return &g.meta(r);
}

void put_strategies(const Graph& g, NodeIdx gi, const Strategy* begin, const Strategy* end,
                    int32_t ndim, pb::StrategyList* out) {
  uint32_t spec = 0;
  auto put_spec = [&](const ShardingSpec& s, bool output, size_t k) {
    if (static_cast<int32_t>(s.placements.size()) != ndim)
      throw std::runtime_error(fmt::format("cannot save a spec with {} placements on a {}-D mesh",
                                           s.placements.size(), ndim));
    put_placements(s.placements, out->mutable_codes());
    const TensorMeta* d = default_meta(g, gi, output, k);
    if (!d || !(*d == s.meta)) {
      pb::MetaOverride* m = out->add_metas();
      m->set_spec(spec);
      put_meta(s.meta, m->mutable_meta());
    }
    ++spec;
  };
  for (const Strategy* s = begin; s != end; ++s) {
    out->add_out_count(static_cast<uint32_t>(s->outputs.size()));
    out->add_in_count(static_cast<uint32_t>(s->inputs.size()));
    for (size_t k = 0; k < s->outputs.size(); ++k) put_spec(s->outputs[k], true, k);
    for (size_t k = 0; k < s->inputs.size(); ++k) put_spec(s->inputs[k], false, k);
    if (s->cp.active()) {
      pb::CpTag* t = out->add_cp();
      t->set_strategy(static_cast<uint32_t>(s - begin));
      t->set_mesh_dim(static_cast<uint32_t>(s->cp.mesh_dim));
      t->set_kind(static_cast<uint32_t>(s->cp.kind));
      t->set_load_balance(s->cp.load_balance);
    }
  }
}

void put_problem(const Graph& g, const Mesh& mesh, const BuiltProblem& bp, pb::BuiltProblem* out,
                 size_t* matrices_stored) {
  const Problem& p = bp.problem;
  pb::Problem* xp = out->mutable_problem();
  xp->set_name(p.name);
  xp->set_usage_limit(p.usage_limit);
  xp->mutable_nodes()->Reserve(static_cast<int>(p.nodes.size()));
  for (const ProblemNode& n : p.nodes) {
    pb::ProblemNode* x = xp->add_nodes();
    x->set_name(n.name);
    x->mutable_costs()->Add(n.costs.begin(), n.costs.end());
    x->mutable_usages()->Add(n.usages.begin(), n.usages.end());
    x->set_start(n.start);
    x->set_end(n.end);
  }
  for (const ProblemEdge& e : p.edges) {
    xp->add_edge_u(e.u);
    xp->add_edge_v(e.v);
    xp->add_edge_costs()->mutable_costs()->Add(e.costs.begin(), e.costs.end());
  }
  // Shared matrices once: by shared_ptr identity, in order of first use.
  std::unordered_map<const std::vector<Cost>*, uint32_t> index;
  for (const BuiltProblem::Edge& e : bp.edges) {
    if (!e.costs) throw std::runtime_error("cannot save an edge without a cost matrix");
    auto [it, fresh] = index.try_emplace(e.costs.get(), static_cast<uint32_t>(out->matrices_size()));
    if (fresh) out->add_matrices()->mutable_costs()->Add(e.costs->begin(), e.costs->end());
    out->add_edge_u(e.u);
    out->add_edge_v(e.v);
    out->add_edge_matrix(it->second);
  }
  if (matrices_stored) *matrices_stored = static_cast<size_t>(out->matrices_size());
  for (const BuiltProblem::EdgeOrigin& o : bp.edge_origin) {
    out->add_origin_consumer(o.consumer);
    out->add_origin_slot(o.slot);
    out->add_origin_producer_node(o.producer.node);
    out->add_origin_producer_output(o.producer.output);
  }
  out->mutable_graph_node()->Add(bp.graph_node.begin(), bp.graph_node.end());
  out->mutable_pnode()->Add(bp.pnode.begin(), bp.pnode.end());
  // Distinct strategy lists once (repeated layers and shadow nodes share them).
  std::unordered_map<std::string, uint32_t> lists;
  for (size_t v = 0; v < bp.strategies.size(); ++v) {
    const auto& s = bp.strategies[v];
    NodeIdx gi = v < bp.graph_node.size() ? bp.graph_node[v] : kNoNode;
    pb::StrategyList list;
    put_strategies(g, gi, s.vec().data(), s.vec().data() + s.size(), mesh.ndim(), &list);
    std::string key = list.SerializeAsString();
    auto [it, fresh] = lists.try_emplace(std::move(key), static_cast<uint32_t>(out->strategy_lists_size()));
    if (fresh) *out->add_strategy_lists() = std::move(list);
    out->add_node_strategy_list(it->second);
  }
  for (const std::string& op : bp.fallback_ops) out->add_fallback_ops(op);
  out->set_memory_limit(bp.memory_limit);
  out->set_has_optimizer(bp.has_optimizer);
  for (const BuiltProblem::RecomputeRegion& r : bp.recompute_regions) {
    pb::RecomputeRegion* x = out->add_recompute_regions();
    x->set_layer(r.layer);
    x->set_region(r.region);
    x->set_decision(r.decision);
    x->set_first_op(r.first_op);
    for (RecomputePolicy m : r.modes) x->add_modes(static_cast<uint32_t>(m));
  }
  for (size_t v = 0; v < bp.op_comm.size(); ++v) {
    if (!bp.op_comm[v]) continue;
    pb::OpComm* x = out->add_op_comm();
    x->set_node(static_cast<uint32_t>(v));
    x->mutable_us()->Add(bp.op_comm[v]->begin(), bp.op_comm[v]->end());
  }
  for (const BuiltProblem::RecomputeAux& a : bp.recompute_aux) {
    pb::RecomputeAux* x = out->add_recompute_aux();
    x->set_node(a.node);
    x->set_owner(a.owner);
    x->set_region(a.region);
    x->set_role(static_cast<uint32_t>(a.role));
  }
}

void put_plan(const Graph& g, const Mesh& mesh, const Plan& plan, pb::Plan* out) {
  out->set_plan_nodes(static_cast<int32_t>(plan.nodes.size()));
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& np = plan.nodes[i];
    if (!np) continue;
    pb::NodePlan* x = out->add_nodes();
    x->set_index(static_cast<int32_t>(i));
    x->set_node(np->node);
    x->set_strategy(np->strategy);
    put_strategies(g, static_cast<NodeIdx>(i), &np->chosen, &np->chosen + 1, mesh.ndim(), x->mutable_chosen());
    x->set_compute_us(np->compute_us);
    x->set_comm_us(np->comm_us);
  }
  out->set_status(static_cast<uint32_t>(plan.status));
  out->set_objective_us(plan.objective_us);
  out->set_lower_bound_us(plan.lower_bound_us);
  out->set_gap(plan.gap);
  out->set_compute_us(plan.compute_us);
  out->set_comm_us(plan.comm_us);
  out->set_peak_memory_bytes(plan.peak_memory_bytes);
  out->set_memory_limit_bytes(plan.memory_limit_bytes);
  out->set_min_peak_memory_bytes(plan.min_peak_memory_bytes);
  if (plan.min_peak_lower_bound_bytes >= 0)
    out->set_min_peak_lower_bound_bytes(plan.min_peak_lower_bound_bytes);
  out->set_graph_nodes(plan.graph_nodes);
  out->set_problem_nodes(plan.problem_nodes);
  out->set_problem_edges(plan.problem_edges);
  out->set_alpa_variables(plan.alpa_variables);
  out->set_clustered_nodes(plan.clustered_nodes);
  out->set_reduced_nodes(plan.reduced_nodes);
  out->set_reduced_edges(plan.reduced_edges);
  out->set_mip_variables(plan.mip_variables);
  out->set_layer_clusters(plan.layer_clusters);
  // Plan::phase_seconds (wall-clock timings) is left out: equal inputs must give equal bytes
  // (issue 14), and a loaded plan did not take those seconds anyway.
  for (const std::string& w : plan.warnings) out->add_warnings(w);
  out->set_checked(plan.checked);
  out->set_has_solution(plan.has_solution);
  out->set_recompute_us(plan.recompute_us);
  for (const std::string& n : plan.recomputed_nodes) out->add_recomputed_nodes(n);
  out->set_additive_us(plan.additive_us);
  out->set_overlapped_us(plan.overlapped_us);
  out->set_objective_solves(plan.objective_solves);
  out->set_overlap_aware(plan.overlap_aware);
  for (const auto& [layer, mode] : plan.layer_recompute) {
    pb::LayerRecompute* x = out->add_layer_recompute();
    x->set_layer(layer);
    x->set_mode(mode);
  }
}

std::string serialize(const google::protobuf::MessageLite& m) {
  std::string out;
  // Deterministic: equal inputs give equal bytes (the schema has no maps, so this holds).
  if (!m.SerializeToString(&out)) throw std::runtime_error("cannot serialize the state (over 2 GiB?)");
  return out;
}

}  // namespace

std::string encode_state(const StateRef& s, size_t* matrices_stored) {
  pb::State x;
  x.set_writer_version(std::string(s.writer_version));
  put_graph(*s.graph, x.mutable_graph());
  put_mesh(*s.mesh, x.mutable_mesh());
  put_options(*s.options, x.mutable_options());
  put_constraints(*s.constraints, x.mutable_constraints());
  if (matrices_stored) *matrices_stored = 0;
  if (s.problem) put_problem(*s.graph, *s.mesh, *s.problem, x.mutable_problem(), matrices_stored);
  if (s.solution) put_plan(*s.graph, *s.mesh, *s.solution, x.mutable_solution());
  if (s.solution_choice) x.mutable_solution_choice()->Add(s.solution_choice->begin(), s.solution_choice->end());
  return serialize(x);
}

std::string encode_replay(const ReplayParts& r) {
  pb::Replay x;
  x.set_writer_version(r.writer_version);
  put_graph(r.graph, x.mutable_graph());
  put_mesh(r.mesh, x.mutable_mesh());
  put_options(r.options, x.mutable_options());
  put_constraints(r.constraints, x.mutable_constraints());
  return serialize(x);
}

}  // namespace autoshard

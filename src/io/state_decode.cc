/// Reading side of io/state_codec.h (see io/state_decoder.h): everything but the built problem,
/// which is in state_decode_problem.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "io/state_decoder.h"
#include "ir/file_util.h"
#include "planner/twin_views.h"

namespace autoshard {

void Decoder::fail(const std::string& where, const std::string& why) const {
  throw std::runtime_error(one_line(fmt::format("{}: {}: {}", origin_, where, why)));
}

TensorMeta Decoder::meta(const pb::TensorMeta& x, const std::string& where) const {
  TensorMeta m;
  if (x.shape_size() > kMaxRank) fail(where, fmt::format("rank {} is too large", x.shape_size()));
  if (x.dtype() > static_cast<uint32_t>(kLastDType))
    fail(where + ".dtype", fmt::format("unknown dtype {}", x.dtype()));
  m.dtype = static_cast<DType>(x.dtype());
  int64_t numel = 1;
  for (int k = 0; k < x.shape_size(); ++k) {
    int64_t d = x.shape(k);
    if (d < 0 || d > kMaxDim) fail(fmt::format("{}.shape[{}]", where, k), fmt::format("dimension {} out of range", d));
    if (d > 0 && numel > kMaxNumel / d) fail(where, "tensor too large");
    numel *= d;
    m.shape.push_back(d);
  }
  return m;
}

Graph Decoder::graph(const pb::Graph& x) const {
  Graph g;
  g.name = x.name();
  g.nodes.reserve(static_cast<size_t>(x.nodes_size()));
  for (int i = 0; i < x.nodes_size(); ++i) {
    const pb::Node& xn = x.nodes(i);
    auto where = [&] { return fmt::format("graph.nodes[{}] ('{}')", i, xn.name()); };
    Node n;
    n.name = xn.name();
    if (xn.kind() > static_cast<uint32_t>(NodeKind::kOutput)) fail(where() + ".kind", fmt::format("unknown kind {}", xn.kind()));
    n.kind = static_cast<NodeKind>(xn.kind());
    n.op = xn.op();
    if (xn.phase() > static_cast<uint32_t>(Phase::kOptimizer)) fail(where() + ".phase", fmt::format("unknown phase {}", xn.phase()));
    n.phase = static_cast<Phase>(xn.phase());
    if (xn.input_node_size() != xn.input_output_size())
      fail(where(), fmt::format("{} input nodes but {} input outputs", xn.input_node_size(), xn.input_output_size()));
    for (int k = 0; k < xn.input_node_size(); ++k) {
      TensorRef r{xn.input_node(k), xn.input_output(k)};
      // validate() below checks the references; check the range here so that messages
      // name the field.
      if (r.node < 0 || r.node >= i) fail(fmt::format("{}.inputs[{}]", where(), k), fmt::format("refers to node {} which is not earlier", r.node));
      if (r.output < 0 || r.output >= static_cast<int32_t>(g.nodes[static_cast<size_t>(r.node)].outputs.size()))
        fail(fmt::format("{}.inputs[{}]", where(), k), fmt::format("refers to missing output {} of node {}", r.output, r.node));
      n.inputs.push_back(r);
    }
    for (int k = 0; k < xn.outputs_size(); ++k) n.outputs.push_back(meta(xn.outputs(k), fmt::format("{}.outputs[{}]", where(), k)));
    for (int k = 0; k < xn.attrs_size(); ++k) {
      const pb::Attr& a = xn.attrs(k);
      AttrValue v;
      switch (a.value_case()) {
        case pb::Attr::kB: v = a.b(); break;
        case pb::Attr::kI: v = a.i(); break;
        case pb::Attr::kD: v = a.d(); break;
        case pb::Attr::kS: v = a.s(); break;
        case pb::Attr::kInts: v = std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()); break;
        default: fail(fmt::format("{}.attrs[{}] ('{}')", where(), k, a.key()), "attribute without a value");
      }
      if (!n.attrs.emplace(a.key(), std::move(v)).second)
        fail(fmt::format("{}.attrs[{}]", where(), k), fmt::format("duplicate attribute '{}'", a.key()));
    }
    n.module_path = xn.module_path();
    n.source = xn.source();
    g.nodes.push_back(std::move(n));
  }
  for (int k = 0; k < x.grad_pairs_size(); ++k)
    g.grad_pairs.push_back({x.grad_pairs(k).param(), {x.grad_pairs(k).grad().node(), x.grad_pairs(k).grad().output()}});
  if (x.has_loss()) g.loss = TensorRef{x.loss().node(), x.loss().output()};
  g.tangents.assign(x.tangents().begin(), x.tangents().end());
  for (const pb::EagerIsland& xi : x.islands())
    g.islands.push_back({xi.module(), {xi.sources().begin(), xi.sources().end()}});
  std::string err = g.validate();
  if (!err.empty()) fail("graph", err);
  return g;
}

Mesh Decoder::mesh(const pb::Mesh& x) const {
  const pb::Hardware& xh = x.hardware();
  Hardware h;
  h.name = xh.name();
  h.peak_bf16_tflops = xh.peak_bf16_tflops();
  h.peak_fp32_tflops = xh.peak_fp32_tflops();
  h.hbm_gbps = xh.hbm_gbps();
  h.memory_bytes = xh.memory_bytes();
  h.nvlink_gbps = xh.nvlink_gbps();
  h.intra_busbw_gbps = xh.intra_busbw_gbps();
  h.inter_busbw_gbps = xh.inter_busbw_gbps();
  h.intra_latency_us = xh.intra_latency_us();
  h.inter_latency_us = xh.inter_latency_us();
  h.base_latency_us = xh.base_latency_us();
  h.gpus_per_node = xh.gpus_per_node();
  h.efficiency = xh.efficiency();
  h.launch_floor_us = xh.launch_floor_us();
  h.peak_fp8_tflops = xh.peak_fp8_tflops();
  if (xh.compile_memory_speedup() > 0) h.compile_memory_speedup = xh.compile_memory_speedup();
  h.kernels.float8_linear = xh.float8_linear();
  h.kernels.compiled = xh.compiled();
  if (h.gpus_per_node < 1) fail("mesh.hardware.gpus_per_node", fmt::format("expected >= 1, got {}", h.gpus_per_node));
  if (h.memory_bytes < 0) fail("mesh.hardware.memory_bytes", "negative");
  if (x.backend() > static_cast<uint32_t>(CommBackend::kGloo)) fail("mesh.backend", fmt::format("unknown backend {}", x.backend()));
  if (x.dims_size() == 0) fail("mesh.dims", "a mesh needs at least one dim");
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  int64_t devices = 1;
  for (int i = 0; i < x.dims_size(); ++i) {
    int64_t s = x.dims(i).size();
    if (s < 1 || s > kMaxMeshDevices || devices * s > kMaxMeshDevices)
      fail(fmt::format("mesh.dims[{}].size", i), fmt::format("size {} out of range", s));
    devices *= s;
    shape.push_back(s);
    names.push_back(x.dims(i).name());
  }
  Mesh m;
  try {
    m = Mesh(shape, names, h, static_cast<CommBackend>(x.backend()));
  } catch (const std::exception& e) {
    fail("mesh", e.what());
  }
  // The stored figures win over the derived ones (a mesh may have been tuned by hand).
  for (int i = 0; i < x.dims_size(); ++i) {
    MeshDim& d = m.dim(i);
    d.inter_node = x.dims(i).inter_node();
    d.busbw_gbps = x.dims(i).busbw_gbps();
    d.latency_us = x.dims(i).latency_us();
  }
  return m;
}

PlannerOptions Decoder::options(const pb::Options& x) const {
  PlannerOptions o;
  if (x.comm_model() > static_cast<uint32_t>(CommModel::kDtensor)) fail("options.comm_model", fmt::format("unknown comm model {}", x.comm_model()));
  o.comm_model = static_cast<CommModel>(x.comm_model());
  o.memory_limit_bytes = x.memory_limit_bytes();
  if (o.memory_limit_bytes < -1) fail("options.memory_limit_bytes", fmt::format("{} is not a budget", o.memory_limit_bytes));
  o.time_limit_s = x.time_limit_s();
  if (!(o.time_limit_s >= 0)) fail("options.time_limit_s", "expected >= 0");
  o.mip_gap = x.mip_gap();
  if (!(o.mip_gap >= 0)) fail("options.mip_gap", "expected >= 0");
  o.threads = x.threads() == 0 ? 1 : x.threads();  // 0: not recorded (state_encode.cc)
  if (o.threads < 0 || o.threads > 4096) fail("options.threads", fmt::format("{} out of range", o.threads));
  o.skip_fully_replicated = x.skip_fully_replicated();
  o.cluster = x.cluster();
  o.require_divisible = x.require_divisible();
  if (x.optimizer_kind() > static_cast<uint32_t>(OptimizerConfig::kNone)) fail("options.optimizer_kind", fmt::format("unknown optimizer {}", x.optimizer_kind()));
  o.optimizer.kind = static_cast<OptimizerConfig::Kind>(x.optimizer_kind());
  o.optimizer.sgd_momentum = x.sgd_momentum();
  o.run_checks = x.run_checks();
  // preload_solution / ilp_solution_file stay off: a file must not choose where a later
  // solve writes (see state_encode.cc).
  if (x.recompute() > static_cast<uint32_t>(RecomputePolicy::kSelectiveOp)) fail("options.recompute", fmt::format("unknown policy {}", x.recompute()));
  o.recompute = static_cast<RecomputePolicy>(x.recompute());
  o.overlap = x.overlap();
  o.overlap_discount = x.overlap_discount();
  if (!(o.overlap_discount >= 0 && o.overlap_discount <= 1)) fail("options.overlap_discount", "expected a value in [0, 1]");
  if (x.objective() > 1) fail("options.objective", fmt::format("unknown objective {}", x.objective()));
  o.objective = x.objective() == 1 ? Objective::kOverlap : Objective::kAdditive;
  o.context_parallel = !x.no_context_parallel();
  o.shard_orders = x.shard_orders();
  return o;
}

template <class Where>
Placement Decoder::placement(uint32_t code, const Where& where) const {
  uint32_t kind = code & 3, value = code >> 2;
  if (kind == static_cast<uint32_t>(Placement::Kind::kReplicate)) {
    if (value != 0) fail(where(), fmt::format("bad placement code {}", code));
    return Placement::replicate();
  }
  if (kind == static_cast<uint32_t>(Placement::Kind::kShard)) {
    // Low 6 bits: the dim; above them: split factor - 1 (state_encode.cc).
    static_assert(kMaxRank == 64);
    const uint32_t dim = value & 63, sf = (value >> 6) + 1;
    return Placement::strided_shard(static_cast<int32_t>(dim), sf);
  }
  if (kind == static_cast<uint32_t>(Placement::Kind::kPartial) && value <= static_cast<uint32_t>(ReduceOp::kMin))
    return Placement::partial(static_cast<ReduceOp>(value));
  fail(where(), fmt::format("bad placement code {}", code));
}

std::vector<Placement> Decoder::placements(const google::protobuf::RepeatedField<uint32_t>& codes, const std::string& where) const {
  std::vector<Placement> out;
  out.reserve(static_cast<size_t>(codes.size()));
  for (int k = 0; k < codes.size(); ++k)
    out.push_back(placement(codes.Get(k), [&] { return fmt::format("{}[{}]", where, k); }));
  return out;
}

std::vector<Constraint> Decoder::constraints(const google::protobuf::RepeatedPtrField<pb::Constraint>& xs, const Graph& g, const Mesh& mesh) const {
  std::vector<Constraint> out;
  for (int i = 0; i < xs.size(); ++i) {
    const pb::Constraint& x = xs.Get(i);
    const std::string where = fmt::format("constraints[{}] ('{}')", i, x.name());
    Constraint c;
    c.name = x.name();
    if (c.name.empty()) fail(where + ".name", "empty constraint name");
    for (const Constraint& o : out)
      if (o.name == c.name) fail(where + ".name", "duplicate constraint name");
    if (x.kind() > static_cast<uint32_t>(Constraint::Kind::kParameterMemory)) fail(where + ".kind", fmt::format("unknown kind {}", x.kind()));
    c.kind = static_cast<Constraint::Kind>(x.kind());
    c.node = x.node();
    c.output = placements(x.output(), where + ".output");
    if (x.has_inputs()) {
      c.inputs.emplace();
      for (int k = 0; k < x.inputs_size(); ++k)
        c.inputs->push_back(placements(x.inputs(k).codes(), fmt::format("{}.inputs[{}]", where, k)));
    } else if (x.inputs_size() > 0) {
      fail(where + ".inputs", "inputs given but has_inputs is false");
    }
    c.low = x.low();
    c.high = x.high();
    if (c.kind == Constraint::Kind::kPin) {
      if (!g.find(c.node)) fail(where + ".node", fmt::format("no node named '{}'", c.node));
      if (static_cast<int32_t>(c.output.size()) != mesh.ndim())
        fail(where + ".output", fmt::format("{} placements for a {}-D mesh", c.output.size(), mesh.ndim()));
      if (c.inputs)
        for (size_t k = 0; k < c.inputs->size(); ++k)
          if (!(*c.inputs)[k].empty() && static_cast<int32_t>((*c.inputs)[k].size()) != mesh.ndim())
            fail(fmt::format("{}.inputs[{}]", where, k), fmt::format("{} placements for a {}-D mesh", (*c.inputs)[k].size(), mesh.ndim()));
    } else if (!(c.low >= 0 && c.high >= c.low)) {
      fail(where, fmt::format("need 0 <= low <= high, got [{}, {}]", c.low, c.high));
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Strategy> Decoder::strategies(const pb::StrategyList& x, const Graph& g, NodeIdx gi, int32_t ndim,
                                           const std::string& where) const {
  const int n = x.out_count_size();
  if (x.in_count_size() != n) fail(where, fmt::format("{} output counts but {} input counts", n, x.in_count_size()));
  const Node* node = gi >= 0 && gi < g.size() ? &g.node(gi) : nullptr;
  uint64_t specs = 0;
  for (int s = 0; s < n; ++s) {
    const uint32_t no = x.out_count(s), ni = x.in_count(s);
    auto ok = [](uint32_t c, size_t have) { return c == 0 || c == have; };
    if (!node ? (no || ni) : !(ok(no, node->outputs.size()) && ok(ni, node->inputs.size())))
      fail(fmt::format("{}.strategy[{}]", where, s), fmt::format("{} outputs and {} inputs do not fit the node", no, ni));
    specs += no + ni;
  }
  if (static_cast<uint64_t>(x.codes_size()) != specs * static_cast<uint64_t>(ndim))
    fail(where + ".codes", fmt::format("{} placement codes, expected {}", x.codes_size(), specs * static_cast<uint64_t>(ndim)));
  std::vector<const pb::TensorMeta*> override(specs, nullptr);
  for (int k = 0; k < x.metas_size(); ++k) {
    uint32_t at = x.metas(k).spec();
    if (at >= specs || override[at]) fail(fmt::format("{}.metas[{}]", where, k), fmt::format("bad spec index {}", at));
    override[at] = &x.metas(k).meta();
  }
  std::vector<Strategy> out(static_cast<size_t>(n));
  int code = 0;
  uint32_t spec = 0;
  for (int s = 0; s < n; ++s) {
    auto fill = [&](std::vector<ShardingSpec>& v, uint32_t count, bool output) {
      for (uint32_t k = 0; k < count; ++k, ++spec) {
        const std::string_view side = output ? "output" : "input";
        ShardingSpec sp;
        if (override[spec]) sp.meta = meta(*override[spec], fmt::format("{}.metas[spec {}]", where, spec));
        else sp.meta = output ? node->outputs[k] : g.meta(node->inputs[k]);
        for (int32_t d = 0; d < ndim; ++d, ++code) {
          Placement p = placement(x.codes(code), [&] { return fmt::format("{}.codes[{}]", where, code); });
          if (p.is_shard() && p.dim >= sp.meta.rank())
            fail(fmt::format("{}.strategy[{}].{}[{}]", where, s, side, k),
                 fmt::format("S({}) of a rank-{} tensor", p.dim, sp.meta.rank()));
          sp.placements.push_back(p);
        }
        v.push_back(std::move(sp));
      }
    };
    fill(out[static_cast<size_t>(s)].outputs, x.out_count(s), true);
    fill(out[static_cast<size_t>(s)].inputs, x.in_count(s), false);
  }
  for (int k = 0; k < x.cp_size(); ++k) {
    const pb::CpTag& t = x.cp(k);
    const std::string at = fmt::format("{}.cp[{}]", where, k);
    if (t.strategy() >= static_cast<uint32_t>(n)) fail(at, fmt::format("strategy {} of {}", t.strategy(), n));
    if (t.mesh_dim() >= static_cast<uint32_t>(ndim)) fail(at, fmt::format("mesh dim {} of {}", t.mesh_dim(), ndim));
    if (t.kind() > static_cast<uint32_t>(CpKind::kAllGather)) fail(at, fmt::format("unknown kind {}", t.kind()));
    out[t.strategy()].cp = ContextParallel{static_cast<int32_t>(t.mesh_dim()), static_cast<CpKind>(t.kind()),
                                           t.load_balance()};
  }
  return out;
}

Plan Decoder::plan(const pb::Plan& x, const Graph& g, const Mesh& mesh) const {
  Plan plan;
  // A plan covers every graph node (or none, for a plan that was never filled in).
  if (x.plan_nodes() != g.size() && x.plan_nodes() != 0)
    fail("solution.plan_nodes", fmt::format("{} plan nodes for {} graph nodes", x.plan_nodes(), g.size()));
  plan.nodes.resize(static_cast<size_t>(x.plan_nodes()));
  for (int k = 0; k < x.nodes_size(); ++k) {
    const pb::NodePlan& xn = x.nodes(k);
    const std::string where = fmt::format("solution.nodes[{}]", k);
    int32_t i = xn.index();
    if (i < 0 || i >= x.plan_nodes() || plan.nodes[static_cast<size_t>(i)]) fail(where + ".index", fmt::format("bad or repeated node index {}", i));
    NodePlan np;
    np.node = xn.node();
    if (np.node != i) fail(where + ".node", fmt::format("{} differs from its index {}", np.node, i));
    np.strategy = xn.strategy();
    if (np.strategy < -1) fail(where + ".strategy", fmt::format("bad strategy index {}", np.strategy));
    auto chosen = strategies(xn.chosen(), g, i, mesh.ndim(), where + ".chosen");
    if (chosen.size() != 1) fail(where + ".chosen", fmt::format("{} strategies, expected one", chosen.size()));
    np.chosen = std::move(chosen[0]);
    np.compute_us = xn.compute_us();
    np.comm_us = xn.comm_us();
    plan.nodes[static_cast<size_t>(i)] = std::move(np);
  }
  if (x.status() > static_cast<uint32_t>(SolveStatus::kTimedOut)) fail("solution.status", fmt::format("unknown status {}", x.status()));
  plan.status = static_cast<SolveStatus>(x.status());
  plan.objective_us = x.objective_us();
  plan.lower_bound_us = x.lower_bound_us();
  plan.gap = x.gap();
  plan.compute_us = x.compute_us();
  plan.comm_us = x.comm_us();
  plan.peak_memory_bytes = x.peak_memory_bytes();
  plan.memory_limit_bytes = x.memory_limit_bytes();
  plan.min_peak_memory_bytes = x.min_peak_memory_bytes();
  plan.min_peak_lower_bound_bytes = x.has_min_peak_lower_bound_bytes() ? x.min_peak_lower_bound_bytes() : -1;
  plan.graph_nodes = x.graph_nodes();
  plan.problem_nodes = x.problem_nodes();
  plan.problem_edges = x.problem_edges();
  plan.alpa_variables = x.alpa_variables();
  plan.clustered_nodes = x.clustered_nodes();
  plan.reduced_nodes = x.reduced_nodes();
  plan.reduced_edges = x.reduced_edges();
  plan.mip_variables = x.mip_variables();
  plan.layer_clusters = x.layer_clusters();
  for (const pb::Phase& ph : x.phase_seconds()) plan.phase_seconds.emplace_back(ph.name(), ph.seconds());
  for (const std::string& w : x.warnings()) plan.warnings.push_back(w);
  plan.checked = x.checked();
  plan.has_solution = x.has_solution();
  plan.recompute_us = x.recompute_us();
  for (const std::string& n : x.recomputed_nodes()) plan.recomputed_nodes.push_back(n);
  plan.additive_us = x.has_additive_us() ? x.additive_us() : plan.objective_us;
  plan.overlapped_us = x.overlapped_us();
  plan.objective_solves = x.objective_solves();
  plan.overlap_aware = x.overlap_aware();
  for (const pb::LayerRecompute& l : x.layer_recompute()) plan.layer_recompute.emplace_back(l.layer(), l.mode());
  return plan;
}

namespace {

template <class Msg>
void parse(Msg& m, std::string_view payload, const Decoder& d) {
  if (payload.size() > static_cast<size_t>(std::numeric_limits<int>::max())) d.fail("payload", "too large to parse");
  if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    d.fail("payload", "the protobuf message does not parse (corrupted or not written by autoshard)");
}

}  // namespace

StateParts decode_state(std::string_view payload, std::string_view origin) {
  Decoder d(origin);
  pb::State x;
  parse(x, payload, d);
  StateParts s;
  s.writer_version = x.writer_version();
  s.graph = d.graph(x.graph());
  s.mesh = d.mesh(x.mesh());
  s.options = d.options(x.options());
  s.constraints = d.constraints(x.constraints(), s.graph, s.mesh);
  if (x.has_problem()) s.problem = d.problem(x.problem(), s.graph, s.mesh);
  if (x.has_solution()) s.solution = d.plan(x.solution(), s.graph, s.mesh);
  if (s.problem && s.solution) mark_twins(*s.problem, *s.solution);  // not stored: the ties say
  if (x.solution_choice_size() > 0) {
    if (!s.problem) d.fail("solution_choice", "an assignment without a problem");
    if (!s.solution) d.fail("solution_choice", "an assignment without a solution");
    const Problem& p = s.problem->problem;
    if (x.solution_choice_size() != p.num_nodes())
      d.fail("solution_choice", fmt::format("{} entries for {} problem nodes", x.solution_choice_size(), p.num_nodes()));
    for (int v = 0; v < x.solution_choice_size(); ++v) {
      StrategyIdx q = x.solution_choice(v);
      if (q < 0 || q >= p.nodes[static_cast<size_t>(v)].num_strategies())
        d.fail(fmt::format("solution_choice[{}]", v), fmt::format("strategy {} of {}", q, p.nodes[static_cast<size_t>(v)].num_strategies()));
      s.solution_choice.push_back(q);
    }
  }
  return s;
}

ReplayParts decode_replay(std::string_view payload, std::string_view origin) {
  Decoder d(origin);
  pb::Replay x;
  parse(x, payload, d);
  ReplayParts r;
  r.writer_version = x.writer_version();
  r.graph = d.graph(x.graph());
  r.mesh = d.mesh(x.mesh());
  r.options = d.options(x.options());
  r.constraints = d.constraints(x.constraints(), r.graph, r.mesh);
  return r;
}

}  // namespace autoshard

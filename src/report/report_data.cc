#include "report/report_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "cost/compute.h"
#include "cost/redistribute.h"
#include "io/placements_json.h"
#include "io/simulation_json.h"
#include "planner/parallelism.h"
#include "planner/sharding_optimizer.h"
#include "report/graph_svg.h"

namespace autoshard {

namespace {

using Json = nlohmann::ordered_json;

Json num(double v) {
  if (std::isfinite(v)) return round_milli(v);
  return nullptr;
}

std::string op_label(const Node& n) {
  return n.kind == NodeKind::kOp ? std::string(aten_packet(n.op)) : std::string(node_kind_name(n.kind));
}

std::string join_inputs(const Strategy& s) {
  std::string r;
  for (size_t k = 0; k < s.inputs.size(); ++k) r += (k ? ", " : "") + s.inputs[k].to_string();
  return r;
}

/// A stable colour per placement string (HSL hue from an FNV-1a hash), replicated = grey.
std::string placement_colour(const std::string& p) {
  bool all_r = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c == 'R'; });
  if (all_r) return "#e4e4e4";
  uint32_t h = 2166136261u;
  for (char c : p) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  // HSL(h, 65%, 78%) -> RGB, pastel so labels stay readable.
  double hue = static_cast<double>(h % 360u) / 60.0, s = 0.65, l = 0.78;
  double c = (1 - std::abs(2 * l - 1)) * s, x = c * (1 - std::abs(std::fmod(hue, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(hue)) {
    case 0: r = c; g = x; break;
    case 1: r = x; g = c; break;
    case 2: g = c; b = x; break;
    case 3: g = x; b = c; break;
    case 4: r = x; b = c; break;
    default: r = c; b = x; break;
  }
  double m = l - c / 2;
  auto byte = [&](double v) { return static_cast<int>(std::lround((v + m) * 255)); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b));
}

std::string short_us(double us) {
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.2f} ms", us / 1e3);
  return fmt::format("{:.1f} us", us);
}

}  // namespace

std::string module_pattern(const std::string& m) {
  std::string r;
  size_t b = 0;
  while (b <= m.size()) {
    size_t d = m.find('.', b);
    size_t e = d == std::string::npos ? m.size() : d;
    std::string part = m.substr(b, e - b);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    r += numeric ? "*" : part;
    if (d == std::string::npos) break;
    r += '.';
    b = d + 1;
  }
  return r;
}

std::vector<EdgeView> plan_edges(ShardingOptimizer& opt, const Plan& plan) {
  const Graph& g = opt.graph();
  const Mesh& mesh = opt.mesh();
  const BuiltProblem& bp = opt.problem();
  std::vector<EdgeView> out;
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& o = bp.edge_origin[k];
    if (o.slot < -1) continue;
    const auto& up = plan.nodes[static_cast<size_t>(o.producer.node)];
    const auto& vp = plan.nodes[static_cast<size_t>(o.consumer)];
    if (!up || !vp) continue;
    const ShardingSpec& from = up->chosen.outputs.at(static_cast<size_t>(o.producer.output));
    ShardingSpec to = o.slot >= 0 ? vp->chosen.inputs.at(static_cast<size_t>(o.slot))
                                  : vp->chosen.outputs.at(0);
    if (o.slot < 0) to.meta = g.meta(o.producer);
    EdgeView e;
    e.edge = static_cast<int32_t>(k);
    e.producer = o.producer.node;
    e.consumer = o.consumer;
    e.slot = o.slot;
    e.from = from.to_string();
    e.to = to.to_string();
    e.cost_us = redistribute_cost_us(from, to, mesh, opt.options().comm_model);
    if (e.cost_us > 0) {
      RedistributePlan rp = plan_redistribute(from, to, mesh);
      for (int32_t s = 0; s < rp.num_steps; ++s) {
        const CommStep& st = rp.steps[static_cast<size_t>(s)];
        e.bytes += st.bytes;
        e.collectives += fmt::format("{}{}({})", s ? " + " : "", collective_name(st.kind),
                                     mesh.dim(st.dim).name);
      }
      if (e.collectives.empty()) e.collectives = "redistribute";
    }
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

struct Context {
  ShardingOptimizer& opt;
  const Plan& plan;
  const StepSimulation& sim;
  const ReportLimits& lim;
  const Graph& g;
  const Mesh& mesh;
  const BuiltProblem& bp;
  std::vector<EdgeView> edges;
  std::vector<std::vector<int32_t>> in_edges;   // per graph node: indices into `edges`
  std::vector<std::vector<int32_t>> out_edges;  // per graph node (producer)
  std::vector<double> real_comm;                // per graph node: its inputs' real comm
  /// Placement -> fill colour: a palette of distinct pastels in order of first appearance in
  /// the graph (deterministic), then hashed hues once the palette is used up.
  std::map<std::string, std::string> colours;
  size_t next_palette = 0;
  std::string colour(const std::string& p) {
    auto it = colours.find(p);
    if (it != colours.end()) return it->second;
    static const char* const kPalette[] = {
        "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
        "#9edae5", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9f0a3", "#bcbddc", "#fee391"};
    const bool replicated = !p.empty() && std::all_of(p.begin(), p.end(), [](char ch) { return ch == 'R'; });
    std::string col = !replicated && next_palette < std::size(kPalette) ? kPalette[next_palette++]
                                                                       : placement_colour(p);
    colours.emplace(p, col);
    return col;
  }
};

/// print_costs_for_node's content: every strategy of the node with its compute time and the
/// redistributions into and out of it given the neighbours' chosen strategies.
Json strategy_table(Context& c, NodeIdx i) {
  const PNodeIdx v = c.bp.pnode[static_cast<size_t>(i)];
  const auto& strats = c.bp.strategies[static_cast<size_t>(v)];
  const auto& pn = c.bp.problem.nodes[static_cast<size_t>(v)];
  auto chosen_of = [&](PNodeIdx p) {
    return c.plan.nodes[static_cast<size_t>(c.bp.graph_node[static_cast<size_t>(p)])]->strategy;
  };
  struct Row {
    StrategyIdx s;
    double compute, in, out;
  };
  std::vector<Row> rows;
  for (StrategyIdx s = 0; s < static_cast<StrategyIdx>(strats.size()); ++s) {
    Row r{s, pn.costs[static_cast<size_t>(s)], 0, 0};
    for (int32_t k : c.in_edges[static_cast<size_t>(i)]) {
      const auto& e = c.bp.edges[static_cast<size_t>(c.edges[static_cast<size_t>(k)].edge)];
      const size_t nv = c.bp.problem.nodes[static_cast<size_t>(e.v)].costs.size();
      r.in += (*e.costs)[static_cast<size_t>(chosen_of(e.u)) * nv + static_cast<size_t>(s)];
    }
    for (int32_t k : c.out_edges[static_cast<size_t>(i)]) {
      const auto& e = c.bp.edges[static_cast<size_t>(c.edges[static_cast<size_t>(k)].edge)];
      const size_t nv = c.bp.problem.nodes[static_cast<size_t>(e.v)].costs.size();
      r.out += (*e.costs)[static_cast<size_t>(s) * nv + static_cast<size_t>(chosen_of(e.v))];
    }
    rows.push_back(r);
  }
  const StrategyIdx chosen = c.plan.nodes[static_cast<size_t>(i)]->strategy;
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.compute + a.in + a.out < b.compute + b.in + b.out;
  });
  Json t = Json::array();
  const size_t cap = static_cast<size_t>(c.lim.max_strategy_rows);
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    if (k >= cap && r.s != chosen) continue;
    const Strategy& s = strats[static_cast<size_t>(r.s)];
    t.push_back({r.s, output_spec_string(s), join_inputs(s), num(r.compute), num(r.in), num(r.out),
                 num(r.compute + r.in + r.out), r.s == chosen});
  }
  return {{"total", strats.size()}, {"rows", t}};
}

/// Blocks: op nodes and parameters by layer key, in order of first appearance.
struct Block {
  std::string key;
  std::vector<NodeIdx> nodes;  // graph order
  std::string signature;
  double compute_us = 0, comm_us = 0;
};

std::string dot_for_block(Context& c, const Block& b, bool forward_only) {
  const Graph& g = c.g;
  std::set<NodeIdx> in_block;
  for (NodeIdx i : b.nodes)
    if (!forward_only || g.node(i).phase == Phase::kForward || g.node(i).kind != NodeKind::kOp)
      in_block.insert(i);
  // Edge labels become xlabels and crossing minimisation is bounded (mclimit, nslimit): with
  // ordinary labels `dot` needs tens of seconds for one 200-node transformer layer.
  std::string dot = "digraph block {\n  graph [rankdir=TB, nodesep=0.25, ranksep=0.35, bgcolor=\"transparent\", "
                    "mclimit=0.1, nslimit=2, nslimit1=2];\n"
                    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, "
                    "height=0.3, margin=\"0.08,0.03\"];\n  edge [color=\"#9a9a9a\", arrowsize=0.6, "
                    "fontname=\"Helvetica\", fontsize=9];\n";
  std::set<NodeIdx> external;
  std::string edges_txt;
  for (NodeIdx i : in_block) {
    for (int32_t k : c.in_edges[static_cast<size_t>(i)]) {
      const EdgeView& e = c.edges[static_cast<size_t>(k)];
      if (!in_block.count(e.producer)) external.insert(e.producer);
      std::string attrs;
      if (e.cost_us > 0)
        attrs = fmt::format("color=\"#d62728\", penwidth=2.2, fontcolor=\"#b01010\", xlabel={}, "
                            "tooltip={}, id=\"e{}\"",
                            dot_quote(fmt::format("{} {}", e.collectives, short_us(e.cost_us))),
                            dot_quote(fmt::format("{} -> {}: {}", e.from, e.to, e.collectives)), e.edge);
      if (e.slot < 0) attrs += std::string(attrs.empty() ? "" : ", ") + "style=dashed";
      edges_txt += fmt::format("  {}{} -> n{} [{}];\n", in_block.count(e.producer) ? "n" : "x",
                               e.producer, i, attrs);
    }
  }
  for (NodeIdx i : in_block) {
    const Node& n = g.node(i);
    const auto& np = c.plan.nodes[static_cast<size_t>(i)];
    std::string pl = np ? output_spec_string(np->chosen) : "";
    std::string label = n.kind == NodeKind::kOp
                            ? fmt::format("{}\n{}  {}", n.name, aten_packet(n.op), pl)
                            : fmt::format("{}\n{}", n.name, pl);
    dot += fmt::format("  n{} [id=\"n{}\", class=\"gnode\", label={}, fillcolor=\"{}\"{}{}];\n", i, i,
                       dot_quote(label), c.colour(pl),
                       n.kind == NodeKind::kOp ? "" : ", shape=ellipse",
                       n.phase == Phase::kBackward && n.kind == NodeKind::kOp ? ", color=\"#5555aa\"" : "");
  }
  for (NodeIdx x : external)
    dot += fmt::format("  x{} [label={}, shape=plaintext, style=\"\", fontcolor=\"#888888\"];\n", x,
                       dot_quote(g.node(x).name));
  return dot + edges_txt + "}\n";
}

Json blocks_json(Context& c, Json& strategies) {
  const Graph& g = c.g;
  std::vector<Block> blocks;
  std::map<std::string, size_t> index;
  std::string current;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kOp && n.kind != NodeKind::kParameter) continue;
    if (!c.plan.nodes[static_cast<size_t>(i)]) continue;
    std::string key = layer_key(n.module_path);
    if (n.kind == NodeKind::kOp && key.empty()) key = current;  // stays in the current run
    if (n.kind == NodeKind::kOp) current = key;
    if (key.empty()) key = "(top level)";
    auto [it, ins] = index.try_emplace(key, blocks.size());
    if (ins) blocks.push_back({key, {}, {}, 0, 0});
    Block& b = blocks[it->second];
    b.nodes.push_back(i);
    const auto& np = *c.plan.nodes[static_cast<size_t>(i)];
    b.signature += fmt::format("{}|{}|{};", op_label(n), output_spec_string(np.chosen), join_inputs(np.chosen));
    b.compute_us += np.compute_us;
    b.comm_us += c.real_comm[static_cast<size_t>(i)];
  }
  // Parameters come first in the graph: blocks keep the order of their first op.
  std::vector<std::pair<NodeIdx, size_t>> order;
  for (size_t k = 0; k < blocks.size(); ++k) {
    NodeIdx first = g.size();
    for (NodeIdx i : blocks[k].nodes)
      if (g.node(i).kind == NodeKind::kOp) {
        first = i;
        break;
      }
    order.push_back({first, k});
  }
  std::stable_sort(order.begin(), order.end());
  // Consecutive blocks with the same signature form one group (repeated layers).
  Json groups = Json::array();
  std::string overview = "digraph overview {\n  graph [rankdir=LR, nodesep=0.2, bgcolor=\"transparent\"];\n"
                         "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f6\", "
                         "fontname=\"Helvetica\", fontsize=10];\n  edge [color=\"#777777\"];\n";
  int32_t drawn = 0;
  for (size_t a = 0; a < order.size();) {
    size_t e = a + 1;
    const Block& first = blocks[order[a].second];
    while (e < order.size() && blocks[order[e].second].signature == first.signature) ++e;
    Json keys = Json::array();
    double compute = 0, comm = 0;
    for (size_t k = a; k < e; ++k) {
      keys.push_back(blocks[order[k].second].key);
      compute += blocks[order[k].second].compute_us;
      comm += blocks[order[k].second].comm_us;
    }
    const size_t gi = groups.size();
    std::string title = e - a > 1 ? fmt::format("{} … {}  ×{}", first.key, blocks[order[e - 1].second].key, e - a)
                                  : first.key;
    Json grp = {{"id", gi}, {"title", title}, {"keys", keys}, {"count", e - a},
                {"nodes_per_block", first.nodes.size()}, {"compute_us", num(compute)},
                {"comm_us", num(comm)}, {"representative", first.key}};
    std::string note;
    if (drawn < c.lim.max_drawn_groups) {
      bool fwd_only = static_cast<int32_t>(first.nodes.size()) > c.lim.max_block_nodes;
      size_t fwd = 0;
      for (NodeIdx i : first.nodes)
        if (g.node(i).kind != NodeKind::kOp || g.node(i).phase == Phase::kForward) ++fwd;
      if (!fwd_only || static_cast<int32_t>(fwd) <= c.lim.max_block_nodes) {
        grp["svg"] = render_dot_svg(dot_for_block(c, first, fwd_only));
        // Colour legend: the output placements drawn, in first-drawn order.
        Json legend = Json::array();
        std::set<std::string> seen;
        for (NodeIdx i : first.nodes) {
          std::string pl = output_spec_string(c.plan.nodes[static_cast<size_t>(i)]->chosen);
          if (seen.insert(pl).second) legend.push_back({pl, c.colour(pl)});
        }
        grp["legend"] = legend;
        if (fwd_only) note = "forward ops only (the block is large)";
        for (NodeIdx i : first.nodes)
          if (!fwd_only || g.node(i).kind != NodeKind::kOp || g.node(i).phase == Phase::kForward)
            strategies[std::to_string(i)] = strategy_table(c, i);
        ++drawn;
      } else {
        note = "not drawn: too many nodes";
      }
    } else {
      note = "not drawn: too many distinct blocks";
    }
    grp["note"] = note;
    overview += fmt::format("  g{} [id=\"g{}\", class=\"gblock\", label={}{}];\n", gi, gi,
                            dot_quote(fmt::format("{}\n{} nodes  {} compute  {} comm", title,
                                                  first.nodes.size(), short_us(compute), short_us(comm))),
                            e - a > 1 ? ", fillcolor=\"#c9dcf2\", penwidth=2" : "");
    if (gi > 0) overview += fmt::format("  g{} -> g{};\n", gi - 1, gi);
    groups.push_back(std::move(grp));
    a = e;
  }
  overview += "}\n";
  return {{"overview_svg", render_dot_svg(overview)}, {"groups", groups}};
}

Json breakdown(Context& c, int which) {
  struct Acc {
    int64_t count = 0;
    double compute = 0, comm = 0;
  };
  std::map<std::string, Acc> acc;
  for (NodeIdx i = 0; i < c.g.size(); ++i) {
    const auto& np = c.plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    const Node& n = c.g.node(i);
    std::string key = which == 0   ? op_label(n)
                      : which == 1 ? (n.module_path.empty() ? "(none)" : module_pattern(n.module_path))
                                   : std::string(phase_name(n.phase));
    Acc& a = acc[key];
    ++a.count;
    a.compute += np->compute_us;
    a.comm += c.real_comm[static_cast<size_t>(i)];
  }
  std::vector<std::pair<std::string, Acc>> v(acc.begin(), acc.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second.compute + a.second.comm > b.second.compute + b.second.comm;
  });
  Json rows = Json::array();
  for (const auto& [k, a] : v) rows.push_back({k, a.count, num(a.compute), num(a.comm), num(a.compute + a.comm)});
  return rows;
}

Json hotspots(Context& c) {
  struct Acc {
    int64_t count = 0;
    double cost = 0, bytes = 0;
    NodeIdx example = kNoNode;
    std::string collectives;
  };
  std::map<std::tuple<std::string, std::string, int32_t, std::string, std::string, std::string>, Acc> acc;
  for (const EdgeView& e : c.edges) {
    if (!(e.cost_us > 0)) continue;
    const Node& v = c.g.node(e.consumer);
    const Node& u = c.g.node(e.producer);
    auto key = std::make_tuple(module_pattern(v.module_path), op_label(v) + "<-" + op_label(u), e.slot,
                               e.from, e.to, e.collectives);
    Acc& a = acc[key];
    ++a.count;
    a.cost += e.cost_us;
    a.bytes += e.bytes;
    if (a.example == kNoNode) a.example = e.consumer;
    a.collectives = e.collectives;
  }
  std::vector<std::pair<decltype(acc)::key_type, Acc>> v(acc.begin(), acc.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.cost > b.second.cost; });
  Json rows = Json::array();
  for (size_t k = 0; k < v.size() && static_cast<int32_t>(k) < c.lim.max_hotspots; ++k) {
    const auto& [key, a] = v[k];
    const auto& [mod, ops, slot, from, to, coll] = key;
    rows.push_back({c.g.node(a.example).name, mod, ops, slot < 0 ? "grad" : std::to_string(slot), from, to,
                    coll, a.count, num(a.cost / static_cast<double>(a.count)), num(a.cost),
                    num(a.bytes / static_cast<double>(a.count))});
  }
  return rows;
}

Json memory_json(Context& c) {
  const auto& pts = c.sim.memory;
  Json out = Json::array();
  if (pts.empty()) return out;
  const double span = std::max(c.sim.step_us, 1e-9);
  const double bucket = span / c.lim.max_memory_points;
  // Max-pool into buckets so no peak disappears.
  size_t k = 0;
  while (k < pts.size()) {
    const double b0 = std::floor(pts[k].time_us / bucket);
    int64_t hi = pts[k].bytes;
    size_t j = k + 1;
    while (j < pts.size() && std::floor(pts[j].time_us / bucket) == b0) hi = std::max(hi, pts[j++].bytes);
    out.push_back({num(pts[k].time_us), hi});
    if (j - k > 1) out.push_back({num(pts[j - 1].time_us), pts[j - 1].bytes});
    k = j;
  }
  return out;
}

std::string event_label(Context& c, const SimEvent& e) {
  const Node& n = c.g.node(e.node);
  if (e.stream == 0) return fmt::format("{} ({})", n.name, op_label(n));
  if (e.context_parallel) return fmt::format("context-parallel K/V in {}", n.name);
  return fmt::format("{} -> {}", collective_name(e.collective), n.name);
}

Json timeline_json(Context& c) {
  Json streams = Json::array();
  for (size_t s = 0; s < c.sim.streams.size(); ++s) {
    const auto& ev = c.sim.streams[s];
    double thr = std::max(c.sim.step_us, 1e-9) / c.lim.max_timeline_rects;
    Json rects = Json::array();
    size_t k = 0;
    while (k < ev.size()) {
      double start = ev[k].start_us, end = ev[k].end_us;
      size_t longest = k, j = k + 1;
      // Merge neighbours closer than one pixel-equivalent into one rectangle.
      while (j < ev.size() && ev[j].start_us - end <= thr && end - start < 4 * thr) {
        end = std::max(end, ev[j].end_us);
        if (ev[j].end_us - ev[j].start_us > ev[longest].end_us - ev[longest].start_us) longest = j;
        ++j;
      }
      rects.push_back({num(start), num(end), event_label(c, ev[longest]), j - k});
      k = j;
    }
    streams.push_back({{"name", c.sim.stream_names[s]}, {"events", ev.size()}, {"rects", rects}});
  }
  return streams;
}

/// The eager islands (Graph::islands) with the planned nodes inside each: the report names them
/// because their ops run eagerly, in the model's own order, not on the plan's schedule.
Json islands_json(Context& c) {
  Json out = Json::array();
  for (const EagerIsland& island : c.g.islands) {
    int64_t nodes = 0;
    double compute_us = 0;
    for (NodeIdx i = 0; i < c.g.size(); ++i) {
      const std::string& m = c.g.node(i).module_path;
      const auto& np = c.plan.nodes[static_cast<size_t>(i)];
      if (!np || !m.starts_with(island.module)) continue;
      // a submodule or the module itself; the root module ("") holds every node
      if (!island.module.empty() && m.size() != island.module.size() &&
          m[island.module.size()] != '.')
        continue;
      ++nodes;
      compute_us += np->compute_us;
    }
    out.push_back({{"module", island.module}, {"sources", island.sources}, {"nodes", nodes},
                   {"compute_us", num(compute_us)}});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json report_data(ShardingOptimizer& opt, const Plan& plan, const StepSimulation& sim,
                                   const ReportLimits& limits) {
  Context c{opt, plan, sim, limits, opt.graph(), opt.mesh(), opt.problem(), {}, {}, {}, {}, {}, 0};
  const Graph& g = c.g;
  const Mesh& mesh = c.mesh;
  c.edges = plan_edges(opt, plan);
  c.in_edges.resize(static_cast<size_t>(g.size()));
  c.out_edges.resize(static_cast<size_t>(g.size()));
  c.real_comm.assign(static_cast<size_t>(g.size()), 0.0);
  for (size_t k = 0; k < c.edges.size(); ++k) {
    const EdgeView& e = c.edges[k];
    c.in_edges[static_cast<size_t>(e.consumer)].push_back(static_cast<int32_t>(k));
    c.out_edges[static_cast<size_t>(e.producer)].push_back(static_cast<int32_t>(k));
    if (e.cost_us > 0) c.real_comm[static_cast<size_t>(e.consumer)] += e.cost_us;
  }

  Json j;
  int64_t param_tensors = 0;
  for (const Node& n : g.nodes) param_tensors += n.kind == NodeKind::kParameter;
  j["header"] = {{"model", g.name},
                 {"mesh", mesh.describe()},
                 {"devices", mesh.num_devices()},
                 {"hardware", mesh.hardware().name},
                 {"comm_model", comm_model_name(opt.options().comm_model)},
                 {"status", solve_status_name(plan.status)},
                 {"objective_us", num(plan.objective_us)},
                 {"objective", plan.overlap_aware ? "overlap" : "additive"},
                 {"additive_us", num(plan.additive_us)},
                 {"lower_bound_us", num(plan.lower_bound_us)},
                 {"gap", num(plan.gap)},
                 {"compute_us", num(plan.compute_us)},
                 {"comm_us", num(plan.comm_us)},
                 {"peak_memory_bytes", plan.peak_memory_bytes},
                 {"memory_limit_bytes", plan.memory_limit_bytes},
                 {"checked", plan.checked},
                 {"graph_nodes", g.size()},
                 {"layer_classes", plan.layer_clusters},
                 {"parameter_tensors", param_tensors},
                 {"parameter_elements", g.parameter_count()},
                 {"warnings", plan.warnings}};
  j["islands"] = islands_json(c);
  j["simulation"] = simulation_summary_json(sim);
  j["mesh_dims"] = mesh.names();

  Json strategies = Json::object();
  j["graph"] = blocks_json(c, strategies);
  j["strategies"] = std::move(strategies);

  j["breakdown"] = {{"op", breakdown(c, 0)}, {"module", breakdown(c, 1)}, {"phase", breakdown(c, 2)}};
  j["hotspots"] = hotspots(c);
  j["memory"] = {{"points", memory_json(c)},
                 {"limit_bytes", plan.memory_limit_bytes},
                 {"plan_peak_bytes", plan.peak_memory_bytes},
                 {"sim_peak_bytes", sim.peak_memory_bytes}};
  j["timeline"] = {{"step_us", num(sim.step_us)}, {"streams", timeline_json(c)}};

  Json params = Json::array();
  const ParallelismLabeler labels(g, mesh, plan);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (n.kind != NodeKind::kParameter || !np) continue;
    params.push_back({n.name, fmt::format("[{}]", fmt::join(n.out().shape, ", ")),
                      output_spec_string(np->chosen), labels.describe(i),
                      np->chosen.outputs.at(0).local_bytes(mesh), n.out().bytes()});
  }
  j["parameters"] = params;

  // Node table: [index, name, op, module, phase, output placement, input placements,
  // compute us, input comm us, simulated start us].
  std::vector<double> start(static_cast<size_t>(g.size()), -1);
  // A recomputed op runs twice; its start is the forward one.
  for (const SimEvent& e : sim.streams.at(0))
    if (!e.recomputed) start[static_cast<size_t>(e.node)] = e.start_us;
  Json rows = Json::array();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    const Node& n = g.node(i);
    rows.push_back({i, n.name, op_label(n), n.module_path, phase_name(n.phase), output_spec_string(np->chosen),
                    join_inputs(np->chosen), num(np->compute_us), num(c.real_comm[static_cast<size_t>(i)]),
                    start[static_cast<size_t>(i)] < 0 ? Json(nullptr) : num(start[static_cast<size_t>(i)])});
  }
  j["nodes"] = rows;
  return j;
}

double round_milli(double v) {
  if (!std::isfinite(v)) return v;
  return std::round(v * 1000.0) / 1000.0;
}

}  // namespace autoshard

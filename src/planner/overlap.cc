#include "planner/overlap.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>

#include "cost/compute.h"


namespace autoshard {
namespace {

bool all_digit_part(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

/// "layers.3" -> "layers.*": the class of a layer, shared by its repeats.
std::string masked_layer_class(const std::string& key) {
  std::string out;
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t dot = key.find('.', begin);
    size_t end = dot == std::string::npos ? key.size() : dot;
    std::string_view part(key.data() + begin, end - begin);
    if (!out.empty()) out += '.';
    out += all_digit_part(part) ? std::string("*") : std::string(part);
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return out;
}

/// The window segment an edge's communication can hide behind, or -1 (critical path).
int32_t window_of_edge(const Graph& g, const BuiltProblem::EdgeOrigin& o, const std::vector<int32_t>& seg,
                       int32_t num_segments) {
  if (o.slot < -1) return -1;  // memory-constraint ties and recomputation move no hideable data
  const Node& producer = g.node(o.producer.node);
  const int32_t a = seg[static_cast<size_t>(o.producer.node)];
  if (o.slot == -1) return a >= 0 && a + 1 < num_segments ? a + 1 : -1;  // gradient agreement
  const int32_t b = seg[static_cast<size_t>(o.consumer)];
  if (b < 0) return -1;
  // Prefetched one segment ahead.  The simulator prefetches views of placeholders too
  // (placeholder_views); counting their gathers as hidden here made the objective hide more
  // than the simulated step does wherever they share a mesh dim's stream with tensor-parallel
  // collectives (llama3-8b 16x8: 335.5 planned vs 381.1 ms simulated), so they stay critical.
  if (producer.kind != NodeKind::kOp) return b >= 1 ? b - 1 : -1;
  return a >= 0 && b >= a + 2 ? a + 1 : -1;                        // waited for much later
}

}  // namespace

std::string layer_key(const std::string& module_path) {
  size_t begin = 0;
  while (begin <= module_path.size()) {
    size_t dot = module_path.find('.', begin);
    size_t end = dot == std::string::npos ? module_path.size() : dot;
    if (all_digit_part(std::string_view(module_path).substr(begin, end - begin)))
      return module_path.substr(0, end);
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return module_path.substr(0, module_path.find('.'));
}

std::vector<int32_t> layer_segments(const Graph& g, int32_t* num_segments) {
  std::vector<int32_t> seg(static_cast<size_t>(g.size()), -1);
  std::string current;
  int32_t s = -1;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp) continue;
    std::string key = layer_key(x.module_path);
    if (s < 0 || (!key.empty() && key != current)) {
      ++s;
      current = key;
    }
    seg[static_cast<size_t>(i)] = s;
  }
  if (num_segments) *num_segments = s + 1;
  return seg;
}

std::vector<char> placeholder_views(const Graph& g) {
  std::vector<char> view(static_cast<size_t>(g.size()), 0);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || !is_view_op(x.op) || x.inputs.empty()) continue;
    bool all = true;
    for (const TensorRef& r : x.inputs) all = all && (g.node(r.node).kind != NodeKind::kOp || view[sz(r.node)]);
    view[sz(i)] = all;
  }
  return view;
}

OverlapModel build_overlap_model(const Graph& g, const BuiltProblem& bp) {
  int32_t n = 0;
  const std::vector<int32_t> seg = layer_segments(g, &n);
  std::vector<std::vector<int32_t>> hidden(static_cast<size_t>(n));
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const int32_t w = window_of_edge(g, bp.edge_origin[k], seg, n);
    if (w >= 0) hidden[static_cast<size_t>(w)].push_back(static_cast<int32_t>(k));
  }
  std::vector<std::vector<PNodeIdx>> window(static_cast<size_t>(n));
  std::vector<NodeIdx> first_op(static_cast<size_t>(n), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t s = seg[static_cast<size_t>(i)];
    if (s < 0) continue;
    if (first_op[static_cast<size_t>(s)] == kNoNode) first_op[static_cast<size_t>(s)] = i;
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v >= 0) window[static_cast<size_t>(s)].push_back(v);
  }
  OverlapModel m;
  std::map<std::string, int32_t> key_index;
  for (int32_t s = 0; s < n; ++s) {
    if (hidden[static_cast<size_t>(s)].empty() || window[static_cast<size_t>(s)].empty()) continue;
    const Node& x = g.node(first_op[static_cast<size_t>(s)]);
    // One multiplier per *shape* of segment, not per layer class: the first and last layers'
    // windows hide other moves than the middle ones', and the backward visits a layer twice
    // (its ops, then its weights' gradient agreements behind a few ops).  A multiplier shared
    // by such segments cannot price both regimes: on the traced LLaMA-3 8B the duality gap
    // fell from 1.57 % to 0.17 % when they were split (docs/benchmarks.md, issue 23).
    std::string name = std::string(phase_name(x.phase)) + " " + masked_layer_class(layer_key(x.module_path)) +
                       " (" + std::to_string(window[static_cast<size_t>(s)].size()) + " ops, " +
                       std::to_string(hidden[static_cast<size_t>(s)].size()) + " moves)";
    auto [it, added] = key_index.try_emplace(name, static_cast<int32_t>(m.keys.size()));
    if (added) m.keys.push_back(name);
    m.groups.push_back({it->second, std::move(window[static_cast<size_t>(s)]),
                        std::move(hidden[static_cast<size_t>(s)])});
  }
  return m;
}

OverlapTerms overlap_terms(const OverlapModel& m, const BuiltProblem& bp,
                           const std::vector<StrategyIdx>& choice) {
  const Problem& p = bp.problem;
  OverlapTerms t;
  t.hidden_us.assign(m.keys.size(), 0);
  t.window_us.assign(m.keys.size(), 0);
  t.overlapped_us.assign(m.keys.size(), 0);
  for (const OverlapGroup& gr : m.groups) {
    double h = 0, w = 0;
    for (int32_t k : gr.hidden) {
      const BuiltProblem::Edge& e = bp.edges[static_cast<size_t>(k)];
      const size_t nv = p.nodes[static_cast<size_t>(e.v)].costs.size();
      h += (*e.costs)[sz(choice[sz(e.u)]) * nv + sz(choice[sz(e.v)])];
    }
    // The window is compute only: a CP attention's exposed K/V wait is in its cost, not in
    // the time other communication can hide behind.
    for (PNodeIdx v : gr.window)
      w += p.nodes[sz(v)].costs[sz(choice[sz(v)])] - bp.op_comm_us(v, choice[sz(v)]);
    const size_t key = sz(gr.key);
    t.hidden_us[key] += h;
    t.window_us[key] += w;
    t.overlapped_us[key] += std::min(h, w);
    t.overlapped_total_us += std::min(h, w);
  }
  return t;
}

void scale_overlap_costs(const OverlapModel& m, const BuiltProblem& bp,
                         const std::vector<double>& mu, BuiltProblem& into) {
  auto scaled = [](Cost c, double f) { return std::isinf(c) ? c : c * f; };
  std::map<std::pair<const std::vector<Cost>*, double>, std::shared_ptr<const std::vector<Cost>>> cache;
  for (const OverlapGroup& gr : m.groups) {
    const double f = mu.at(sz(gr.key));
    for (PNodeIdx v : gr.window) {
      const auto& from = bp.problem.nodes[sz(v)].costs;
      auto& to = into.problem.nodes[sz(v)].costs;
      // A - (1 - mu) W: the compute part scaled by mu, op-internal communication kept whole.
      for (size_t q = 0; q < from.size(); ++q) {
        const double keep = bp.op_comm_us(v, static_cast<StrategyIdx>(q));
        to[q] = keep + scaled(from[q] - keep, f);
      }
    }
    for (int32_t k : gr.hidden) {
      const auto& orig = bp.edges[sz(k)].costs;
      auto& slot = cache[{orig.get(), f}];
      if (!slot) {
        auto mat = std::make_shared<std::vector<Cost>>(*orig);
        for (Cost& c : *mat) c = scaled(c, 1 - f);
        slot = std::move(mat);
      }
      into.edges[sz(k)].costs = slot;
    }
  }
}

}  // namespace autoshard

#include "solver/trws.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "solver/reduce.h"

namespace autoshard {

Trws::Trws(const GroupModel& m) : m_(m) {
  const int32_t ng = m.num_groups();
  gamma_.assign(static_cast<size_t>(ng), 1.0);
  for (int32_t g = 0; g < ng; ++g) {
    int before = 0, after = 0;
    for (auto [e, a] : m.adj[static_cast<size_t>(g)]) {
      const auto& ed = m.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      (o < g ? before : after) += 1;
    }
    gamma_[static_cast<size_t>(g)] = 1.0 / std::max(1, std::max(before, after));
  }
  x_.assign(static_cast<size_t>(ng), 0);
  reset();
}

void Trws::reset() {
  to_b_.resize(m_.edges.size());
  to_a_.resize(m_.edges.size());
  for (size_t e = 0; e < m_.edges.size(); ++e) {
    to_b_[e].assign(m_.unary[static_cast<size_t>(m_.edges[e].b)].size(), 0.0);
    to_a_[e].assign(m_.unary[static_cast<size_t>(m_.edges[e].a)].size(), 0.0);
  }
}

void Trws::iterate(int iters, const std::vector<std::vector<double>>* pen) {
  const int32_t ng = m_.num_groups();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> h, lab;
  for (int it = 0; it < iters; ++it) {
    for (int dir = 0; dir < 2; ++dir) {
      const bool fwd = dir == 0;
      for (int32_t k = 0; k < ng; ++k) {
        const int32_t g = fwd ? k : ng - 1 - k;
        const auto& u = m_.unary[static_cast<size_t>(g)];
        const size_t ns = u.size();
        h.assign(u.begin(), u.end());
        if (pen) {
          const auto& pg = (*pen)[static_cast<size_t>(g)];
          for (size_t s = 0; s < ns; ++s) h[s] += pg[s];
        }
        if (fwd) lab = h;
        for (auto [e, a] : m_.adj[static_cast<size_t>(g)]) {
          const auto& ed = m_.edges[static_cast<size_t>(e)];
          const auto& in = a ? to_a_[static_cast<size_t>(e)] : to_b_[static_cast<size_t>(e)];
          for (size_t s = 0; s < ns; ++s) h[s] += in[s];
          if (fwd) {
            int32_t o = a ? ed.b : ed.a;
            if (o < g) {
              // Earlier neighbour: use its chosen strategy instead of the message.
              int32_t xo = x_[static_cast<size_t>(o)];
              size_t nb = m_.unary[static_cast<size_t>(ed.b)].size();
              for (size_t s = 0; s < ns; ++s)
                lab[s] += a ? ed.m[s * nb + static_cast<size_t>(xo)] : ed.m[static_cast<size_t>(xo) * nb + s];
            } else {
              for (size_t s = 0; s < ns; ++s) lab[s] += in[s];
            }
          }
        }
        if (fwd) x_[static_cast<size_t>(g)] = static_cast<int32_t>(std::min_element(lab.begin(), lab.end()) - lab.begin());
        const double gam = gamma_[static_cast<size_t>(g)];
        for (auto [e, a] : m_.adj[static_cast<size_t>(g)]) {
          const auto& ed = m_.edges[static_cast<size_t>(e)];
          int32_t o = a ? ed.b : ed.a;
          if (fwd ? o < g : o > g) continue;
          auto& out = a ? to_b_[static_cast<size_t>(e)] : to_a_[static_cast<size_t>(e)];
          const auto& back = a ? to_a_[static_cast<size_t>(e)] : to_b_[static_cast<size_t>(e)];
          const size_t no = out.size();
          std::fill(out.begin(), out.end(), kInf);
          if (a) {
            // out[t] = min_s gam*h[s] - back[s] + M[s][t]
            for (size_t s = 0; s < ns; ++s) {
              double hs = gam * h[s] - back[s];
              const double* row = &ed.m[s * no];
              for (size_t t = 0; t < no; ++t) out[t] = std::min(out[t], hs + row[t]);
            }
          } else {
            // out[t] = min_s gam*h[s] - back[s] + M[t][s]
            for (size_t s = 0; s < ns; ++s) h[s] = gam * h[s] - back[s];
            for (size_t t = 0; t < no; ++t) {
              const double* row = &ed.m[t * ns];
              double best = kInf;
              for (size_t s = 0; s < ns; ++s) best = std::min(best, h[s] + row[s]);
              out[t] = best;
            }
            for (size_t s = 0; s < ns; ++s) h[s] = (h[s] + back[s]) / gam;
          }
          double mn = *std::min_element(out.begin(), out.end());
          if (std::isfinite(mn))
            for (double& v : out) v -= mn;
        }
      }
    }
  }
}

double Trws::lower_bound(const std::vector<std::vector<double>>* pen) const {
  const int32_t ng = m_.num_groups();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // Reparametrised unary, split evenly over each group's edges.
  std::vector<std::vector<double>> share(static_cast<size_t>(ng));
  double bound = 0;
  for (int32_t g = 0; g < ng; ++g) {
    const auto& u = m_.unary[static_cast<size_t>(g)];
    auto& h = share[static_cast<size_t>(g)];
    h.assign(u.begin(), u.end());
    if (pen)
      for (size_t s = 0; s < h.size(); ++s) h[s] += (*pen)[static_cast<size_t>(g)][s];
    const auto& adj = m_.adj[static_cast<size_t>(g)];
    for (auto [e, a] : adj) {
      const auto& in = a ? to_a_[static_cast<size_t>(e)] : to_b_[static_cast<size_t>(e)];
      for (size_t s = 0; s < h.size(); ++s) h[s] += in[s];
    }
    if (adj.empty()) {
      bound += *std::min_element(h.begin(), h.end());
      continue;
    }
    for (double& v : h) v /= static_cast<double>(adj.size());
  }
  for (size_t e = 0; e < m_.edges.size(); ++e) {
    const auto& ed = m_.edges[e];
    const auto& ha = share[static_cast<size_t>(ed.a)];
    const auto& hb = share[static_cast<size_t>(ed.b)];
    const auto& ma = to_a_[e];  // message b->a, indexed by a's strategy
    const auto& mb = to_b_[e];
    double best = kInf;
    for (size_t s = 0; s < ha.size(); ++s) {
      double base = ha[s] - ma[s];
      const double* row = &ed.m[s * hb.size()];
      for (size_t t = 0; t < hb.size(); ++t) best = std::min(best, base + row[t] + hb[t] - mb[t]);
    }
    bound += best;
  }
  return bound;
}

MessagePassingResult solve_by_message_passing(const Problem& p, std::chrono::steady_clock::time_point deadline,
                                              double tolerance, int max_iterations, int stall) {
  constexpr int kBlock = 10;  // iterations between checks
  MessagePassingResult res;
  Problem free = p;
  free.usage_limit = -1;
  const GroupReduction red(free);  // memory-free: every tree and chain is eliminated exactly
  const GroupModel& m = red.model();
  if (m.infeasible) return res;
  Trws trws(m);
  int since_rise = 0;
  while (res.iterations < max_iterations && since_rise < stall &&
         std::chrono::steady_clock::now() < deadline) {
    trws.iterate(kBlock, nullptr);
    res.iterations += kBlock;
    const Cost bound = trws.lower_bound(nullptr) + m.offset;
    if (bound > res.lower_bound + 1e-12 * std::abs(bound)) {
      res.lower_bound = bound;
      since_rise = 0;
    } else {
      since_rise += kBlock;
    }
    std::vector<StrategyIdx> x = red.expand(trws.labeling());
    const Cost c = evaluate_cost(p, x);
    if (c < res.cost) res.cost = c, res.choice = std::move(x);
    if (res.cost - res.lower_bound <= tolerance * std::max(1.0, std::abs(res.cost))) {
      res.proven = true;
      break;
    }
  }
  return res;
}

}  // namespace autoshard

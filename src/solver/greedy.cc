#include "solver/greedy.h"

#include <algorithm>

namespace autoshard {

namespace {

inline size_t sz(int64_t x) { return static_cast<size_t>(x); }

class Greedy {
 public:
  Greedy(const Problem& p, const std::vector<MemoryRow>& rows) : p_(p), rows_(rows) {
    adj_.resize(sz(p.num_nodes()));
    for (EdgeIdx k = 0; k < p.num_edges(); ++k) {
      adj_[sz(p.edges[sz(k)].u)].push_back(k);
      adj_[sz(p.edges[sz(k)].v)].push_back(k);
    }
    node_rows_.resize(sz(p.num_nodes()));
    if (p.usage_limit >= 0)
      for (size_t r = 0; r < rows.size(); ++r)
        for (PNodeIdx v : rows[r].nodes) node_rows_[sz(v)].push_back(static_cast<int32_t>(r));
  }

  GreedyResult run(const std::vector<StrategyIdx>& start) {
    const PNodeIdx n = p_.num_nodes();
    choice_.assign(sz(n), 0);
    if (start.size() == sz(n)) {
      choice_ = start;
    } else {
      for (PNodeIdx v = 0; v < n; ++v) {
        const auto& c = p_.nodes[sz(v)].costs;
        choice_[sz(v)] = static_cast<StrategyIdx>(std::min_element(c.begin(), c.end()) - c.begin());
      }
    }
    load_.assign(rows_.size(), 0);
    for (size_t r = 0; r < rows_.size(); ++r) {
      load_[r] = rows_[r].offset;
      for (PNodeIdx v : rows_[r].nodes) load_[r] += usage(v, choice_[sz(v)]);
    }
    descend();
    if (p_.usage_limit >= 0) {
      repair();
      descend();
    }
    GreedyResult res;
    res.choice = choice_;
    res.cost = evaluate_cost(p_, choice_);
    res.memory_ok = p_.usage_limit < 0 ||
                    std::all_of(load_.begin(), load_.end(), [&](int64_t l) { return l <= p_.usage_limit; });
    return res;
  }

 private:
  int64_t usage(PNodeIdx v, StrategyIdx q) const { return p_.nodes[sz(v)].usages[sz(q)]; }

  Cost local(PNodeIdx v, StrategyIdx q) const {
    Cost c = p_.nodes[sz(v)].costs[sz(q)];
    for (EdgeIdx k : adj_[sz(v)]) {
      const ProblemEdge& e = p_.edges[sz(k)];
      c += e.u == v ? p_.edge_cost(e, q, choice_[sz(e.v)]) : p_.edge_cost(e, choice_[sz(e.u)], q);
    }
    return c;
  }

  /// A move may raise usage only in rows that stay within the limit.
  bool fits(PNodeIdx v, StrategyIdx q) const {
    const int64_t d = usage(v, q) - usage(v, choice_[sz(v)]);
    if (d <= 0 || p_.usage_limit < 0) return true;
    for (int32_t r : node_rows_[sz(v)])
      if (load_[sz(r)] + d > p_.usage_limit) return false;
    return true;
  }

  void move(PNodeIdx v, StrategyIdx q) {
    const int64_t d = usage(v, q) - usage(v, choice_[sz(v)]);
    for (int32_t r : node_rows_[sz(v)]) load_[sz(r)] += d;
    choice_[sz(v)] = q;
  }

  void descend() {
    for (int pass = 0; pass < 100; ++pass) {
      bool improved = false;
      for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
        const StrategyIdx cur = choice_[sz(v)];
        Cost best = local(v, cur);
        StrategyIdx arg = cur;
        for (StrategyIdx q = 0; q < p_.nodes[sz(v)].num_strategies(); ++q) {
          if (q == cur) continue;
          Cost c = local(v, q);
          if (c < best - 1e-12 * std::max(1.0, std::abs(best)) && fits(v, q)) best = c, arg = q;
        }
        if (arg != cur) move(v, arg), improved = true;
      }
      if (!improved) break;
    }
  }

  void repair() {
    const int64_t limit = p_.usage_limit;
    std::vector<char> seen(sz(p_.num_nodes()), 0);
    for (int iter = 0; iter < 100000; ++iter) {
      std::vector<PNodeIdx> cand;
      for (size_t r = 0; r < rows_.size(); ++r) {
        if (load_[r] <= limit) continue;
        for (PNodeIdx v : rows_[r].nodes)
          if (!seen[sz(v)]) seen[sz(v)] = 1, cand.push_back(v);
      }
      if (cand.empty()) return;
      double best_score = kInfCost;
      PNodeIdx bv = -1;
      StrategyIdx bq = -1;
      for (PNodeIdx v : cand) {
        seen[sz(v)] = 0;
        const StrategyIdx cur = choice_[sz(v)];
        int64_t violated = 0;
        for (int32_t r : node_rows_[sz(v)]) violated += load_[sz(r)] > limit ? 1 : 0;
        const Cost base = local(v, cur);
        for (StrategyIdx q = 0; q < p_.nodes[sz(v)].num_strategies(); ++q) {
          const int64_t saved = usage(v, cur) - usage(v, q);
          if (saved <= 0) continue;
          const Cost delta = local(v, q) - (base < kInfCost ? base : 0.0);
          if (!(delta < kInfCost)) continue;
          const double score = delta / (static_cast<double>(saved) * static_cast<double>(violated));
          if (score < best_score) best_score = score, bv = v, bq = q;
        }
      }
      if (bv < 0) return;  // no usage-reducing move left
      move(bv, bq);
    }
  }

  const Problem& p_;
  const std::vector<MemoryRow>& rows_;
  std::vector<std::vector<EdgeIdx>> adj_;
  std::vector<std::vector<int32_t>> node_rows_;
  std::vector<StrategyIdx> choice_;
  std::vector<int64_t> load_;
};

}  // namespace

GreedyResult greedy_solve(const Problem& p, const std::vector<MemoryRow>& rows,
                          const std::vector<StrategyIdx>& start) {
  return Greedy(p, rows).run(start);
}

}  // namespace autoshard

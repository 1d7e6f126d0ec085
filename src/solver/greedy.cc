#include "solver/greedy.h"

#include <algorithm>
#include <chrono>

#include "solver/reduce.h"
#include "solver/row_prices.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

class Greedy {
 public:
  Greedy(const Problem& p, const std::vector<MemoryRow>& rows, Deadline deadline)
      : p_(p), rows_(rows), prices_(p, p.usage_limit >= 0 ? rows : no_rows()), deadline_(deadline) {
    adj_.resize(sz(p.num_nodes()));
    for (EdgeIdx k = 0; k < p.num_edges(); ++k) {
      adj_[sz(p.edges[sz(k)].u)].push_back(k);
      adj_[sz(p.edges[sz(k)].v)].push_back(k);
    }
    double total = 0;
    auto add_max = [&](const std::vector<Cost>& cs) {
      double m = 0;
      for (Cost c : cs)
        if (c < kInfCost) m = std::max(m, std::abs(c));
      total += m;
    };
    for (const auto& n : p.nodes) add_max(n.costs);
    for (const auto& e : p.edges) add_max(e.costs);
    big_ = 10 * total + 1;
  }

  GreedyResult run(const std::vector<StrategyIdx>& start) {
    const PNodeIdx n = p_.num_nodes();
    choice_.assign(sz(n), 0);
    if (start.size() == sz(n)) {
      choice_ = start;
    } else {
      construct();
    }
    load_.assign(rows_.size(), 0);
    for (size_t r = 0; r < rows_.size(); ++r) {
      load_[r] = rows_[r].offset;
      for (PNodeIdx v : rows_[r].nodes) load_[r] += usage(v, choice_[sz(v)]);
    }
    descend();
    if (p_.usage_limit >= 0 && violated()) {
      penalty_repair();
      if (violated()) ratio_repair();
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
  /// Assigns nodes in breadth-first order, each to its cheapest strategy given the edges to
  /// nodes assigned before it (so forbidden pairs are avoided whenever a choice allows it).
  void construct() {
    const PNodeIdx n = p_.num_nodes();
    std::vector<char> done(sz(n), 0);
    std::vector<PNodeIdx> order;
    std::vector<PNodeIdx> by_degree(sz(n));
    for (PNodeIdx v = 0; v < n; ++v) by_degree[sz(v)] = v;
    std::stable_sort(by_degree.begin(), by_degree.end(),
                     [&](PNodeIdx a, PNodeIdx b) { return adj_[sz(a)].size() > adj_[sz(b)].size(); });
    std::vector<char> seen(sz(n), 0);
    for (PNodeIdx root : by_degree) {
      if (seen[sz(root)]) continue;
      seen[sz(root)] = 1;
      size_t head = order.size();
      order.push_back(root);
      while (head < order.size()) {
        PNodeIdx v = order[head++];
        for (EdgeIdx k : adj_[sz(v)]) {
          const ProblemEdge& e = p_.edges[sz(k)];
          PNodeIdx o = e.u == v ? e.v : e.u;
          if (!seen[sz(o)]) seen[sz(o)] = 1, order.push_back(o);
        }
      }
    }
    for (PNodeIdx v : order) {
      Cost best = kInfCost;
      StrategyIdx arg = 0;
      for (StrategyIdx q = 0; q < p_.nodes[sz(v)].num_strategies(); ++q) {
        Cost c = fin(p_.nodes[sz(v)].costs[sz(q)]);
        for (EdgeIdx k : adj_[sz(v)]) {
          const ProblemEdge& e = p_.edges[sz(k)];
          if ((e.u == v && done[sz(e.v)]) || (e.v == v && done[sz(e.u)])) c += ecost(e, v, q);
        }
        if (c < best) best = c, arg = q;
      }
      choice_[sz(v)] = arg;
      done[sz(v)] = 1;
    }
  }

  int64_t usage(PNodeIdx v, StrategyIdx q) const { return p_.nodes[sz(v)].usages[sz(q)]; }

  /// Forbidden choices count as a huge finite cost inside the local search, so that it can
  /// walk out of assignments that use them (the final cost is evaluated exactly).
  Cost fin(Cost c) const { return c < kInfCost ? c : big_; }
  Cost ecost(const ProblemEdge& e, PNodeIdx v, StrategyIdx q) const {
    return fin(e.u == v ? p_.edge_cost(e, q, choice_[sz(e.v)]) : p_.edge_cost(e, choice_[sz(e.u)], q));
  }

  Cost local(PNodeIdx v, StrategyIdx q) const {
    Cost c = fin(p_.nodes[sz(v)].costs[sz(q)]);
    for (EdgeIdx k : adj_[sz(v)]) c += ecost(p_.edges[sz(k)], v, q);
    return c;
  }

  /// A move may raise usage only in rows that stay within the limit.
  bool fits(PNodeIdx v, StrategyIdx q) const {
    const int64_t d = usage(v, q) - usage(v, choice_[sz(v)]);
    if (d <= 0 || p_.usage_limit < 0) return true;
    for (int32_t r : prices_.rows_of(v))
      if (load_[sz(r)] + d > p_.usage_limit) return false;
    return true;
  }

  void move(PNodeIdx v, StrategyIdx q) {
    const int64_t d = usage(v, q) - usage(v, choice_[sz(v)]);
    for (int32_t r : prices_.rows_of(v)) load_[sz(r)] += d;
    choice_[sz(v)] = q;
  }

  /// Checked between passes: past the deadline the search stops with what it has.
  bool late() const { return Clock::now() >= deadline_; }

  static const std::vector<MemoryRow>& no_rows() {
    static const std::vector<MemoryRow> kNone;
    return kNone;
  }

  bool violated() const {
    return std::any_of(load_.begin(), load_.end(), [&](int64_t l) { return l > p_.usage_limit; });
  }

  /// Usage penalty of strategy q at v under the row prices (0 outside penalty_repair).
  double penalty(PNodeIdx v, StrategyIdx q) const {
    return penalized_ ? prices_.node_price(v) * static_cast<double>(usage(v, q)) : 0;
  }

  /// Coordinate descent on cost (+ usage penalties when multipliers are set).  Without
  /// multipliers, moves must keep memory rows within the limit.
  void descend() {
    const bool penalized = penalized_;
    for (int pass = 0; pass < 100 && !late(); ++pass) {
      bool improved = false;
      for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
        const StrategyIdx cur = choice_[sz(v)];
        Cost best = local(v, cur) + penalty(v, cur);
        StrategyIdx arg = cur;
        for (StrategyIdx q = 0; q < p_.nodes[sz(v)].num_strategies(); ++q) {
          if (q == cur) continue;
          Cost c = local(v, q) + penalty(v, q);
          if (c < best - 1e-12 * std::max(1.0, std::abs(best)) && (penalized || fits(v, q)))
            best = c, arg = q;
        }
        if (arg != cur) move(v, arg), improved = true;
      }
      if (!improved && !pair_pass()) break;
    }
  }

  /// Local cost of v at q without the contribution of edge `skip`.
  Cost local_without(PNodeIdx v, StrategyIdx q, EdgeIdx skip) const {
    Cost c = fin(p_.nodes[sz(v)].costs[sz(q)]);
    for (EdgeIdx k : adj_[sz(v)])
      if (k != skip) c += ecost(p_.edges[sz(k)], v, q);
    return c;
  }

  /// One pass of joint moves of the two ends of every edge; returns true if any improved.
  bool pair_pass() {
    const bool penalized = penalized_;
    bool improved = false;
    std::vector<Cost> lu, lv;
    for (EdgeIdx k = 0; k < p_.num_edges(); ++k) {
      if (k % 256 == 0 && late()) break;
      const ProblemEdge& e = p_.edges[sz(k)];
      const StrategyIdx ku = p_.nodes[sz(e.u)].num_strategies(), kv = p_.nodes[sz(e.v)].num_strategies();
      const StrategyIdx cu = choice_[sz(e.u)], cv = choice_[sz(e.v)];
      lu.resize(sz(ku));
      lv.resize(sz(kv));
      for (StrategyIdx a = 0; a < ku; ++a) lu[sz(a)] = local_without(e.u, a, k) + penalty(e.u, a);
      for (StrategyIdx b = 0; b < kv; ++b) lv[sz(b)] = local_without(e.v, b, k) + penalty(e.v, b);
      const Cost cur = lu[sz(cu)] + lv[sz(cv)] + fin(p_.edge_cost(e, cu, cv));
      Cost best = cur;
      StrategyIdx ba = cu, bb = cv;
      for (StrategyIdx a = 0; a < ku; ++a) {
        if (!(lu[sz(a)] < best)) continue;
        for (StrategyIdx b = 0; b < kv; ++b) {
          const Cost c = lu[sz(a)] + lv[sz(b)] + fin(p_.edge_cost(e, a, b));
          if (c < best - 1e-12 * std::max(1.0, std::abs(best)) && (a != cu || b != cv)) {
            if (!penalized) {  // the joint move must keep memory within the limit
              move(e.u, a);
              move(e.v, b);
              const bool ok = !violated_at(e.u) && !violated_at(e.v);
              move(e.v, cv);
              move(e.u, cu);
              if (!ok) continue;
            }
            best = c, ba = a, bb = b;
          }
        }
      }
      if (ba != cu || bb != cv) {
        move(e.u, ba);
        move(e.v, bb);
        improved = true;
      }
    }
    return improved;
  }

  bool violated_at(PNodeIdx v) const {
    for (int32_t r : prices_.rows_of(v))
      if (load_[sz(r)] > p_.usage_limit) return true;
    return false;
  }

  /// Raises per-row usage prices on violated rows until penalized descent fits the limit.
  void penalty_repair() {
    const double scale = RowPrices::scale(p_);
    prices_.clear();
    penalized_ = true;
    for (int iter = 0; iter < 80 && violated() && !late(); ++iter) {
      prices_.raise_violated(load_, scale * 1e-3, 1.6);
      descend();
    }
    penalized_ = false;
    prices_.clear();
  }

  void ratio_repair() {
    const int64_t limit = p_.usage_limit;
    std::vector<char> seen(sz(p_.num_nodes()), 0);
    for (int iter = 0; iter < 100000 && !late(); ++iter) {
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
        for (int32_t r : prices_.rows_of(v)) violated += load_[sz(r)] > limit ? 1 : 0;
        const Cost base = local(v, cur);
        for (StrategyIdx q = 0; q < p_.nodes[sz(v)].num_strategies(); ++q) {
          const int64_t saved = usage(v, cur) - usage(v, q);
          if (saved <= 0) continue;
          const Cost delta = local(v, q) - base;
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
  /// Rows per node (only with a usage limit) and, during penalty_repair, their prices.
  RowPrices prices_;
  bool penalized_ = false;
  std::vector<StrategyIdx> choice_;
  std::vector<int64_t> load_;
  double big_ = 1;              ///< stands for +inf inside the local search
  Deadline deadline_;
};

}  // namespace

std::vector<StrategyIdx> reduced_greedy(const Problem& p, Deadline deadline) {
  Problem q = p;
  q.usage_limit = -1;
  ReduceOptions ro;
  ro.deadline = deadline;
  const ReducedProblem rq = reduce(q, ro);
  if (rq.infeasible) return {};
  return rq.map_back(Greedy(rq.problem, {}, deadline).run({}).choice);
}

GreedyResult greedy_solve(const Problem& p, const std::vector<MemoryRow>& rows,
                          const std::vector<StrategyIdx>& start, Deadline deadline) {
  GreedyResult best;
  auto consider = [&](GreedyResult g) {
    const bool better = (g.memory_ok && !best.memory_ok) ||
                        (g.memory_ok == best.memory_ok && g.cost < best.cost) || best.choice.empty();
    if (better) best = std::move(g);
  };
  Greedy g(p, rows, deadline);
  if (start.size() == sz(p.num_nodes())) consider(g.run(start));
  // From the reduced problem's plan, unless a start is given: callers that polish a start also
  // call without one, so it would be computed again for the same problem.
  if (start.size() != sz(p.num_nodes()) && p.num_edges() > 0)
    if (std::vector<StrategyIdx> x = reduced_greedy(p, deadline); !x.empty()) consider(g.run(x));
  if (!best.memory_ok || !(best.cost < kInfCost)) consider(g.run({}));
  return best;
}

}  // namespace autoshard

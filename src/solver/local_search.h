#pragma once
/// Memory-aware large-neighbourhood search over a GroupModel (see group_model.h).
///
/// A move re-optimises a random induced tree of groups (1 to ~64 groups) exactly by min-sum
/// dynamic programming, with everything outside the tree fixed.  Memory enters the DP two ways:
/// strategies that alone would overflow some segment are forbidden, and Lagrangian prices per
/// time segment (raised where proposals overflowed, decayed over time) penalise usage.  The
/// proposal is then checked exactly (segment tree with range add / max over time segments) and
/// kept only if it does not make the state worse in (overflow, forbidden pairs, cost) order.
/// Several searches (threads) share the incumbent and restart from it when they stagnate.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "solver/group_model.h"

namespace autoshard {

/// Incumbent shared by search threads.
struct SharedIncumbent {
  std::mutex mu;
  bool have = false;
  Cost cost = kInfCost;          ///< model cost (without the reduction offset)
  std::vector<int32_t> choice;   ///< group choice
  double first_feasible_s = -1;  ///< seconds since start when the first feasible was found
  std::atomic<int64_t> version{0};
  /// Best memory-free lower bound published by a search (model cost, without the offset).
  std::atomic<double> bound{-1e300};
  void publish_bound(double b) {
    double cur = bound.load();
    while (b > cur && !bound.compare_exchange_weak(cur, b)) {
    }
  }
  std::chrono::steady_clock::time_point start;
  std::function<void(Cost, double)> on_improve;  ///< called under the lock (cost, seconds)

  /// Offers a feasible solution; returns true if it became the incumbent.
  bool offer(Cost c, const std::vector<int32_t>& x);
};

struct LocalSearchStats {
  int64_t proposals = 0, accepted = 0, memory_rejects = 0, restarts = 0;
};

/// One search; run() loops until the deadline or `stop`.
class GroupSearch {
 public:
  GroupSearch(const GroupModel& m, uint64_t seed);
  void run(std::chrono::steady_clock::time_point deadline, SharedIncumbent& shared,
           const std::atomic<bool>& stop);
  /// Sets the state (rebuilds usage); used to start from a given choice.
  void set_state(const std::vector<int32_t>& x);
  const LocalSearchStats& stats() const { return stats_; }
  /// Current state's key.
  int64_t overflow() const;
  int64_t bad() const { return bad_; }
  Cost cost() const { return cost_; }
  const std::vector<int32_t>& state() const { return x_; }

  /// Relaxed mode: with `pen` non-null, memory is ignored by the moves and the objective is the
  /// cost plus pen[g][s] for each group's choice (usage is still tracked).  Null: normal mode.
  void set_penalty(const std::vector<std::vector<double>>* pen) { pen_ = pen; }
  /// Runs n block moves (no perturbation) in the current mode; returns how many improved.
  int64_t moves(int64_t n);
  /// Greedy memory repair: while some segment overflows, moves one group covering the peak
  /// segment to the strategy with the least (cost increase / usage saved there).  Returns true
  /// when the state fits the limit.  Stops at the deadline.
  bool repair(std::chrono::steady_clock::time_point deadline);
  /// Peak usage over segments [lo, hi).
  int64_t range_max(int32_t lo, int32_t hi) const { return st_max(lo, hi); }
  int64_t peak() const { return root_max(); }

 private:
  // Segment tree over time segments: range add, global and range max.
  void st_add(int32_t lo, int32_t hi, int64_t v) { st_add(1, 0, size_, lo, hi, v); }
  void st_add(int node, int32_t l, int32_t r, int32_t lo, int32_t hi, int64_t v);
  int64_t st_max(int32_t lo, int32_t hi) const { return st_max(1, 0, size_, lo, hi); }
  int64_t st_max(int node, int32_t l, int32_t r, int32_t lo, int32_t hi) const;
  void st_over(int node, int32_t l, int32_t r, int64_t add, std::vector<int32_t>& out, size_t cap) const;
  int64_t root_max() const { return nseg_ == 0 ? INT64_MIN : mx_[1]; }

  void change_usage(int32_t g, int32_t from, int32_t to);
  double lambda_sum(int32_t lo, int32_t hi) const;
  void lambda_add(int32_t seg, double v);
  void lambda_decay(double f);

  bool block_move(bool perturb);
  int32_t argmax_segment() const;
  void pick_block(int32_t target);

  const GroupModel& m_;
  uint64_t rng_;
  uint64_t next();
  std::vector<int32_t> x_;
  Cost cost_ = 0;
  int64_t bad_ = 0;
  int32_t nseg_ = 0;
  int size_ = 1;
  std::vector<int64_t> mx_, lz_;
  std::vector<double> lam_, fen_;  ///< prices and their Fenwick tree
  // Block scratch.
  std::vector<int32_t> block_, parent_edge_, pos_;
  std::vector<char> in_block_;
  LocalSearchStats stats_;
  const std::vector<std::vector<double>>* pen_ = nullptr;
};

}  // namespace autoshard

#include "solver/local_search.h"

#include <algorithm>
#include <cmath>

namespace autoshard {
namespace {

/// Stand-in for +inf inside the DP, so sums stay comparable.
constexpr double kBig = 1e18;
/// Cap on the DP work (sum of |S_parent| x |S_child|) of one block.
constexpr double kMaxBlockWork = 4e5;

}  // namespace

bool SharedIncumbent::offer(Cost c, const std::vector<int32_t>& x) {
  std::lock_guard<std::mutex> lock(mu);
  if (have && c >= cost) return false;
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!have) first_feasible_s = t;
  have = true;
  cost = c;
  choice = x;
  version.fetch_add(1);
  if (on_improve) on_improve(c, t);
  return true;
}

GroupSearch::GroupSearch(const GroupModel& m, uint64_t seed)
    : m_(m), rng_(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {
  nseg_ = m.num_segments();
  while (size_ < std::max(nseg_, 1)) size_ <<= 1;
  mx_.assign(static_cast<size_t>(4 * size_), 0);
  lz_.assign(static_cast<size_t>(4 * size_), 0);
  lam_.assign(static_cast<size_t>(nseg_), 0.0);
  fen_.assign(static_cast<size_t>(nseg_) + 1, 0.0);
  in_block_.assign(static_cast<size_t>(m.num_groups()), 0);
  pos_.assign(static_cast<size_t>(m.num_groups()), -1);
  // Start from the least memory per group (weighted by segments covered), ties by cost.
  std::vector<int32_t> x(static_cast<size_t>(m.num_groups()), 0);
  for (int32_t g = 0; g < m.num_groups(); ++g) {
    const auto& u = m.unary[static_cast<size_t>(g)];
    double best = kInfCost, bestc = kInfCost;
    for (size_t s = 0; s < u.size(); ++s) {
      double mem = 0;
      for (const auto& pc : m.pieces[static_cast<size_t>(g)])
        mem += static_cast<double>(pc.du[s]) * (pc.seg_hi - pc.seg_lo);
      if (mem < best || (mem == best && u[s] < bestc)) {
        best = mem;
        bestc = u[s];
        x[static_cast<size_t>(g)] = static_cast<int32_t>(s);
      }
    }
  }
  set_state(x);
}

uint64_t GroupSearch::next() {
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return rng_;
}

void GroupSearch::st_add(int node, int32_t l, int32_t r, int32_t lo, int32_t hi, int64_t v) {
  if (hi <= l || r <= lo) return;
  size_t n = static_cast<size_t>(node);
  if (lo <= l && r <= hi) {
    mx_[n] += v;
    lz_[n] += v;
    return;
  }
  int32_t mid = (l + r) / 2;
  st_add(2 * node, l, mid, lo, hi, v);
  st_add(2 * node + 1, mid, r, lo, hi, v);
  mx_[n] = std::max(mx_[2 * n], mx_[2 * n + 1]) + lz_[n];
}

int64_t GroupSearch::st_max(int node, int32_t l, int32_t r, int32_t lo, int32_t hi) const {
  if (hi <= l || r <= lo) return INT64_MIN / 4;
  size_t n = static_cast<size_t>(node);
  if (lo <= l && r <= hi) return mx_[n];
  int32_t mid = (l + r) / 2;
  return std::max(st_max(2 * node, l, mid, lo, hi), st_max(2 * node + 1, mid, r, lo, hi)) + lz_[n];
}

void GroupSearch::st_over(int node, int32_t l, int32_t r, int64_t add, std::vector<int32_t>& out,
                          size_t cap) const {
  size_t n = static_cast<size_t>(node);
  if (out.size() >= cap || mx_[n] + add <= m_.limit || l >= nseg_) return;
  if (r - l == 1) {
    out.push_back(l);
    return;
  }
  int32_t mid = (l + r) / 2;
  st_over(2 * node, l, mid, add + lz_[n], out, cap);
  st_over(2 * node + 1, mid, r, add + lz_[n], out, cap);
}

int64_t GroupSearch::overflow() const {
  if (m_.limit < 0 || nseg_ == 0) return 0;
  return std::max<int64_t>(0, root_max() - m_.limit);
}

void GroupSearch::set_state(const std::vector<int32_t>& x) {
  x_ = x;
  std::fill(mx_.begin(), mx_.end(), INT64_MIN / 4);
  std::fill(lz_.begin(), lz_.end(), 0);
  // Leaves hold the baseline; padding leaves stay very negative.
  for (int32_t s = 0; s < nseg_; ++s) mx_[static_cast<size_t>(size_ + s)] = m_.base[static_cast<size_t>(s)];
  // The tree is addressed as node 1 over [0, size_), so fill leaves at size_+s and build up.
  for (int i = size_ - 1; i >= 1; --i)
    mx_[static_cast<size_t>(i)] = std::max(mx_[static_cast<size_t>(2 * i)], mx_[static_cast<size_t>(2 * i + 1)]);
  for (int32_t g = 0; g < m_.num_groups(); ++g)
    for (const auto& pc : m_.pieces[static_cast<size_t>(g)]) {
      int64_t d = pc.du[static_cast<size_t>(x_[static_cast<size_t>(g)])];
      if (d != 0) st_add(pc.seg_lo, pc.seg_hi, d);
    }
  cost_ = 0;
  bad_ = 0;
  for (int32_t g = 0; g < m_.num_groups(); ++g)
    cost_ += m_.unary[static_cast<size_t>(g)][static_cast<size_t>(x_[static_cast<size_t>(g)])];
  for (const auto& e : m_.edges) {
    Cost c = m_.edge_cost(e, x_[static_cast<size_t>(e.a)], x_[static_cast<size_t>(e.b)]);
    if (std::isinf(c)) ++bad_; else cost_ += c;
  }
}

void GroupSearch::change_usage(int32_t g, int32_t from, int32_t to) {
  if (from == to) return;
  for (const auto& pc : m_.pieces[static_cast<size_t>(g)]) {
    int64_t d = pc.du[static_cast<size_t>(to)] - pc.du[static_cast<size_t>(from)];
    if (d != 0) st_add(pc.seg_lo, pc.seg_hi, d);
  }
}

double GroupSearch::lambda_sum(int32_t lo, int32_t hi) const {
  auto prefix = [&](int32_t i) {
    double s = 0;
    for (; i > 0; i -= i & -i) s += fen_[static_cast<size_t>(i)];
    return s;
  };
  return prefix(hi) - prefix(lo);
}

void GroupSearch::lambda_add(int32_t seg, double v) {
  lam_[static_cast<size_t>(seg)] += v;
  for (int32_t i = seg + 1; i <= nseg_; i += i & -i) fen_[static_cast<size_t>(i)] += v;
}

void GroupSearch::lambda_decay(double f) {
  std::fill(fen_.begin(), fen_.end(), 0.0);
  for (int32_t s = 0; s < nseg_; ++s) {
    lam_[static_cast<size_t>(s)] *= f;
    if (lam_[static_cast<size_t>(s)] < 1e-12) lam_[static_cast<size_t>(s)] = 0;
  }
  // Linear-time Fenwick build.
  for (int32_t i = 1; i <= nseg_; ++i) {
    fen_[static_cast<size_t>(i)] += lam_[static_cast<size_t>(i - 1)];
    int32_t j = i + (i & -i);
    if (j <= nseg_) fen_[static_cast<size_t>(j)] += fen_[static_cast<size_t>(i)];
  }
}

void GroupSearch::pick_block(int32_t target) {
  for (int32_t g : block_) {
    in_block_[static_cast<size_t>(g)] = 0;
    pos_[static_cast<size_t>(g)] = -1;
  }
  block_.clear();
  parent_edge_.clear();
  int32_t r = static_cast<int32_t>(next() % static_cast<uint64_t>(m_.num_groups()));
  block_.push_back(r);
  parent_edge_.push_back(-1);
  in_block_[static_cast<size_t>(r)] = 1;
  pos_[static_cast<size_t>(r)] = 0;
  std::vector<int32_t> cand;
  for (auto [e, a] : m_.adj[static_cast<size_t>(r)]) {
    const auto& ed = m_.edges[static_cast<size_t>(e)];
    cand.push_back(a ? ed.b : ed.a);
  }
  double work = 0;
  while (static_cast<int32_t>(block_.size()) < target && !cand.empty()) {
    size_t k = next() % cand.size();
    int32_t w = cand[k];
    cand[k] = cand.back();
    cand.pop_back();
    if (in_block_[static_cast<size_t>(w)]) continue;
    int32_t links = 0, link_edge = -1;
    for (auto [e, a] : m_.adj[static_cast<size_t>(w)]) {
      const auto& ed = m_.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      if (in_block_[static_cast<size_t>(o)]) {
        ++links;
        link_edge = e;
      }
    }
    if (links != 1) continue;
    double add = static_cast<double>(m_.edges[static_cast<size_t>(link_edge)].m.size());
    if (work + add > kMaxBlockWork) continue;
    work += add;
    pos_[static_cast<size_t>(w)] = static_cast<int32_t>(block_.size());
    block_.push_back(w);
    parent_edge_.push_back(link_edge);
    in_block_[static_cast<size_t>(w)] = 1;
    for (auto [e, a] : m_.adj[static_cast<size_t>(w)]) {
      const auto& ed = m_.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      if (!in_block_[static_cast<size_t>(o)]) cand.push_back(o);
    }
  }
}

bool GroupSearch::block_move(bool perturb) {
  int32_t target = 1 << (next() % 7);
  pick_block(target);
  size_t nb = block_.size();
  std::vector<std::vector<double>> f(nb);
  const bool memory = m_.limit >= 0 && nseg_ > 0 && pen_ == nullptr;
  const int64_t cur_over = memory ? overflow() : 0;
  for (size_t i = 0; i < nb; ++i) {
    int32_t g = block_[i];
    const auto& u = m_.unary[static_cast<size_t>(g)];
    auto& fi = f[i];
    fi.assign(u.begin(), u.end());
    int32_t xg = x_[static_cast<size_t>(g)];
    for (auto [e, a] : m_.adj[static_cast<size_t>(g)]) {
      const auto& ed = m_.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      if (in_block_[static_cast<size_t>(o)]) continue;
      int32_t xo = x_[static_cast<size_t>(o)];
      for (size_t s = 0; s < fi.size(); ++s) {
        Cost c = a ? m_.edge_cost(ed, static_cast<int32_t>(s), xo) : m_.edge_cost(ed, xo, static_cast<int32_t>(s));
        fi[s] += std::isinf(c) ? kBig : c;
      }
    }
    if (pen_ != nullptr) {
      const auto& pg = (*pen_)[static_cast<size_t>(g)];
      for (size_t s = 0; s < fi.size(); ++s) fi[s] += pg[s];
    }
    if (memory) {
      for (const auto& pc : m_.pieces[static_cast<size_t>(g)]) {
        double lam = lambda_sum(pc.seg_lo, pc.seg_hi);
        int64_t room = cur_over == 0 ? m_.limit - (st_max(pc.seg_lo, pc.seg_hi) - pc.du[static_cast<size_t>(xg)])
                                     : INT64_MAX;
        for (size_t s = 0; s < fi.size(); ++s) {
          if (pc.du[s] > room) fi[s] += kBig;
          fi[s] += lam * static_cast<double>(pc.du[s]);
        }
      }
    }
    if (perturb) {
      double lo = kInfCost, hi = -kInfCost;
      for (double v : fi)
        if (v < kBig) { lo = std::min(lo, v); hi = std::max(hi, v); }
      double scale = hi > lo ? (hi - lo) : 1.0;
      for (double& v : fi) v += scale * static_cast<double>(next() % 1024) / 1024.0;
    }
  }
  // Min-sum DP from the leaves up (children come after their parents in block_).
  std::vector<std::vector<int32_t>> arg(nb);
  for (size_t i = nb; i-- > 1;) {
    const auto& ed = m_.edges[static_cast<size_t>(parent_edge_[i])];
    int32_t g = block_[i];
    bool g_is_a = ed.a == g;
    int32_t p = g_is_a ? ed.b : ed.a;
    size_t pi = static_cast<size_t>(pos_[static_cast<size_t>(p)]);
    size_t np = f[pi].size(), ng = f[i].size();
    arg[i].assign(np, 0);
    for (size_t sp = 0; sp < np; ++sp) {
      double best = kInfCost;
      int32_t bs = 0;
      for (size_t sg = 0; sg < ng; ++sg) {
        Cost c = g_is_a ? ed.m[sg * np + sp] : ed.m[sp * ng + sg];
        double v = f[i][sg] + (std::isinf(c) ? kBig : c);
        if (v < best) { best = v; bs = static_cast<int32_t>(sg); }
      }
      f[pi][sp] += best;
      arg[i][sp] = bs;
    }
  }
  std::vector<int32_t> y(nb);
  y[0] = static_cast<int32_t>(std::min_element(f[0].begin(), f[0].end()) - f[0].begin());
  for (size_t i = 1; i < nb; ++i) {
    const auto& ed = m_.edges[static_cast<size_t>(parent_edge_[i])];
    int32_t p = ed.a == block_[i] ? ed.b : ed.a;
    y[i] = arg[i][static_cast<size_t>(y[static_cast<size_t>(pos_[static_cast<size_t>(p)])])];
  }
  // Exact evaluation of the change.
  Cost dcost = 0, dpen = 0;
  int64_t dbad = 0;
  bool same = true;
  for (size_t i = 0; i < nb; ++i) {
    int32_t g = block_[i];
    int32_t xo = x_[static_cast<size_t>(g)], yn = y[i];
    same &= xo == yn;
    if (pen_ != nullptr)
      dpen += (*pen_)[static_cast<size_t>(g)][static_cast<size_t>(yn)] - (*pen_)[static_cast<size_t>(g)][static_cast<size_t>(xo)];
    dcost += m_.unary[static_cast<size_t>(g)][static_cast<size_t>(yn)] -
             m_.unary[static_cast<size_t>(g)][static_cast<size_t>(xo)];
    for (auto [e, a] : m_.adj[static_cast<size_t>(g)]) {
      const auto& ed = m_.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      int32_t po = pos_[static_cast<size_t>(o)];
      if (po >= 0 && o < g) continue;  // inner edge counted once
      int32_t xo2 = x_[static_cast<size_t>(o)], yo2 = po >= 0 ? y[static_cast<size_t>(po)] : xo2;
      Cost c0 = a ? m_.edge_cost(ed, xo, xo2) : m_.edge_cost(ed, xo2, xo);
      Cost c1 = a ? m_.edge_cost(ed, yn, yo2) : m_.edge_cost(ed, yo2, yn);
      if (std::isinf(c0)) --dbad; else dcost -= c0;
      if (std::isinf(c1)) ++dbad; else dcost += c1;
    }
  }
  ++stats_.proposals;
  if (same) return false;
  for (size_t i = 0; i < nb; ++i) change_usage(block_[i], x_[static_cast<size_t>(block_[i])], y[i]);
  int64_t new_over = memory ? overflow() : 0;
  bool accept;
  if (pen_ != nullptr) {
    accept = perturb ? dbad <= 0 : (dbad < 0 || (dbad == 0 && dcost + dpen <= 0));
  } else if (cur_over > 0) {
    accept = new_over < cur_over || (new_over == cur_over && (dbad < 0 || (dbad == 0 && dcost <= 0)));
  } else if (new_over > 0) {
    accept = false;
  } else if (perturb) {
    accept = dbad <= 0;
  } else {
    accept = dbad < 0 || (dbad == 0 && dcost <= 0);
  }
  if (!accept && cur_over == 0 && new_over > 0 && memory) {
    // Price the overflowing segments so that this proposal's gain is used up next time.
    ++stats_.memory_rejects;
    std::vector<int32_t> over;
    st_over(1, 0, size_, 0, over, 8);
    double gain = std::max(1.0, -dcost);
    for (int32_t t : over) {
      int64_t inc = 0;
      for (size_t i = 0; i < nb; ++i) {
        int32_t g = block_[i];
        for (const auto& pc : m_.pieces[static_cast<size_t>(g)])
          if (pc.seg_lo <= t && t < pc.seg_hi)
            inc += pc.du[static_cast<size_t>(y[i])] - pc.du[static_cast<size_t>(x_[static_cast<size_t>(g)])];
      }
      if (inc > 0) lambda_add(t, 1.2 * gain / static_cast<double>(inc) / static_cast<double>(over.size()));
    }
  }
  if (!accept) {
    for (size_t i = 0; i < nb; ++i) change_usage(block_[i], y[i], x_[static_cast<size_t>(block_[i])]);
    return false;
  }
  for (size_t i = 0; i < nb; ++i) x_[static_cast<size_t>(block_[i])] = y[i];
  cost_ += dcost;
  bad_ += dbad;
  ++stats_.accepted;
  return dbad < 0 || (pen_ != nullptr ? dcost + dpen < 0 : dcost < 0) || new_over < cur_over;
}

int64_t GroupSearch::moves(int64_t n) {
  int64_t improved = 0;
  for (int64_t i = 0; i < n; ++i) improved += block_move(false) ? 1 : 0;
  return improved;
}

int32_t GroupSearch::argmax_segment() const {
  int node = 1;
  int32_t l = 0, r = size_;
  while (r - l > 1) {
    size_t n = static_cast<size_t>(node);
    int32_t mid = (l + r) / 2;
    node = mx_[2 * n] >= mx_[2 * n + 1] ? 2 * node : 2 * node + 1;
    if (node & 1) l = mid; else r = mid;
  }
  return l;
}

bool GroupSearch::repair(std::chrono::steady_clock::time_point deadline) {
  if (m_.limit < 0 || nseg_ == 0) return true;
  const int32_t ng = m_.num_groups();
  for (int64_t it = 0; overflow() > 0; ++it) {
    if ((it & 15) == 0 && std::chrono::steady_clock::now() >= deadline) return false;
    const int64_t peak = root_max();
    const int64_t over = peak - m_.limit;
    const int32_t t = argmax_segment();
    double best = kInfCost;
    int32_t bg = -1, bs = -1;
    for (int32_t g = 0; g < ng; ++g) {
      const auto& pcs = m_.pieces[static_cast<size_t>(g)];
      const size_t xg = static_cast<size_t>(x_[static_cast<size_t>(g)]);
      bool covers = false;
      for (const auto& pc : pcs)
        if (pc.seg_lo <= t && t < pc.seg_hi && pc.du[xg] > 0) { covers = true; break; }
      if (!covers) continue;
      const auto& u = m_.unary[static_cast<size_t>(g)];
      for (size_t s = 0; s < u.size(); ++s) {
        if (s == xg) continue;
        int64_t saved = 0;
        bool ok = true;
        for (const auto& pc : pcs) {
          int64_t d = pc.du[s] - pc.du[xg];
          if (pc.seg_lo <= t && t < pc.seg_hi) saved -= d;
          // Must not push any other segment to the current peak or above.
          if (d > 0 && st_max(pc.seg_lo, pc.seg_hi) + d >= peak) { ok = false; break; }
        }
        if (!ok || saved <= 0) continue;
        double dc = u[s] - u[xg];
        int64_t dbad = 0;
        for (auto [e, a] : m_.adj[static_cast<size_t>(g)]) {
          const auto& ed = m_.edges[static_cast<size_t>(e)];
          int32_t o = a ? ed.b : ed.a;
          int32_t xo = x_[static_cast<size_t>(o)];
          Cost c0 = a ? m_.edge_cost(ed, static_cast<int32_t>(xg), xo) : m_.edge_cost(ed, xo, static_cast<int32_t>(xg));
          Cost c1 = a ? m_.edge_cost(ed, static_cast<int32_t>(s), xo) : m_.edge_cost(ed, xo, static_cast<int32_t>(s));
          if (std::isinf(c1)) { ++dbad; break; }
          if (std::isinf(c0)) --dbad; else dc -= c0;
          dc += c1;
        }
        if (dbad > 0) continue;
        double score = dc / static_cast<double>(std::min(saved, over));
        if (score < best) { best = score; bg = g; bs = static_cast<int32_t>(s); }
      }
    }
    if (bg < 0) return false;
    // Apply the single-group move.
    const size_t xg = static_cast<size_t>(x_[static_cast<size_t>(bg)]);
    cost_ += m_.unary[static_cast<size_t>(bg)][static_cast<size_t>(bs)] - m_.unary[static_cast<size_t>(bg)][xg];
    for (auto [e, a] : m_.adj[static_cast<size_t>(bg)]) {
      const auto& ed = m_.edges[static_cast<size_t>(e)];
      int32_t o = a ? ed.b : ed.a;
      int32_t xo = x_[static_cast<size_t>(o)];
      Cost c0 = a ? m_.edge_cost(ed, static_cast<int32_t>(xg), xo) : m_.edge_cost(ed, xo, static_cast<int32_t>(xg));
      Cost c1 = a ? m_.edge_cost(ed, bs, xo) : m_.edge_cost(ed, xo, bs);
      if (std::isinf(c0)) --bad_; else cost_ -= c0;
      if (std::isinf(c1)) ++bad_; else cost_ += c1;
    }
    change_usage(bg, static_cast<int32_t>(xg), bs);
    x_[static_cast<size_t>(bg)] = bs;
  }
  return true;
}

void GroupSearch::run(std::chrono::steady_clock::time_point deadline, SharedIncumbent& shared,
                      const std::atomic<bool>& stop) {
  if (m_.num_groups() == 0) {
    shared.offer(0, {});
    return;
  }
  int64_t since_improve = 0;
  Cost best_own = kInfCost;
  const int64_t patience = 20 * static_cast<int64_t>(m_.num_groups()) + 2000;
  for (int64_t it = 0;; ++it) {
    if ((it & 63) == 0 && (stop.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() >= deadline))
      break;
    bool improved = block_move(false);
    if (improved) since_improve = 0; else ++since_improve;
    if (overflow() == 0 && bad_ == 0 && cost_ < best_own) {
      best_own = cost_;
      shared.offer(cost_, x_);
    }
    if ((it & 4095) == 4095) lambda_decay(0.7);
    if (since_improve > patience) {
      since_improve = 0;
      ++stats_.restarts;
      std::vector<int32_t> from;
      {
        std::lock_guard<std::mutex> lock(shared.mu);
        if (shared.have && (next() % 2 == 0 || shared.cost < cost_)) from = shared.choice;
      }
      if (!from.empty()) set_state(from);
      best_own = cost_;
      // Kick: a few noisy block moves that may raise the cost but keep memory and pairs valid.
      int kicks = 1 + static_cast<int>(next() % 8);
      for (int k = 0; k < kicks; ++k) block_move(true);
    }
  }
}

}  // namespace autoshard

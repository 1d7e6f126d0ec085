/// plan_pipeline: the pipelined plan of one parameter-gathering variant, or -- where the choice
/// is the planner's (PipelineOptions::choose_params_gathered_once) -- of both, the better kept.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/pipeline_layout.h"
#include "pipeline/pipeline_variant.h"

namespace autoshard {

using namespace pipeline_detail;  // NOLINT(google-build-using-namespace): this layer's own detail

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// a is preferred to b: it fits where b does not, else it is faster (ties: a).
bool preferred(const PipelinePlan& a, const PipelinePlan& b) {
  const bool fa = ranks_fit(a), fb = ranks_fit(b);
  if (fa != fb) return fa;
  return a.step_us <= b.step_us;
}

/// popt with the parameters gathered once or per use, the planner's choice off.
PipelineOptions gathered(const PipelineOptions& popt, bool once) {
  PipelineOptions o = popt;
  o.params_gathered_once = once;
  o.choose_params_gathered_once = false;
  o.on_memory_priced = nullptr;
  return o;
}

/// One progress callback fed by both variants' trackers: their reports never overlap, and the
/// per-use variant's say which variant they come from.
class SharedProgress {
 public:
  explicit SharedProgress(PipelineProgressFn fn) : fn_(std::move(fn)) {}
  PipelineProgressFn labelled(std::string label) {
    if (!fn_) return nullptr;
    return [this, label = std::move(label)](const PipelineProgress& p) {
      PipelineProgress q = p;
      q.searching = label + q.searching;
      const std::lock_guard<std::mutex> lock(mu_);
      fn_(q);
    };
  }

 private:
  PipelineProgressFn fn_;
  std::mutex mu_;
};

/// The per-use variant, planned on a thread of its own from start() (the first call; from any
/// thread) to finish().  Its -v lines are kept and replayed by finish(), after the once
/// variant's, so the log reads as if the two ran one after the other.  Its search does not
/// depend on when it starts: it reads nothing of the other variant but, once its plan is
/// assembled, the once plan (set_rival), to price its ranks' memory only where its own plan
/// is the one kept (PipelineOptions::price_ranks_after).
class PerUseVariant {
 public:
  PerUseVariant(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, PipelineOptions popt)
      : g_(g), mesh_(mesh), opt_(opt), popt_(std::move(popt)), say_(opt.progress) {
    if (say_)
      opt_.progress = [this](std::string_view line) {
        const std::lock_guard<std::mutex> lock(log_mu_);
        log_.emplace_back(line);
      };
    popt_.rank_memory_bound = false;
    popt_.price_ranks_after = [this](const PipelinePlan& mine) { return kept(mine); };
  }
  PerUseVariant(const PerUseVariant&) = delete;
  PerUseVariant& operator=(const PerUseVariant&) = delete;
  ~PerUseVariant() {
    abandon();  // its plan is not wanted: it need not wait for the once plan
    if (thread_.joinable()) thread_.join();
  }

  /// The once variant's plan (nullptr: it has none), once it is known.
  void set_rival(const PipelinePlan* once) {
    const std::lock_guard<std::mutex> lock(rival_mu_);
    if (rival_known_) return;
    rival_known_ = true;
    if (once) rival_ = *once;
    rival_cv_.notify_all();
  }

  void start() {
    std::call_once(started_, [this] {
      running_ = true;
      thread_ = std::thread([this] { run(); });
    });
  }
  /// Whether start() was called: the once search priced memory.
  bool started() const { return running_; }

  /// Its plan (started now if it was not), or nullopt with the reason in `no_plan` when it has
  /// none; errors other than "nothing fits" are rethrown.
  std::optional<PipelinePlan> finish(std::exception_ptr& no_plan) {
    start();
    thread_.join();
    for (const std::string& line : log_) say_(line);
    if (!error_) return std::move(plan_);
    try {
      std::rethrow_exception(error_);
    } catch (const std::runtime_error&) {
      no_plan = error_;
    }
    return std::nullopt;
  }

 private:
  /// Whether `mine` would be kept against the once plan (waits for set_rival).
  bool kept(const PipelinePlan& mine) {
    std::unique_lock<std::mutex> lock(rival_mu_);
    rival_cv_.wait(lock, [this] { return rival_known_; });
    return !abandoned_ && (!rival_ || preferred(mine, *rival_));
  }
  void abandon() {
    const std::lock_guard<std::mutex> lock(rival_mu_);
    if (!rival_known_) abandoned_ = true;
    rival_known_ = true;
    rival_cv_.notify_all();
  }

  void run() {
    try {
      plan_ = plan_with_gather(g_, mesh_, opt_, popt_).plan;
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  const Graph& g_;
  const Mesh& mesh_;
  PlannerOptions opt_;
  PipelineOptions popt_;
  const std::function<void(std::string_view)> say_;
  std::once_flag started_;
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
  std::optional<PipelinePlan> plan_;
  std::exception_ptr error_;
  std::mutex rival_mu_;
  std::condition_variable rival_cv_;
  bool rival_known_ = false, abandoned_ = false;
  std::optional<PipelinePlan> rival_;
};

}  // namespace

PipelinePlan plan_pipeline(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const PipelineOptions& popt) {
  if (!popt.choose_params_gathered_once) return plan_with_gather(g, mesh, opt, popt).plan;
  // Gathered once, and per use where memory shaped that plan.  The once variant's costs are
  // per use's with the parameter gathers weighted 1 / M (planner/problem_builder.cc
  // scale_once_per_step), so for every stage its optimum is no above per use's and only
  // memory (the gathered copies) can make per use faster.  Where memory cost the once search
  // nothing (VariantPlan::memory_bound), per use is not planned: its stages cannot beat these,
  // and this bound, made of memory-free stage bounds only, holds for per use's plans too.
  // Else per use is planned, on its own thread from the moment the once search first prices
  // memory (which makes the once plan memory-bound): the two searches overlap, each filling
  // the cores the other leaves idle between its parallel rounds (llama3-405b 8x8x8: each alone
  // keeps 1.4 of 2 cores busy).  Deterministic: per use reads nothing of the once search, and
  // whether it is planned follows from that search alone.  Per use searches on its ranks'
  // memory-free floors and prices their memory after, only where its plan is kept: where the
  // once plan is, those priced solves (as many as the once search's) would only tighten the
  // bound the two share (the lesser of theirs).  Its plan is the same either way.
  const auto t0 = std::chrono::steady_clock::now();
  SharedProgress progress(popt.on_progress);
  PipelineOptions per_use_opt = gathered(popt, false);
  per_use_opt.on_progress = progress.labelled("per use: ");
  PerUseVariant per_use_run(g, mesh, opt, std::move(per_use_opt));
  PipelineOptions once_opt = gathered(popt, true);
  once_opt.on_progress = progress.labelled("");
  once_opt.on_memory_priced = [&per_use_run] { per_use_run.start(); };
  std::optional<VariantPlan> once;
  std::optional<PipelineCutoff> once_cut;
  try {
    once = plan_with_gather(g, mesh, opt, once_opt);
  } catch (const PipelineCutoff& c) {
    once_cut = c;
  } catch (const std::runtime_error&) {  // no plan of this variant: per use's
  }
  per_use_run.set_rival(once ? &once->plan : nullptr);
  if (once && !once->memory_bound) return std::move(once->plan);
  // Cut off on memory-free bounds alone (memory was never priced): they hold for per use too.
  if (once_cut && !per_use_run.started()) throw *once_cut;
  std::exception_ptr no_plan;
  std::optional<PipelinePlan> per_use = per_use_run.finish(no_plan);
  if (!per_use) {
    // Per use cut off: its plans are bounded by its bound, no plan of it: unbounded.
    double per_use_bound = kInf;
    try {
      std::rethrow_exception(no_plan);
    } catch (const PipelineCutoff& c) {
      per_use_bound = c.lower_bound_us();
    } catch (const std::runtime_error&) {
    }
    if (once) {
      PipelinePlan& pl = once->plan;
      pl.lower_bound_us = std::min(pl.lower_bound_us, per_use_bound);
      pl.gap = pl.step_us > 0 ? (pl.step_us - pl.lower_bound_us) / pl.step_us : 0;
      return std::move(pl);
    }
    if (!once_cut) std::rethrow_exception(no_plan);  // neither variant has a plan: per use's reason
    throw PipelineCutoff(std::min(once_cut->lower_bound_us(), per_use_bound));  // neither beats the cutoff
  }
  if (!once) return std::move(*per_use);
  // Each variant's bound holds for its plans: the lesser holds for both.
  const double lower = std::min(per_use->lower_bound_us, once->plan.lower_bound_us);
  const int32_t solves = per_use->intra_op_solves + once->plan.intra_op_solves;
  const int32_t stopped = per_use->clock_stopped_solves + once->plan.clock_stopped_solves;
  PipelinePlan best = preferred(*per_use, once->plan) ? std::move(*per_use) : std::move(once->plan);
  best.lower_bound_us = std::min(lower, best.step_us);
  best.gap = best.step_us > 0 ? (best.step_us - best.lower_bound_us) / best.step_us : 0;
  best.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  best.intra_op_solves = solves;
  best.clock_stopped_solves = stopped;
  return best;
}

}  // namespace autoshard

#include "io/state.h"

#include <fmt/format.h>

#include "io/container.h"
#include "io/state_codec.h"
#include "ir/file_util.h"

#ifndef AUTOSHARD_VERSION
#define AUTOSHARD_VERSION "unknown"
#endif

namespace autoshard {

std::string_view autoshard_version() { return AUTOSHARD_VERSION; }

std::string state_bytes(const ShardingOptimizer& opt, size_t* matrices_stored) {
  StateRef s;
  s.writer_version = autoshard_version();
  s.graph = &opt.graph();
  s.mesh = &opt.mesh();
  s.options = &opt.options();
  s.constraints = &opt.constraints();
  s.problem = opt.built_problem();
  if (opt.solution()) s.solution = &*opt.solution();
  // The assignment belongs to the problem it was solved on: keep it only while that problem
  // is the current one (a constraint added since resets the problem).
  const std::vector<StrategyIdx> choice = opt.solution_choice();
  bool fits = s.problem && s.solution &&
              static_cast<PNodeIdx>(choice.size()) == s.problem->problem.num_nodes();
  for (size_t v = 0; fits && v < choice.size(); ++v)
    fits = choice[v] >= 0 && choice[v] < s.problem->problem.nodes[v].num_strategies();
  if (fits) s.solution_choice = &choice;
  return pack_container(FileKind::kState, encode_state(s, matrices_stored));
}

void save_state(const ShardingOptimizer& opt, const std::string& path) {
  write_file_atomic(path, state_bytes(opt));
}

ShardingOptimizer state_from_bytes(std::string_view bytes, std::string_view origin) {
  StateParts s = decode_state(unpack_container(FileKind::kState, bytes, origin), origin);
  return ShardingOptimizer::from_parts(std::move(s.graph), std::move(s.mesh), std::move(s.options),
                                       std::move(s.constraints), std::move(s.problem),
                                       std::move(s.solution), std::move(s.solution_choice));
}

ShardingOptimizer load_state(const std::string& path) {
  return state_from_bytes(read_text_file(path), path);
}

std::string replay_bytes(const ShardingOptimizer& opt) {
  ReplayParts r;
  r.writer_version = std::string(autoshard_version());
  r.graph = opt.graph();
  r.mesh = opt.mesh();
  r.options = opt.options();
  r.constraints = opt.constraints();
  return pack_container(FileKind::kReplay, encode_replay(r), 9);
}

void save_replay(const ShardingOptimizer& opt, const std::string& path) {
  write_file_atomic(path, replay_bytes(opt));
}

ShardingOptimizer replay_from_bytes(std::string_view bytes, std::string_view origin,
                                    ReplayInfo* info) {
  ReplayParts r = decode_replay(unpack_container(FileKind::kReplay, bytes, origin), origin);
  if (info) {
    info->writer_version = r.writer_version;
    info->note = fmt::format(
        "regenerated from a replay written by autoshard {}: strategies and costs come from this "
        "autoshard ({})",
        r.writer_version.empty() ? "(unknown)" : r.writer_version, autoshard_version());
  }
  ShardingOptimizer so(std::move(r.graph), std::move(r.mesh), std::move(r.options));
  for (Constraint& c : r.constraints) so.add_constraint(std::move(c));
  return so;
}

ShardingOptimizer load_replay(const std::string& path, ReplayInfo* info) {
  return replay_from_bytes(read_text_file(path), path, info);
}

}  // namespace autoshard

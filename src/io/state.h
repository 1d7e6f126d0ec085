#pragma once
/// Saving and loading a planning session.
///
/// State (.ap): everything a ShardingOptimizer holds -- graph, mesh with topology and hardware,
/// options, constraints, the built problem (strategies, node costs and usages, edges with their
/// shared matrices stored once) and the last solution with all its figures -- so that a
/// loaded optimizer prints, explains, pins, re-solves and diffs without the model or any
/// regeneration.  Replay (.replay): only the inputs of planning (graph with tensor metadata,
/// mesh, topology, hardware, options, constraints); loading regenerates strategies and costs
/// with the current code, so replays survive changes of the rules and the cost model.
///
/// Both are a protobuf payload (io/state.proto) in the container of io/container.h (magic,
/// version, sizes, CRC-32, zstd).  Loading executes nothing and validates every index before
/// use: a truncated, corrupted or hostile file gives a one-line std::runtime_error
/// "<path>: <where>: <why>", never a crash.  Writing goes through a temporary and a rename.
#include <string>
#include <string_view>

#include "planner/sharding_optimizer.h"
#include "planner/solution_file.h"

namespace autoshard {

/// The version of autoshard that writes files ("0.1.0").
std::string_view autoshard_version();

/// State file bytes; `matrices_stored` (tests) receives the number of distinct edge matrices.
std::string state_bytes(const ShardingOptimizer& opt, size_t* matrices_stored = nullptr);
void save_state(const ShardingOptimizer& opt, const std::string& path);
/// `origin` names the source in errors.
ShardingOptimizer state_from_bytes(std::string_view bytes, std::string_view origin);
ShardingOptimizer load_state(const std::string& path);

struct ReplayInfo {
  std::string writer_version;  ///< the autoshard that wrote the replay
  std::string note;            ///< "regenerated from a replay written by autoshard X ..."
};
std::string replay_bytes(const ShardingOptimizer& opt);
void save_replay(const ShardingOptimizer& opt, const std::string& path);
ShardingOptimizer replay_from_bytes(std::string_view bytes, std::string_view origin,
                                    ReplayInfo* info = nullptr);
/// Regenerates the optimizer with the current rules and cost model (the problem is built on
/// the next solve); `info` receives the writer's version and a note saying so.
ShardingOptimizer load_replay(const std::string& path, ReplayInfo* info = nullptr);

}  // namespace autoshard

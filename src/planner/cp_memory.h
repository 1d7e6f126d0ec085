#pragma once
/// The K/V buffers of context-parallel attention in the solver's memory model.
///
/// A CP attention op holds, while it runs, the K/V chunks it receives (and in the backward the
/// dK/dV it accumulates) beyond its own shards: cost/context_parallel.h cp_buffer_bytes (two
/// chunks for the ring, P for the all-gather).  They are neither an output nor live past the op,
/// so no usage of the op's node (its outputs, live until their last reader) can hold them.  Each
/// op with a CP strategy gets an auxiliary problem node instead: live at the op's time point
/// only, zero cost, one strategy per strategy of the op with the buffer bytes as its usage,
/// tied to the op by a zero-or-infinite diagonal edge (origin slot kMemoryTieSlot, like the
/// parameter-memory shadows), so that it always takes the op's strategy.  The plan's peak and
/// the memory limit then count the buffers at the op's time point and nowhere else.
#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// Adds the buffer node of every op node whose strategies hold CP buffers (none when no
/// strategy does), recording each in bp.cp_buffers.  Call after the op nodes' usages are final
/// (in-flight scaling, recomputation), before the memory limit's shadows.
void add_cp_buffer_nodes(const Graph& g, const Mesh& mesh, BuiltProblem& bp);

/// The buffer nodes of `bp`, read back from its memory-tie edges whose consumer is an op (a
/// saved state stores the nodes and edges, not this list); in build order.
std::vector<BuiltProblem::CpBuffer> cp_buffers_from_edges(const Graph& g, const BuiltProblem& bp);

/// least_usage_choice (every node at its least usage: the memory floor) with each buffer node
/// on its owner's strategy wherever that is one of its least-usage strategies too (any strategy
/// without CP holds 0 bytes).  Still a floor, and the layout is a plan whenever the owners'
/// least-usage strategies hold no buffers -- independently the buffer nodes would take their
/// first 0-byte strategy and break the tie edges.
std::vector<StrategyIdx> least_usage_layout(const BuiltProblem& bp);

}  // namespace autoshard

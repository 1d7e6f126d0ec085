#pragma once
/// Node cost of a strategy, with the communication a context-parallel attention does inside
/// the op (cost/context_parallel.h) priced on top of its compute.  Every other strategy costs
/// its roofline compute time on the local shards (cost/compute.h).
#include "cost/collective.h"
#include "cost/context_parallel.h"
#include "ir/graph.h"
#include "mesh/mesh.h"
#include "strategy/strategy.h"

namespace autoshard {

/// Node cost = compute_us + op_comm_us: op_comm_us is the exposed part of the op-internal
/// communication (0 unless s.cp is active).  The overlap objective counts only compute_us as
/// a window other communication can hide behind (the compute stream is waiting, not working,
/// during op_comm_us), and the simulator runs compute_us + op_comm_us on the compute stream.
struct NodeCost {
  double compute_us = 0;
  double op_comm_us = 0;
  double transfer_us = 0;  ///< all op-internal communication on the cp dim, hidden or not
  double total_us() const { return compute_us + op_comm_us; }
};

/// Cost of op node `x` under strategy `s` (`model` prices the op-internal communication).
NodeCost node_cost(const Node& x, const Strategy& s, const Mesh& mesh, CommModel model);

/// Drops from `strategies` the ring / all-gather strategy that the other of its pair (same
/// specs) dominates: no faster (node cost) and no smaller in the K/V buffers it holds while
/// it runs (cp_buffer_bytes); a tie in both keeps the ring.  The two share their edges,
/// outputs and compute window, so a dominated one could only make the problem larger; when
/// all-gather is faster but holds more (P x kv against ring's two chunks) both stay, for the
/// memory limit to choose.  Order is otherwise kept.
void drop_dominated_cp_kinds(const Node& x, std::vector<Strategy>& strategies, const Mesh& mesh,
                             CommModel model);

/// Bytes node `x` holds while it runs under strategy `s` beyond its inputs and outputs: the
/// K/V (dK/dV) buffers of a context-parallel attention (cost/context_parallel.h
/// cp_buffer_bytes); 0 for every other strategy.  The problem builder counts them at the op's
/// own time point, the simulator from the op's start to its end.
int64_t cp_buffer_bytes(const Node& x, const Strategy& s, const Mesh& mesh);

/// The ring / all-gather inputs of a context-parallel attention strategy: each rank's compute
/// of its queries against the whole sequence, and its K/V (and dK/dV) shard bytes.
CpAttentionInput cp_attention_input(const Node& x, const Strategy& s, const Mesh& mesh);

}  // namespace autoshard

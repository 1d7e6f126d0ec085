#pragma once
/// Reading and writing graphs in autoshard's graph JSON format, version 1
/// (docs/graph-format.md).  This is how traced PyTorch programs enter the planner, and how the
/// built-in models can be dumped for inspection or exchange.
#include <cstdint>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace autoshard {

/// The value of the "format" field and the newest "version" this build reads and writes.
inline constexpr std::string_view kGraphFormatName = "autoshard-graph";
inline constexpr int kGraphFormatVersion = 1;

/// Resource bounds of the reader: a file may claim any shape, but the sizes the planner derives
/// from shapes (elements, bytes, sums of bytes over the graph, times mesh and optimizer factors)
/// must stay far inside int64.  2^48 elements (256 TiB of bf16) and 2^56 bytes over all
/// tensors are orders of magnitude above any real model and leave 2^7 of headroom.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 48;
inline constexpr int64_t kMaxGraphBytes = int64_t{1} << 56;

/// Parses graph JSON text.  `origin` (usually the file name) starts every error message.
/// Throws std::runtime_error with a one-line message "<origin>: <where>: <why>", where <where>
/// is a JSON pointer (plus the node name when inside a node), e.g.
/// "g.json: /nodes/4/inputs/1 (node 'mm_1'): refers to unknown node 'foo'".
/// Unknown op names are accepted; the planner decides what to do with them.
Graph read_graph_json(std::string_view text, std::string_view origin);

/// Reads and parses a graph file (plain JSON).  Errors name the path.
Graph load_graph_file(const std::string& path);

/// Serialises a graph.  Deterministic: the same graph always gives the same bytes, one node
/// per line.  Throws std::runtime_error when the graph cannot be represented (e.g. a string
/// that is not valid UTF-8).
std::string write_graph_json(const Graph& g);

/// Writes write_graph_json(g) to `path` through a temporary file and a rename, so a failure
/// never leaves a half-written file behind.
void save_graph_file(const Graph& g, const std::string& path);

}  // namespace autoshard

#pragma once
/// Pieces of the autoshard._core module, one function per file (src/python/*.cc).
#include <pybind11/pybind11.h>

#include <string_view>

#include "ir/graph.h"

namespace autoshard::python {

/// ShardingOptimizer and the files and reports built on it (optimizer.cc).
void bind_optimizer(pybind11::module_& m);

/// The Graph of a graph dict (dicts, lists, tuples, str, int, float, bool, None), read in place
/// by the graph file reader (graph_dict.cc): the same checks and one-line messages,
/// std::runtime_error "<origin>: <pointer>: <why>", also for values JSON cannot hold.  Needs
/// the GIL.
Graph graph_from_python(pybind11::handle obj, std::string_view origin);

}  // namespace autoshard::python

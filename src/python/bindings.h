#pragma once
/// Pieces of the autoshard._core module, one function per file (src/python/*.cc).
#include <pybind11/pybind11.h>

#include <string_view>

#include <nlohmann/json.hpp>

namespace autoshard::python {

/// ShardingOptimizer and the files and reports built on it (optimizer.cc).
void bind_optimizer(pybind11::module_& m);

/// A graph dict (dicts, lists, tuples, str, int, float, bool, None) as the JSON value the graph
/// reader takes (graph_dict.cc).  Throws std::invalid_argument "<origin>: <pointer>: <why>" on
/// anything JSON cannot hold.  Needs the GIL.
nlohmann::json json_from_python(pybind11::handle obj, std::string_view origin);

}  // namespace autoshard::python

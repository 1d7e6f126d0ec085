#pragma once
/// Pieces of the autoshard._core module, one function per file (src/python/*.cc).
#include <pybind11/pybind11.h>

namespace autoshard::python {

/// ShardingOptimizer and the files and reports built on it (optimizer.cc).
void bind_optimizer(pybind11::module_& m);

}  // namespace autoshard::python

#pragma once
/// The graph reader on a document that is already a JSON value rather than text: the Python
/// binding converts a traced graph dict straight into one (src/python/graph_dict.cc), skipping
/// json.dumps and the text parse.  Kept apart from graph_json.h so that the many users of that
/// header do not pull in nlohmann/json.
#include <string_view>

#include <nlohmann/json.hpp>

#include "ir/graph.h"

namespace autoshard {

/// read_graph_json without the parse: the same checks, the same messages, the same Graph.
Graph read_graph_json_value(const nlohmann::json& j, std::string_view origin);

}  // namespace autoshard

#include "ir/graph_reader.h"

namespace autoshard::graph_reader {

void fail_at(std::string_view origin, const Path& p, std::string_view why) {
  std::string where = p.pointer();
  if (where.empty()) where = "top level";
  if (const std::string* n = p.node_name()) where += fmt::format(" (node '{}')", *n);
  throw std::runtime_error(one_line(fmt::format("{}: {}: {}", origin, where, why)));
}

}  // namespace autoshard::graph_reader

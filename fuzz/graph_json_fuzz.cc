/// libFuzzer harness for the graph JSON reader (src/ir/graph_json.h).  Besides "no crash, one-line
/// errors", it checks that every accepted graph survives a write/read round trip byte for byte
/// and that the derived sizes the planner uses (numel, bytes, parameter count) are computable.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "ir/graph.h"
#include "ir/graph_json.h"

using namespace autoshard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Graph g;
  try {
    g = read_graph_json(text, "fuzz.graph.json");
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.graph.json: ");
    return 0;
  }
  // Accepted graphs: sizes must not overflow (the reader bounds them) ...
  for (const Node& n : g.nodes)
    for (const TensorMeta& m : n.outputs) (void)m.bytes();
  (void)g.parameter_count();
  (void)g.uses();
  // ... and writing then reading gives the same graph and the same bytes.
  std::string once = write_graph_json(g);
  Graph back = read_graph_json(once, "roundtrip");
  std::string twice = write_graph_json(back);
  if (once != twice) fuzz::fail("graph JSON round trip changed the bytes");
  return 0;
}

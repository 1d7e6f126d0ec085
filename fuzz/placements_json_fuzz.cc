/// libFuzzer harness for the placements JSON reader (src/io/placements_json.h).  Placements are
/// read against a graph and a mesh; the harness uses a slice of the traced llama fixture
/// (fuzz/corpus/graph_json/llama2l_slice.json) on a 2x2 dp,tp H100 mesh, which is what the seed
/// placements (written by `autoshard plan -o`, scripts/fuzz.sh) were planned for.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "io/placements_json.h"
#include "ir/graph_json.h"
#include "mesh/hardware.h"

using namespace autoshard;

namespace {

struct Context {
  Graph graph;
  Mesh mesh;
};

const Context& context() {
  static const Context* c = [] {
    auto* ctx = new Context;
    ctx->graph = read_graph_json(fuzz::source_file("fuzz/corpus/graph_json/llama2l_slice.json"),
                                 "llama2l_slice.json");
    ctx->mesh = Mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100"));
    return ctx;
  }();
  return *c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Context& c = context();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto wanted = read_placements_json(text, "fuzz.placements.json", c.graph, c.mesh);
    if (wanted.size() != static_cast<size_t>(c.graph.size()))
      fuzz::fail("one entry per graph node expected");
    for (const auto& s : wanted)
      if (s) (void)output_spec_string(*s);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.placements.json: ");
  }
  return 0;
}

/// libFuzzer harness for the IOPDDL reader (src/problem/iopddl.h), plain and gzip.  Inputs that
/// start with the gzip magic go through the inflater as they are (corrupt streams, forged
/// trailers); every other input is parsed as plain JSON *and* gzip-compressed here and parsed
/// again, which must give the same result, so the fuzzer also reaches the JSON parser through
/// valid gzip streams.  Accepted instances are evaluated (all-zero choice) to exercise the
/// exact evaluator on whatever shapes the reader let through.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "problem/iopddl.h"

using namespace autoshard;

namespace {

std::string gzip(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) fuzz::fail("deflateInit2");
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) fuzz::fail("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

/// Either the parsed instance's canonical text or "error: <message>".
std::string outcome(const std::string& bytes) {
  try {
    IopddlInstance inst = parse_iopddl_bytes(bytes, "fuzz.iopddl.json");
    std::vector<StrategyIdx> zeros(inst.problem.nodes.size(), 0);
    (void)evaluate(inst, zeros);
    std::ostringstream os;
    write_iopddl_json(inst.problem, os);
    return os.str();
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.iopddl.json");
    return std::string("error: ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  std::string plain = outcome(bytes);
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return 0;
  if (outcome(gzip(bytes)) != plain) fuzz::fail("gzip and plain parses differ");
  return 0;
}

#pragma once
/// Seeds and input framing shared by the state and replay harnesses.
///
/// State and replay files end in a CRC-32 and a zstd payload (io/container.h), so random
/// mutations of a whole file almost never get past the checksum.  The harnesses therefore read
/// the first input byte as a mode: odd -> the rest is a whole file (the container checks:
/// magic, version, sizes, checksum, decompression); even -> the rest is a protobuf *payload*,
/// which the harness packs into a valid container first, so the fuzzer mutates what the decoder
/// and its index validation see.
///
/// Seeds are generated, not committed, since they follow the current format: with
/// AUTOSHARD_FUZZ_SEEDS=DIR set, LLVMFuzzerInitialize plans the harness graph (a slice of the
/// traced llama fixture) on a 2x2 mesh and writes unsolved, solved and pinned files to DIR in
/// both modes (scripts/fuzz.sh passes DIR as a seed corpus).
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/container.h"
#include "ir/graph_json.h"
#include "mesh/hardware.h"
#include "planner/sharding_optimizer.h"

namespace autoshard::fuzz {

inline ShardingOptimizer seed_optimizer() {
  Graph g = read_graph_json(source_file("fuzz/corpus/graph_json/llama2l_slice.json"),
                            "llama2l_slice.json");
  Mesh mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100"));
  PlannerOptions opt;
  opt.time_limit_s = 10;
  return ShardingOptimizer(std::move(g), std::move(mesh), opt);
}

/// Writes `file` to DIR/NAME-file (mode byte 1) and its payload to DIR/NAME-payload (mode 0).
inline void write_seed_pair(const std::string& dir, const std::string& name, FileKind kind,
                            const std::string& file) {
  auto put = [&](const std::string& path, char mode, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.put(mode);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) fail("cannot write seed " + path);
  };
  put(dir + "/" + name + "-file", 1, file);
  put(dir + "/" + name + "-payload", 0, unpack_container(kind, file, name));
}

/// The seed directory, or nullptr when seeds are not wanted.
inline const char* seed_dir() {
  const char* d = std::getenv("AUTOSHARD_FUZZ_SEEDS");
  return d && *d ? d : nullptr;
}

/// Splits an input into its mode and the bytes to load (see the file comment).
inline std::string framed_file(FileKind kind, const uint8_t* data, size_t size, bool* whole) {
  *whole = size > 0 && (data[0] & 1);
  std::string_view rest(reinterpret_cast<const char*>(data) + (size > 0), size > 0 ? size - 1 : 0);
  if (*whole) return std::string(rest);
  return pack_container(kind, rest, 1);
}

}  // namespace autoshard::fuzz

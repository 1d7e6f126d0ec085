/// libFuzzer harness for the replay loader (io/state.h: replay_from_bytes, what load_replay
/// and `autoshard plan --replay` read).  Framing and seeds: fuzz/state_seeds.h.  Loading a
/// replay regenerates nothing until the next solve, so the harness checks loading, the one-line
/// errors, and that a loaded replay re-encodes deterministically; it does not solve (the
/// planner's own limits are covered by the bad-input corpus).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "io/state.h"
#include "state_seeds.h"

using namespace autoshard;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = fuzz::seed_dir()) {
    ShardingOptimizer so = fuzz::seed_optimizer();
    fuzz::write_seed_pair(dir, "plain", FileKind::kReplay, replay_bytes(so));
    so.pin("embedding", {Placement::shard(0), Placement::replicate()});
    fuzz::write_seed_pair(dir, "pinned", FileKind::kReplay, replay_bytes(so));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool whole = false;
  std::string file = fuzz::framed_file(FileKind::kReplay, data, size, &whole);
  std::string once;
  try {
    ReplayInfo info;
    ShardingOptimizer so = replay_from_bytes(file, "fuzz.replay", &info);
    once = replay_bytes(so);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.replay: ");
    return 0;
  }
  ShardingOptimizer back = replay_from_bytes(once, "re-encoded");
  if (replay_bytes(back) != once) fuzz::fail("replay re-encoding is not deterministic");
  return 0;
}

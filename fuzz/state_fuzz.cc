/// libFuzzer harness for the state loader (io/state.h: state_from_bytes, what load_state and
/// `autoshard show` read).  Framing and seeds: fuzz/state_seeds.h.  Besides "no crash, one-line
/// errors naming the file", a loaded state must re-encode to bytes that load again and encode
/// to the same bytes (the format is deterministic).
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
    fuzz::write_seed_pair(dir, "unsolved", FileKind::kState, state_bytes(so));
    (void)so.get_solution();
    fuzz::write_seed_pair(dir, "solved", FileKind::kState, state_bytes(so));
    so.pin("embedding", {Placement::shard(0), Placement::replicate()});
    fuzz::write_seed_pair(dir, "pinned", FileKind::kState, state_bytes(so));
    (void)so.get_solution();
    fuzz::write_seed_pair(dir, "pinned_solved", FileKind::kState, state_bytes(so));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool whole = false;
  std::string file = fuzz::framed_file(FileKind::kState, data, size, &whole);
  std::string once;
  try {
    ShardingOptimizer so = state_from_bytes(file, "fuzz.ap");
    (void)so.solution();
    (void)so.solution_choice();
    once = state_bytes(so);
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.ap: ");
    return 0;
  }
  ShardingOptimizer back = state_from_bytes(once, "re-encoded");
  if (state_bytes(back) != once) fuzz::fail("state re-encoding is not deterministic");
  return 0;
}

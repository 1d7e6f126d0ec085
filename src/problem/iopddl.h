#pragma once
/// Reader, exact evaluator and writer for IOPDDL problem files (google/iopddl, ASPLOS 2025
/// contest; format in shared/reference/formats.md).  The reader is a hand-written single-pass
/// parser over the whole (possibly gzip-compressed) buffer: the 93 MB instance A parses in
/// well under a second, which a DOM would not.
///
/// Forbidden choices: the contest files write "infinity" as 10^18.  Every node or edge cost
/// >= kIopddlForbiddenCost (10^17, far above any real total: the largest real costs are
/// ~6e12 per entry) becomes kInfCost in the Problem; the raw int64 values are kept for the
/// exact evaluator, which adds them in 128-bit integers exactly as the contest checker would.
#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

/// Costs at or above this are forbidden (+inf in the Problem).
inline constexpr int64_t kIopddlForbiddenCost = 100'000'000'000'000'000LL;  // 1e17

/// Thrown for unreadable or malformed files; what() is one line naming the file and the
/// location (JSON pointer, line and column) and the reason.
struct IopddlError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct IopddlInstance {
  Problem problem;  ///< costs as doubles, forbidden ones as kInfCost
  /// The original integer costs, same shapes as problem.nodes[i].costs / edges[k].costs.
  std::vector<std::vector<int64_t>> node_costs;
  std::vector<std::vector<int64_t>> edge_costs;
};

/// Reads a plain or gzip-compressed (detected by magic bytes) IOPDDL JSON file.
IopddlInstance read_iopddl(const std::string& path);
/// Parses an in-memory document (plain JSON); `source` names it in error messages.
IopddlInstance parse_iopddl(const std::string& text, const std::string& source = "<memory>");
/// Parses a file's bytes, plain or gzip-compressed (detected by magic bytes), as read_iopddl
/// does after reading them; `source` names them in error messages.
IopddlInstance parse_iopddl_bytes(std::string data, const std::string& source);
/// Converts a Problem to an instance with integer costs (llround; +inf -> 10^18).
IopddlInstance iopddl_from_problem(const Problem& p);

struct IopddlEvaluation {
  bool valid = false;       ///< right length and every strategy index in range
  bool feasible = false;    ///< valid, no forbidden cost used, usage limit respected everywhere
  bool uses_forbidden = false;
  __int128 cost = 0;        ///< exact sum of raw costs (only meaningful if valid)
  long double cost_ld = 0;  ///< same, as long double
  std::string cost_str;     ///< same, in decimal
  int64_t peak_usage = 0;
  int64_t worst_time = -1;  ///< a time point where the peak occurs
  std::string message;      ///< first problem found, empty if feasible
};

/// Exact evaluation with the contest's rules: range checks, usage at every time point, and
/// the total cost in 128-bit integers.
IopddlEvaluation evaluate(const IopddlInstance& inst, const std::vector<StrategyIdx>& choice);

/// Writes `p` in the IOPDDL JSON format (infinite costs as 10^18, others rounded to int64).
/// Writes a temporary file beside `path` and renames it, so readers never see half a file.
void write_iopddl_json(const Problem& p, const std::string& path);
/// Same, to a stream.
void write_iopddl_json(const Problem& p, std::ostream& out);

/// Decimal representation of a 128-bit integer.
std::string int128_to_string(__int128 v);

}  // namespace autoshard

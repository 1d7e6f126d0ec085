#include "placement/placement.h"

#include <fmt/format.h>

#include <cctype>
#include <stdexcept>

namespace autoshard {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

std::string Placement::to_string() const {
  switch (kind) {
    case Kind::kReplicate: return "R";
    case Kind::kShard: return fmt::format("S({})", dim);
    case Kind::kPartial: return fmt::format("P({})", reduce_op_name(reduce));
  }
  return "?";
}

std::string placements_to_string(const std::vector<Placement>& p) {
  std::string s;
  for (const auto& x : p) s += x.to_string();
  return s;
}

namespace {

struct Parser {
  std::string_view s;
  size_t pos = 0;

  [[noreturn]] void fail(std::string_view why) const {
    throw std::invalid_argument(
        fmt::format("placement '{}': {} at position {}", s, why, pos));
  }
  void skip_separators() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == ',' || s[pos] == '[' || s[pos] == ']' ||
                              s[pos] == '(' || s[pos] == ')'))
      ++pos;
  }
  bool eat(std::string_view word) {
    if (s.substr(pos, word.size()) == word) {
      pos += word.size();
      return true;
    }
    return false;
  }
  std::string_view paren_arg() {
    if (!eat("(")) return {};
    size_t close = s.find(')', pos);
    if (close == std::string_view::npos) fail("missing ')'");
    std::string_view arg = s.substr(pos, close - pos);
    pos = close + 1;
    return arg;
  }
  Placement one() {
    if (eat("Replicate") || eat("R")) {
      if (!paren_arg().empty()) fail("Replicate takes no argument");
      return Placement::replicate();
    }
    if (eat("Shard") || eat("S")) {
      size_t at = pos;
      std::string_view arg = paren_arg();
      if (arg.starts_with("dim=")) arg.remove_prefix(4);
      if (arg.empty()) {
        pos = at;
        fail("Shard needs a dim, e.g. S(0)");
      }
      int32_t d = 0;
      for (char c : arg) {
        if (!std::isdigit(static_cast<unsigned char>(c))) {
          pos = at;
          fail("Shard dim must be a non-negative integer");
        }
        d = d * 10 + (c - '0');
        if (d > 1 << 20) fail("Shard dim out of range");
      }
      return Placement::shard(d);
    }
    if (eat("Partial") || eat("P")) {
      size_t at = pos;
      std::string_view arg = paren_arg();
      if (arg.starts_with("reduce_op=")) arg.remove_prefix(10);
      if (arg.size() >= 2 && (arg.front() == '\'' || arg.front() == '"')) arg = arg.substr(1, arg.size() - 2);
      if (arg.empty() || arg == "sum") return Placement::partial(ReduceOp::kSum);
      if (arg == "avg") return Placement::partial(ReduceOp::kAvg);
      if (arg == "max") return Placement::partial(ReduceOp::kMax);
      if (arg == "min") return Placement::partial(ReduceOp::kMin);
      pos = at;
      fail(fmt::format("unknown reduce op '{}'", arg));
    }
    fail("expected R, S(d) or P(op)");
  }
};

}  // namespace

std::vector<Placement> parse_placements(std::string_view s) {
  Parser p{s};
  std::vector<Placement> out;
  // Strip one pair of outer brackets/parentheses ("(S(0), R)") without touching "S(0)".
  while (p.pos < s.size() && (s[p.pos] == ' ' || s[p.pos] == '[' ||
                              (s[p.pos] == '(' && p.pos == 0)))
    ++p.pos;
  while (true) {
    while (p.pos < s.size() && (s[p.pos] == ' ' || s[p.pos] == ',')) ++p.pos;
    if (p.pos >= s.size() || s[p.pos] == ']' || s[p.pos] == ')') break;
    out.push_back(p.one());
  }
  while (p.pos < s.size() && (s[p.pos] == ' ' || s[p.pos] == ']' || s[p.pos] == ')')) ++p.pos;
  if (p.pos != s.size()) p.fail("unexpected trailing text");
  if (out.empty()) p.fail("no placements");
  return out;
}

int64_t chunk_size(int64_t size, int64_t chunks, int64_t index) {
  if (chunks <= 1) return size;
  int64_t full = (size + chunks - 1) / chunks;
  int64_t start = full * index;
  if (start >= size) return 0;
  return std::min(full, size - start);
}

std::vector<int64_t> ShardingSpec::shards_per_dim(const Mesh& mesh) const {
  std::vector<int64_t> r(meta.shape.size(), 1);
  for (int32_t m = 0; m < ndim_mesh(); ++m) {
    const Placement& p = placements[static_cast<size_t>(m)];
    if (p.is_shard() && p.dim >= 0 && p.dim < meta.rank()) r[static_cast<size_t>(p.dim)] *= mesh.size(m);
  }
  return r;
}

int64_t ShardingSpec::num_shards(const Mesh& mesh) const {
  int64_t n = 1;
  for (int32_t m = 0; m < ndim_mesh(); ++m)
    if (placements[static_cast<size_t>(m)].is_shard()) n *= mesh.size(m);
  return n;
}

std::vector<int64_t> ShardingSpec::local_shape(const Mesh& mesh) const {
  std::vector<int64_t> shape = meta.shape;
  for (int32_t m = 0; m < ndim_mesh(); ++m) {
    const Placement& p = placements[static_cast<size_t>(m)];
    if (!p.is_shard() || p.dim < 0 || p.dim >= meta.rank()) continue;
    int64_t& d = shape[static_cast<size_t>(p.dim)];
    d = chunk_size(d, mesh.size(m), 0);  // the first shard is the largest
  }
  return shape;
}

int64_t ShardingSpec::local_bytes(const Mesh& mesh) const {
  int64_t n = dtype_size(meta.dtype);
  for (int64_t d : local_shape(mesh)) n *= d;
  return n;
}

bool ShardingSpec::is_replicated() const {
  for (const auto& p : placements)
    if (!p.is_replicate()) return false;
  return true;
}

bool ShardingSpec::has_partial() const {
  for (const auto& p : placements)
    if (p.is_partial()) return true;
  return false;
}

bool ShardingSpec::valid(const Mesh& mesh, bool require_divisible) const {
  if (ndim_mesh() != mesh.ndim()) return false;
  std::vector<int64_t> shards = shards_per_dim(mesh);
  for (int32_t m = 0; m < ndim_mesh(); ++m) {
    const Placement& p = placements[static_cast<size_t>(m)];
    if (p.is_shard() && (p.dim < 0 || p.dim >= meta.rank())) return false;
  }
  for (size_t d = 0; d < shards.size(); ++d) {
    if (shards[d] == 1) continue;
    if (meta.shape[d] < shards[d]) return false;
    if (require_divisible && meta.shape[d] % shards[d] != 0) return false;
  }
  return true;
}

}  // namespace autoshard

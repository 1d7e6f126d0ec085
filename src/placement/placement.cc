#include "placement/placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>

#include "ir/file_util.h"

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
    case Kind::kShard:
      return split_factor > 1 ? fmt::format("_S({},{})", dim, split_factor) : fmt::format("S({})", dim);
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

/// Recursive-descent parser over the placement string; positions in errors are 0-based byte
/// offsets into the original text.
struct Parser {
  std::string_view s;
  size_t pos = 0;

  [[noreturn]] void fail(std::string_view why) const { fail_at(why, pos); }
  [[noreturn]] void fail_at(std::string_view why, size_t at) const {
    throw std::invalid_argument(fmt::format("placement '{}': {} at position {}", excerpt(s), why, at));
  }
  void skip_spaces() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  }
  bool eat(std::string_view word) {
    if (s.substr(pos, word.size()) == word) {
      pos += word.size();
      return true;
    }
    return false;
  }
  /// Reads "(" ... ")" if present and returns the trimmed text between; nullopt without "(".
  std::optional<std::string_view> paren_arg() {
    if (!eat("(")) return std::nullopt;
    size_t close = s.find(')', pos);
    if (close == std::string_view::npos) fail("missing ')'");
    std::string_view arg = s.substr(pos, close - pos);
    while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);
    while (!arg.empty() && arg.back() == ' ') arg.remove_suffix(1);
    pos = close + 1;
    return arg;
  }
  /// Removes "key=" (spaces allowed around '=') from the front of an argument.
  static std::string_view strip_keyword(std::string_view arg, std::string_view key) {
    if (!arg.starts_with(key)) return arg;
    std::string_view rest = arg.substr(key.size());
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.empty() || rest.front() != '=') return arg;
    rest.remove_prefix(1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    return rest;
  }
  /// A non-negative integer argument (after an optional "key="), at most `max`.
  int64_t integer(std::string_view text, std::string_view what, int64_t max, size_t at) const {
    if (text.empty()) fail_at(fmt::format("{} is missing", what), at);
    int64_t v = 0;
    for (char c : text) {
      if (!std::isdigit(static_cast<unsigned char>(c)))
        fail_at(fmt::format("{} '{}' is not a non-negative integer", what, excerpt(text, 20)), at);
      v = v * 10 + (c - '0');
      if (v > max) fail_at(fmt::format("{} '{}' out of range", what, excerpt(text, 20)), at);
    }
    return v;
  }
  static std::string_view trim(std::string_view t) {
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    return t;
  }
  /// "_S(0,8)", "_S(0, 8)", "_StridedShard(dim=0, sf=8)", "_StridedShard(0, split_factor=8)".
  Placement strided(size_t at) {
    auto arg = paren_arg();
    if (!arg) fail_at("_StridedShard needs (dim, split_factor), e.g. _S(0,8)", at);
    size_t comma = arg->find(',');
    if (comma == std::string_view::npos) fail_at("_StridedShard needs (dim, split_factor), e.g. _S(0,8)", at);
    std::string_view d = strip_keyword(trim(arg->substr(0, comma)), "dim");
    std::string_view f = trim(arg->substr(comma + 1));
    f = f.starts_with("split_factor") ? strip_keyword(f, "split_factor") : strip_keyword(f, "sf");
    const auto dim = static_cast<int32_t>(integer(d, "Shard dim", 1 << 20, at));
    const int64_t sf = integer(f, "split factor", int64_t{1} << 40, at);
    if (sf < 1) fail_at("split factor must be at least 1", at);
    return Placement::strided_shard(dim, sf);
  }
  Placement one() {
    size_t start = pos;
    if (eat("_StridedShard") || eat("_S")) return strided(pos);
    if (eat("Replicate") || eat("R")) {
      size_t at = pos;
      auto arg = paren_arg();
      if (arg && !arg->empty()) fail_at("Replicate takes no argument", at);
      return Placement::replicate();
    }
    if (eat("Shard") || eat("S")) {
      size_t at = pos;
      auto arg = paren_arg();
      if (!arg) fail_at("Shard needs a dim in parentheses, e.g. S(0)", at);
      std::string_view d = strip_keyword(*arg, "dim");
      if (d.empty()) fail_at("Shard needs a dim, e.g. S(0)", at);
      return Placement::shard(static_cast<int32_t>(integer(d, "Shard dim", 1 << 20, at)));
    }
    if (eat("Partial") || eat("P")) {
      size_t at = pos;
      auto arg = paren_arg();
      std::string_view op = arg ? strip_keyword(*arg, "reduce_op") : std::string_view{};
      if (op.size() >= 2 && (op.front() == '\'' || op.front() == '"') && op.back() == op.front())
        op = op.substr(1, op.size() - 2);
      if (op.empty() || op == "sum") return Placement::partial(ReduceOp::kSum);
      if (op == "avg") return Placement::partial(ReduceOp::kAvg);
      if (op == "max") return Placement::partial(ReduceOp::kMax);
      if (op == "min") return Placement::partial(ReduceOp::kMin);
      fail_at(fmt::format("unknown reduce op '{}' (expected sum, avg, max or min)", excerpt(op, 20)), at);
    }
    fail_at("expected R, S(d), _S(d,sf) or P(op)", start);
  }
};

}  // namespace

std::vector<Placement> parse_placements(std::string_view s) {
  Parser p{s};
  std::vector<Placement> out;
  p.skip_spaces();
  // One optional pair of enclosing brackets: "[Shard(dim=0), Replicate()]" or "(S(0), R)".
  // No placement item starts with a bracket, so a leading one is always an enclosure.
  char close = 0;
  size_t open_at = p.pos;
  if (p.eat("[")) close = ']';
  else if (p.eat("(")) close = ')';
  while (true) {
    p.skip_spaces();
    if (p.pos >= s.size() || (close && s[p.pos] == close)) break;
    if (!out.empty() && s[p.pos] == ',') {
      ++p.pos;
      p.skip_spaces();
      if (p.pos >= s.size() || (close && s[p.pos] == close)) break;  // trailing comma
    }
    out.push_back(p.one());
  }
  if (close) {
    if (p.pos >= s.size()) p.fail_at(fmt::format("unclosed '{}'", s[open_at]), open_at);
    ++p.pos;
    p.skip_spaces();
  }
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

bool decode_shard_positions(const Placement* p, int32_t nd, const int64_t* sizes, int32_t* pos) {
  for (int32_t m = 0; m < nd; ++m) pos[m] = -1;
  // Right to left, as torch does: every mesh dim after m that shards the same tensor dim is
  // already placed; m goes where the sizes of the mesh dims before it multiply to its split
  // factor (the first such position).
  for (int32_t m = nd - 1; m >= 0; --m) {
    if (!p[m].is_shard()) continue;
    int32_t len = 0;
    for (int32_t m2 = m + 1; m2 < nd; ++m2) len += p[m2].is_shard(p[m].dim) ? 1 : 0;
    int64_t acc = 1;
    int32_t at = -1;
    for (int32_t i = 0; i <= len; ++i) {
      if (acc == p[m].split_factor) {
        at = i;
        break;
      }
      for (int32_t m2 = m + 1; m2 < nd && i < len; ++m2)
        if (p[m2].is_shard(p[m].dim) && pos[m2] == i) acc *= sizes[m2];
    }
    if (at < 0) return false;
    for (int32_t m2 = m + 1; m2 < nd; ++m2)
      if (p[m2].is_shard(p[m].dim) && pos[m2] >= at) ++pos[m2];
    pos[m] = at;
  }
  return true;
}

std::optional<ShardOrder> decode_shard_order(const std::vector<Placement>& p, const Mesh& mesh) {
  const auto nd = static_cast<int32_t>(p.size());
  if (nd != mesh.ndim()) return std::nullopt;
  std::vector<int64_t> sizes(p.size());
  for (int32_t m = 0; m < nd; ++m) sizes[static_cast<size_t>(m)] = mesh.size(m);
  std::vector<int32_t> pos(p.size(), -1);
  if (!decode_shard_positions(p.data(), nd, sizes.data(), pos.data())) return std::nullopt;
  ShardOrder order;
  int32_t max_dim = -1;
  for (const Placement& x : p)
    if (x.is_shard()) max_dim = std::max(max_dim, x.dim);
  for (int32_t d = 0; d <= max_dim; ++d) {
    ShardOrderEntry e{d, {}};
    for (int32_t m = 0; m < nd; ++m)
      if (p[static_cast<size_t>(m)].is_shard(d)) e.mesh_dims.push_back(m);
    if (e.mesh_dims.empty()) continue;
    std::sort(e.mesh_dims.begin(), e.mesh_dims.end(),
              [&](int32_t a, int32_t b) { return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)]; });
    order.push_back(std::move(e));
  }
  return order;
}

std::vector<Placement> encode_shard_order(std::vector<Placement> p, const ShardOrder& order,
                                          const Mesh& mesh) {
  const auto nd = static_cast<int32_t>(p.size());
  std::vector<int32_t> seen(p.size(), 0);
  for (const ShardOrderEntry& e : order) {
    for (size_t i = 0; i < e.mesh_dims.size(); ++i) {
      const int32_t m = e.mesh_dims[i];
      if (m < 0 || m >= nd || !p[static_cast<size_t>(m)].is_shard(e.tensor_dim) || seen[static_cast<size_t>(m)]++)
        throw std::invalid_argument(fmt::format("shard order {}: mesh dim {} does not shard tensor "
                                                "dim {} in {} (or is listed twice)",
                                                shard_order_to_string(order), m, e.tensor_dim,
                                                placements_to_string(p)));
      int64_t sf = 1;  // sizes of the mesh dims cut before m that come after it in the mesh
      for (size_t j = 0; j < i; ++j)
        if (e.mesh_dims[j] > m) sf *= mesh.size(e.mesh_dims[j]);
      p[static_cast<size_t>(m)].split_factor = sf;
    }
  }
  for (int32_t m = 0; m < nd; ++m)
    if (p[static_cast<size_t>(m)].is_shard() && !seen[static_cast<size_t>(m)])
      throw std::invalid_argument(fmt::format("shard order {} misses mesh dim {} of {}",
                                              shard_order_to_string(order), m,
                                              placements_to_string(p)));
  return p;
}

std::string shard_order_to_string(const ShardOrder& order) {
  std::string s = "(";
  for (const ShardOrderEntry& e : order) {
    if (s.size() > 1) s += ", ";
    s += fmt::format("{}: [{}]", e.tensor_dim, fmt::join(e.mesh_dims, ", "));
  }
  return s + ")";
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
  for (const Placement& p : placements)
    if (p.is_shard() && (p.dim < 0 || p.dim >= meta.rank())) return false;
  const int32_t nd = ndim_mesh();
  if (nd > 16) return false;
  std::array<int64_t, 16> sizes{};  // no heap: valid() runs for every candidate strategy
  std::array<int32_t, 16> pos{};
  for (int32_t m = 0; m < nd; ++m) sizes[static_cast<size_t>(m)] = mesh.size(m);
  if (!decode_shard_positions(placements.data(), nd, sizes.data(), pos.data())) return false;
  // Every shard must be non-empty.  With torch.chunk splitting this is not just "size >=
  // shards" (5 split in 4 gives 2,2,1,0), and a dim sharded on several mesh dims is split
  // again piece by piece, in shard order, so follow the distinct piece sizes through each split.
  for (int32_t d = 0; d < meta.rank(); ++d) {
    std::vector<int64_t> pieces{meta.shape[static_cast<size_t>(d)]};
    int64_t total = 1;
    for (int32_t i = 0; i < nd; ++i) {
      int32_t m = 0;  // the mesh dim at position i of d's order
      while (m < nd && !(placements[static_cast<size_t>(m)].is_shard(d) && pos[static_cast<size_t>(m)] == i)) ++m;
      if (m == nd) break;
      int64_t n = mesh.size(m);
      total *= n;
      std::vector<int64_t> next;
      for (int64_t size : pieces) {
        for (int64_t i = 0; i < n; ++i) {
          int64_t c = chunk_size(size, n, i);
          if (c == 0) return false;
          if (std::find(next.begin(), next.end(), c) == next.end()) next.push_back(c);
        }
      }
      pieces = std::move(next);
    }
    if (require_divisible && meta.shape[static_cast<size_t>(d)] % total != 0) return false;
  }
  return true;
}

}  // namespace autoshard

/// Matmul family as einsum contractions (sharding-rules.md, "Einsum"): per mesh dim the
/// all-replicated row, then one row per batch letter (shards everything), per contracting letter
/// (operands sharded, output P(sum)), per free letter (output and the operands holding it
/// sharded, the others replicated).  Bias-like operands (addmm's self, linear's bias) take the
/// output placement mapped through broadcasting, P(sum) included (R -> P is a local division).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "strategy/einsum_rules.h"
#include "strategy/rule.h"

namespace autoshard {

namespace {

/// Letters not used by `eq`, for expanding "...".
std::string fresh_letters(std::string_view eq, size_t n) {
  std::string r;
  for (char ch = 'A'; ch <= 'Z' && r.size() < n; ++ch)
    if (eq.find(ch) == std::string_view::npos) r += ch;
  for (char ch = 'a'; ch <= 'z' && r.size() < n; ++ch)
    if (eq.find(ch) == std::string_view::npos) r += ch;
  if (r.size() < n) throw std::invalid_argument(fmt::format("einsum '{}': too many dims", eq));
  return r;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> r;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    r.emplace_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return r;
}

std::string strip_spaces(std::string_view s) {
  std::string r;
  for (char ch : s)
    if (ch != ' ') r += ch;
  return r;
}

}  // namespace

EinsumSpec parse_einsum(std::string_view equation, const std::vector<int64_t>& ranks) {
  std::string eq = strip_spaces(equation);
  std::string lhs = eq, rhs;
  bool explicit_out = false;
  if (size_t arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    explicit_out = true;
  }
  EinsumSpec s;
  s.inputs = split(lhs, ',');
  if (s.inputs.size() != ranks.size())
    throw std::invalid_argument(fmt::format("einsum '{}': {} operands but {} tensors", equation,
                                            s.inputs.size(), ranks.size()));
  size_t ell = 0;  // number of dims "..." stands for (the widest operand's)
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (s.inputs[i].find("...") != std::string::npos) {
      int64_t k = ranks[i] - static_cast<int64_t>(s.inputs[i].size() - 3);
      if (k < 0) throw std::invalid_argument(fmt::format("einsum '{}': rank mismatch", equation));
      ell = std::max(ell, static_cast<size_t>(k));
    }
  std::string fresh = fresh_letters(eq, ell);
  auto expand = [&](std::string& op, size_t k) {
    if (size_t at = op.find("..."); at != std::string::npos)
      op.replace(at, 3, fresh.substr(fresh.size() - k));
  };
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    std::string& op = s.inputs[i];
    if (op.find("...") != std::string::npos)
      expand(op, static_cast<size_t>(ranks[i]) - (op.size() - 3));
    if (static_cast<int64_t>(op.size()) != ranks[i])
      throw std::invalid_argument(
          fmt::format("einsum '{}': operand {} has rank {}", equation, i, ranks[i]));
  }
  if (explicit_out) {
    s.output = rhs;
    expand(s.output, ell);
  } else {  // implicit output: "..." then letters used exactly once, sorted
    std::string all;
    for (const auto& op : s.inputs) all += op;
    s.output = fresh.substr(0, ell);
    std::string once;
    for (char ch : all)
      if (std::count(all.begin(), all.end(), ch) == 1 && fresh.find(ch) == std::string::npos)
        once += ch;
    std::sort(once.begin(), once.end());
    s.output += once;
  }
  return s;
}

std::vector<Row> einsum_rows(const EinsumSpec& s, const std::vector<TensorMeta>& in,
                             const TensorMeta& out) {
  const size_t n = s.inputs.size();
  (void)out;  // the output's letters carry no extra constraint (its sizes follow the operands)
  // Letter sizes (the largest over operands, for broadcast detection).
  auto size_of = [&](char ch) {
    int64_t sz = 1;
    for (size_t i = 0; i < n; ++i)
      if (size_t at = s.inputs[i].find(ch); at != std::string::npos)
        sz = std::max(sz, in[i].shape[at]);
    return sz;
  };
  auto repeated = [&](char ch) {
    for (const auto& op : s.inputs)
      if (std::count(op.begin(), op.end(), ch) > 1) return true;
    return std::count(s.output.begin(), s.output.end(), ch) > 1;
  };
  std::string batch, contracting, free;
  for (char ch : s.output) {
    bool everywhere = true;
    for (const auto& op : s.inputs) everywhere = everywhere && op.find(ch) != std::string::npos;
    if (everywhere && n > 0) batch += ch;
  }
  for (const auto& op : s.inputs)
    for (char ch : op) {
      bool in_out = s.output.find(ch) != std::string::npos;
      std::string& cls = in_out ? free : contracting;
      if (batch.find(ch) == std::string::npos && cls.find(ch) == std::string::npos) cls += ch;
    }
  std::vector<Row> rows{Row(n + 1, Placement::replicate())};
  for (const std::string* cls : {&batch, &contracting, &free})
    for (char ch : *cls) {
      if (repeated(ch)) continue;
      const int64_t sz = size_of(ch);
      Row row(n + 1, Placement::replicate());
      if (size_t at = s.output.find(ch); at != std::string::npos) {
        row[0] = Placement::shard(static_cast<int32_t>(at));
      } else {
        row[0] = Placement::partial(ReduceOp::kSum);
      }
      for (size_t i = 0; i < n; ++i) {
        size_t at = s.inputs[i].find(ch);
        if (at == std::string::npos || (in[i].shape[at] == 1 && sz != 1)) continue;
        row[i + 1] = Placement::shard(static_cast<int32_t>(at));
      }
      rows.push_back(std::move(row));
    }
  return rows;
}

namespace {

std::vector<int64_t> ranks_of(const OpContext& c, size_t from, size_t count) {
  std::vector<int64_t> r;
  for (size_t i = from; i < from + count; ++i) r.push_back(c.in.at(i).rank());
  return r;
}

/// Rows for an op whose inputs [first, first+count) are einsum operands and whose output 0 is
/// the einsum result; `bias` (if >= 0) is an input following the output through broadcasting.
RuleResult contraction(const OpContext& c, std::string_view eq, size_t first, int bias) {
  if (c.n_out() != 1 || c.n_in() < first + 2) c.fail("unexpected number of tensors");
  size_t count = c.n_in() - first - (bias >= static_cast<int>(first) ? 1 : 0);
  std::vector<TensorMeta> ops(c.in.begin() + static_cast<std::ptrdiff_t>(first),
                              c.in.begin() + static_cast<std::ptrdiff_t>(first + count));
  EinsumSpec s;
  try {
    s = parse_einsum(eq, ranks_of(c, first, count));
  } catch (const std::invalid_argument& e) {
    c.fail(e.what());
  }
  RuleResult r;
  for (const Row& er : einsum_rows(s, ops, c.out(0))) {
    Row row = c.replicated();
    row[c.out_slot(0)] = er[0];
    for (size_t i = 0; i < count; ++i) row[c.in_slot(first + i)] = er[i + 1];
    if (bias >= 0)
      row[c.in_slot(static_cast<size_t>(bias))] =
          map_broadcast(er[0], c.out(0), c.in[static_cast<size_t>(bias)]);
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// Letters "abc..." for `n` leading dims.
std::string lead(size_t n) { return std::string("abcdefgh").substr(0, std::min<size_t>(n, 8)); }

RuleResult matmul_rule(const OpContext& c) {
  if (c.n_in() != 2) c.fail("matmul takes two tensors");
  int64_t ra = c.in[0].rank(), rb = c.in[1].rank();
  if (ra < 1 || rb < 1 || ra > 8 || rb > 8) c.fail("unsupported matmul ranks");
  std::string a = ra == 1 ? "k" : "..." + std::string("mk");
  std::string b = rb == 1 ? "k" : "..." + std::string("kn");
  std::string o = "...";
  if (ra > 1) o += "m";
  if (rb > 1) o += "n";
  if (ra == 1 && rb == 1) o = "";
  return contraction(c, a + "," + b + "->" + o, 0, -1);
}

RuleResult linear_rule(const OpContext& c) {
  if (c.n_in() < 2) c.fail("linear takes input and weight");
  int64_t r = c.in[0].rank();
  if (r < 1 || r > 9) c.fail("unsupported linear rank");
  std::string l = lead(static_cast<size_t>(r - 1));
  // The bias (input 2, optional) follows the output through broadcasting.
  return contraction(c, l + "k,nk->" + l + "n", 0, c.n_in() > 2 ? 2 : -1);
}

}  // namespace

void register_einsum_rules(RuleTable& t) {
  t["mm"] = [](const OpContext& c) { return contraction(c, "mk,kn->mn", 0, -1); };
  t["bmm"] = [](const OpContext& c) { return contraction(c, "bmk,bkn->bmn", 0, -1); };
  t["addmm"] = [](const OpContext& c) { return contraction(c, "mk,kn->mn", 1, 0); };
  t["baddbmm"] = [](const OpContext& c) { return contraction(c, "bmk,bkn->bmn", 1, 0); };
  t["dot"] = [](const OpContext& c) { return contraction(c, "k,k->", 0, -1); };
  t["mv"] = [](const OpContext& c) { return contraction(c, "mk,k->m", 0, -1); };
  t["matmul"] = matmul_rule;
  t["linear"] = linear_rule;
  t["einsum"] = [](const OpContext& c) {
    std::string eq = c.node.attr_string("equation", "");
    if (eq.empty()) c.fail("einsum needs an 'equation' attr");
    return contraction(c, eq, 0, -1);
  };
}

}  // namespace autoshard

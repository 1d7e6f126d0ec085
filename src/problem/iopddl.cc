#include "problem/iopddl.h"

#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string_view>
#include <utility>

namespace autoshard {
namespace {

std::string read_file_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IopddlError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  bool err = std::ferror(f) != 0;
  std::fclose(f);
  if (err) throw IopddlError(fmt::format("{}: read error", path));
  return data;
}

/// Inflates a gzip stream (possibly several concatenated members).
std::string gunzip(const std::string& in, const std::string& path) {
  std::string out;
  if (in.size() >= 4) {  // ISIZE (size mod 2^32) of the last member: a good reserve hint
    uint32_t isize;
    std::memcpy(&isize, in.data() + in.size() - 4, 4);
    // ISIZE is a claim of the file: never reserve more than deflate can expand these bytes
    // to (at most 1032:1, RFC 1951 block limits), so a forged trailer costs nothing.
    out.reserve(std::min<size_t>(std::max<size_t>(isize, in.size() * 2), in.size() * 1032));
  }
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw IopddlError(path + ": zlib init failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  size_t used = 0;
  for (;;) {
    if (out.size() - used < (1 << 16)) out.resize(std::max<size_t>(out.size() * 2, used + (1 << 18)));
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - used, 1u << 30));
    size_t before = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    used += before - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    // Locations are byte offsets in the file (the compressed stream), as a hex dump shows them.
    if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == 0 && before == zs.avail_out)) {
      inflateEnd(&zs);
      throw IopddlError(fmt::format("{}: byte {}: gzip: truncated stream ({} bytes inflated)",
                                    path, in.size() - zs.avail_in, used));
    }
    if (rc != Z_OK) {
      std::string msg = zs.msg ? zs.msg : "corrupt data";
      inflateEnd(&zs);
      throw IopddlError(fmt::format("{}: byte {}: gzip: {} ({} bytes inflated)", path,
                                    in.size() - zs.avail_in, msg, used));
    }
  }
  inflateEnd(&zs);
  out.resize(used);
  return out;
}

/// Single-pass parser for the IOPDDL schema.  Tracks a JSON pointer for error messages.
class Parser {
 public:
  Parser(const std::string& text, const std::string& source)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), source_(source) {}

  IopddlInstance parse() {
    IopddlInstance inst;
    bool seen_problem = false;
    object([&](std::string_view key) {
      if (key != "problem") return false;
      seen_problem = true;
      parse_problem(inst);
      return true;
    });
    ws();
    if (p_ != end_) fail("trailing characters after the document");
    if (!seen_problem) fail_at("", "missing \"problem\" object");
    return inst;
  }

 private:
  struct PathElem {
    std::string_view key;
    int64_t index = -1;
  };

  [[noreturn]] void fail(const std::string& why) const { fail_at(pointer(), why); }
  [[noreturn]] void fail_at(const std::string& ptr, const std::string& why) const {
    if (post_check_)
      throw IopddlError(fmt::format("{}: at {}: {}", source_, ptr.empty() ? std::string("/") : ptr, why));
    int64_t line = 1, col = 1;
    for (const char* q = begin_; q < p_ && q < end_; ++q) {
      if (*q == '\n') { ++line; col = 1; } else { ++col; }
    }
    throw IopddlError(fmt::format("{}:{}:{}: at {}: {}", source_, line, col,
                                  ptr.empty() ? std::string("/") : ptr, why));
  }
  std::string pointer() const {
    std::string s;
    for (const PathElem& e : path_) {
      s += '/';
      if (e.index >= 0) {
        s += std::to_string(e.index);
      } else {
        for (char c : e.key) s += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;  // one line
      }
    }
    return s;
  }
  std::string pointer_plus(std::initializer_list<std::string> extra) const {
    std::string s = pointer();
    for (const auto& x : extra) s += "/" + x;
    return s;
  }

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  char peek() {
    ws();
    if (p_ == end_) fail("unexpected end of file");
    return *p_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}' but found {}", c, describe()));
    ++p_;
  }
  std::string describe() const {
    if (p_ >= end_) return "end of file";
    char c = *p_;
    if (c >= 32 && c < 127) return fmt::format("'{}'", c);
    return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
  }

  std::string_view string() {
    expect('"');
    const char* s = p_;
    bool escaped = false;
    while (p_ < end_ && *p_ != '"') {
      // JSON strings hold no raw control characters; rejecting them also keeps keys, which
      // end up in error messages' pointers, on one line.
      if (static_cast<unsigned char>(*p_) < 0x20) fail(fmt::format("{} in a string", describe()));
      if (*p_ == '\\') { escaped = true; ++p_; }
      ++p_;
    }
    if (p_ >= end_) fail("unterminated string");
    std::string_view raw(s, static_cast<size_t>(p_ - s));
    ++p_;
    if (!escaped) return raw;
    // Rare: decode via nlohmann for full escape handling.
    try {
      scratch_ = nlohmann::json::parse(std::string("\"") + std::string(raw) + "\"").get<std::string>();
    } catch (const std::exception&) {
      fail("bad escape in string");
    }
    return scratch_;
  }

  /// Calls on_key(key) for each member; if it returns false the value is skipped.
  /// Counts open containers: the contest schema nests 4 deep, so anything past kMaxDepth is
  /// garbage, and rejecting it keeps skip_value's recursion from overflowing the stack.
  static constexpr int kMaxDepth = 64;
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(fmt::format("nested deeper than {} levels", kMaxDepth));
    }
    ~DepthGuard() { --p.depth_; }
  };

  template <class F>
  void object(F&& on_key) {
    DepthGuard guard(*this);
    expect('{');
    if (peek() == '}') { ++p_; return; }
    for (;;) {
      std::string key(string());
      expect(':');
      path_.push_back({key, -1});
      if (!on_key(std::string_view(path_.back().key))) skip_value();
      path_.pop_back();
      char c = peek();
      ++p_;
      if (c == '}') return;
      if (c != ',') { --p_; fail(fmt::format("expected ',' or '}}' but found {}", describe())); }
    }
    // Keys live in key storage of the loop iteration; path_ copies only views while in use.
  }

  /// Calls on_elem(i) for each element.
  template <class F>
  void array(F&& on_elem) {
    DepthGuard guard(*this);
    expect('[');
    if (peek() == ']') { ++p_; return; }
    for (int64_t i = 0;; ++i) {
      path_.push_back({{}, i});
      on_elem(i);
      path_.pop_back();
      char c = peek();
      ++p_;
      if (c == ']') return;
      if (c != ',') { --p_; fail(fmt::format("expected ',' or ']' but found {}", describe())); }
    }
  }

  void skip_value() {
    char c = peek();
    if (c == '{') object([](std::string_view) { return false; });
    else if (c == '[') array([&](int64_t) { skip_value(); });
    else if (c == '"') string();
    else if (c == 't' || c == 'f' || c == 'n') {
      const char* words[] = {"true", "false", "null"};
      for (const char* w : words) {
        size_t n = std::strlen(w);
        if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, w, n) == 0) { p_ += n; return; }
      }
      fail(fmt::format("unexpected {}", describe()));
    } else {
      (void)number();
    }
  }

  int64_t number() {
    ws();
    const char* s = p_;
    bool neg = false;
    if (p_ < end_ && *p_ == '-') { neg = true; ++p_; }
    if (p_ >= end_ || *p_ < '0' || *p_ > '9') fail(fmt::format("expected a number but found {}", describe()));
    uint64_t v = 0;
    bool overflow = false;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      unsigned d = static_cast<unsigned>(*p_ - '0');
      if (v > (UINT64_MAX - d) / 10) overflow = true; else v = v * 10 + d;
      ++p_;
    }
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) {
      // Non-integer syntax: accept only integral values in int64 range (e.g. 1e18).
      std::string tok(s, static_cast<size_t>(std::min<ptrdiff_t>(end_ - s, 64)));
      char* stop = nullptr;
      double d = std::strtod(tok.c_str(), &stop);
      p_ = s + (stop - tok.c_str());
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) >= 9.2e18) {
        p_ = s;
        fail(fmt::format("number '{}' is not an integer in int64 range", tok.substr(0, static_cast<size_t>(stop - tok.c_str()))));
      }
      return static_cast<int64_t>(d);
    }
    if (overflow || v > (neg ? static_cast<uint64_t>(INT64_MAX) + 1 : static_cast<uint64_t>(INT64_MAX))) {
      p_ = s;
      fail("integer out of int64 range");
    }
    return neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  }

  void int_list(std::vector<int64_t>& out) {
    out.clear();
    array([&](int64_t) { out.push_back(number()); });
  }
  void int_lists(std::vector<std::vector<int64_t>>& out) {
    out.clear();
    array([&](int64_t) {
      out.emplace_back();
      int_list(out.back());
    });
  }
  void pairs(std::vector<std::pair<int64_t, int64_t>>& out, const char* what) {
    out.clear();
    array([&](int64_t) {
      int64_t n = 0, a = 0, b = 0;
      array([&](int64_t i) {
        int64_t x = number();
        if (i == 0) a = x; else if (i == 1) b = x;
        n = i + 1;
      });
      if (n != 2) fail(fmt::format("{} must have exactly 2 entries, found {}", what, n));
      out.emplace_back(a, b);
    });
  }

  void parse_problem(IopddlInstance& inst) {
    Problem& P = inst.problem;
    std::vector<std::pair<int64_t, int64_t>> intervals, edge_nodes;
    std::vector<std::vector<int64_t>> usages;
    bool seen_nodes = false, seen_intervals = false, seen_costs = false, seen_usages = false;
    bool seen_edge_nodes = false, seen_edge_costs = false;
    object([&](std::string_view key) {
      if (key == "name") {
        if (peek() == '"') P.name = std::string(string()); else skip_value();
        return true;
      }
      if (key == "usage_limit") {
        if (peek() == 'n') return false;  // null: no limit
        P.usage_limit = number();
        if (P.usage_limit < 0) fail("usage_limit is negative");
        return true;
      }
      if (key == "nodes") {
        seen_nodes = true;
        object([&](std::string_view k) {
          if (k == "intervals") { seen_intervals = true; pairs(intervals, "an interval"); return true; }
          if (k == "costs") { seen_costs = true; int_lists(inst.node_costs); return true; }
          if (k == "usages") { seen_usages = true; int_lists(usages); return true; }
          return false;
        });
        return true;
      }
      if (key == "edges") {
        object([&](std::string_view k) {
          if (k == "nodes") { seen_edge_nodes = true; pairs(edge_nodes, "an edge"); return true; }
          if (k == "costs") { seen_edge_costs = true; int_lists(inst.edge_costs); return true; }
          return false;
        });
        return true;
      }
      return false;
    });
    post_check_ = true;  // errors below name a pointer, not a place in the text
    if (!seen_nodes) fail_at("/problem", "missing \"nodes\"");
    if (!seen_costs) fail_at("/problem/nodes", "missing \"costs\"");
    if (!seen_intervals) fail_at("/problem/nodes", "missing \"intervals\"");
    if (!seen_usages) fail_at("/problem/nodes", "missing \"usages\"");
    if (seen_edge_nodes != seen_edge_costs)
      fail_at("/problem/edges", seen_edge_nodes ? "missing \"costs\"" : "missing \"nodes\"");
    size_t n = inst.node_costs.size();
    if (intervals.size() != n)
      fail_at("/problem/nodes/intervals", fmt::format("{} intervals but {} cost lists", intervals.size(), n));
    if (usages.size() != n)
      fail_at("/problem/nodes/usages", fmt::format("{} usage lists but {} cost lists", usages.size(), n));
    if (edge_nodes.size() != inst.edge_costs.size())
      fail_at("/problem/edges/costs",
              fmt::format("{} cost lists but {} edges", inst.edge_costs.size(), edge_nodes.size()));
    if (n > static_cast<size_t>(INT32_MAX)) fail_at("/problem/nodes", "too many nodes");
    P.nodes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      ProblemNode& node = P.nodes[i];
      const auto& c = inst.node_costs[i];
      if (c.empty()) fail_at(fmt::format("/problem/nodes/costs/{}", i), "node has no strategies");
      if (usages[i].size() != c.size())
        fail_at(fmt::format("/problem/nodes/usages/{}", i),
                fmt::format("{} usages but {} costs", usages[i].size(), c.size()));
      if (intervals[i].second < intervals[i].first)
        fail_at(fmt::format("/problem/nodes/intervals/{}", i),
                fmt::format("interval [{}, {}) is reversed", intervals[i].first, intervals[i].second));
      node.start = intervals[i].first;
      node.end = intervals[i].second;
      node.costs.resize(c.size());
      for (size_t s = 0; s < c.size(); ++s)
        node.costs[s] = c[s] >= kIopddlForbiddenCost ? kInfCost : static_cast<Cost>(c[s]);
      node.usages = std::move(usages[i]);
    }
    P.edges.resize(edge_nodes.size());
    for (size_t k = 0; k < edge_nodes.size(); ++k) {
      auto [u, v] = edge_nodes[k];
      if (u < 0 || v < 0 || static_cast<size_t>(u) >= n || static_cast<size_t>(v) >= n)
        fail_at(fmt::format("/problem/edges/nodes/{}", k),
                fmt::format("node index out of range [0, {})", n));
      if (u == v) fail_at(fmt::format("/problem/edges/nodes/{}", k), "self loop");
      ProblemEdge& e = P.edges[k];
      e.u = static_cast<PNodeIdx>(u);
      e.v = static_cast<PNodeIdx>(v);
      const auto& c = inst.edge_costs[k];
      size_t want = P.nodes[static_cast<size_t>(u)].costs.size() * P.nodes[static_cast<size_t>(v)].costs.size();
      if (c.size() != want)
        fail_at(fmt::format("/problem/edges/costs/{}", k),
                fmt::format("{} costs, expected {} x {} = {}", c.size(),
                            P.nodes[static_cast<size_t>(u)].costs.size(),
                            P.nodes[static_cast<size_t>(v)].costs.size(), want));
      e.costs.resize(c.size());
      for (size_t s = 0; s < c.size(); ++s)
        e.costs[s] = c[s] >= kIopddlForbiddenCost ? kInfCost : static_cast<Cost>(c[s]);
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string source_;
  std::vector<PathElem> path_;
  std::string scratch_;
  bool post_check_ = false;
  int depth_ = 0;
};

}  // namespace

IopddlInstance parse_iopddl(const std::string& text, const std::string& source) {
  return Parser(text, source).parse();
}

IopddlInstance parse_iopddl_bytes(std::string data, const std::string& source) {
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
      static_cast<unsigned char>(data[1]) == 0x8b)
    data = gunzip(data, source);
  return parse_iopddl(data, source);
}

IopddlInstance read_iopddl(const std::string& path) {
  return parse_iopddl_bytes(read_file_bytes(path), path);
}

IopddlInstance iopddl_from_problem(const Problem& p) {
  IopddlInstance inst;
  inst.problem = p;
  auto to_int = [](Cost c) {
    return std::isinf(c) || c >= static_cast<Cost>(kIopddlForbiddenCost)
               ? int64_t{1'000'000'000'000'000'000LL}
               : static_cast<int64_t>(std::llround(c));
  };
  for (const auto& n : p.nodes) {
    inst.node_costs.emplace_back();
    for (Cost c : n.costs) inst.node_costs.back().push_back(to_int(c));
  }
  for (const auto& e : p.edges) {
    inst.edge_costs.emplace_back();
    for (Cost c : e.costs) inst.edge_costs.back().push_back(to_int(c));
  }
  return inst;
}

std::string int128_to_string(__int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  unsigned __int128 u = neg ? static_cast<unsigned __int128>(0) - static_cast<unsigned __int128>(v)
                            : static_cast<unsigned __int128>(v);
  std::string s;
  while (u > 0) {
    s += static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  }
  if (neg) s += '-';
  std::reverse(s.begin(), s.end());
  return s;
}

IopddlEvaluation evaluate(const IopddlInstance& inst, const std::vector<StrategyIdx>& choice) {
  IopddlEvaluation ev;
  const Problem& P = inst.problem;
  if (choice.size() != P.nodes.size()) {
    ev.message = fmt::format("solution has {} entries, problem has {} nodes", choice.size(), P.nodes.size());
    return ev;
  }
  for (size_t i = 0; i < choice.size(); ++i) {
    if (choice[i] < 0 || static_cast<size_t>(choice[i]) >= P.nodes[i].costs.size()) {
      ev.message = fmt::format("node {}: strategy {} out of range [0, {})", i, choice[i], P.nodes[i].costs.size());
      return ev;
    }
  }
  ev.valid = true;
  __int128 total = 0;
  std::string first_forbidden;
  for (size_t i = 0; i < choice.size(); ++i) {
    int64_t c = inst.node_costs[i][static_cast<size_t>(choice[i])];
    if (c >= kIopddlForbiddenCost && first_forbidden.empty())
      first_forbidden = fmt::format("node {} uses forbidden strategy {}", i, choice[i]);
    total += c;
  }
  for (size_t k = 0; k < P.edges.size(); ++k) {
    const ProblemEdge& e = P.edges[k];
    size_t sv = P.nodes[static_cast<size_t>(e.v)].costs.size();
    int64_t c = inst.edge_costs[k][static_cast<size_t>(choice[static_cast<size_t>(e.u)]) * sv +
                                   static_cast<size_t>(choice[static_cast<size_t>(e.v)])];
    if (c >= kIopddlForbiddenCost && first_forbidden.empty())
      first_forbidden = fmt::format("edge {} ({}, {}) uses a forbidden pair ({}, {})", k, e.u, e.v,
                                    choice[static_cast<size_t>(e.u)], choice[static_cast<size_t>(e.v)]);
    total += c;
  }
  ev.cost = total;
  ev.cost_ld = static_cast<long double>(total);
  ev.cost_str = int128_to_string(total);
  ev.uses_forbidden = !first_forbidden.empty();
  // Sweep: +usage at start, -usage at end; ends sort before starts at the same time.
  std::vector<std::pair<int64_t, int64_t>> events;
  events.reserve(2 * P.nodes.size());
  for (size_t i = 0; i < P.nodes.size(); ++i) {
    const ProblemNode& n = P.nodes[i];
    if (n.end <= n.start) continue;
    int64_t u = n.usages[static_cast<size_t>(choice[i])];
    events.emplace_back(n.start, u);
    events.emplace_back(n.end, -u);
  }
  std::sort(events.begin(), events.end());
  __int128 live = 0, peak = 0;
  int64_t worst = -1;
  for (size_t k = 0; k < events.size();) {
    int64_t t = events[k].first;
    while (k < events.size() && events[k].first == t) live += events[k++].second;
    if (live > peak) {
      peak = live;
      worst = t;
    }
  }
  ev.peak_usage = static_cast<int64_t>(peak);
  ev.worst_time = worst;
  bool over = P.usage_limit >= 0 && peak > P.usage_limit;
  if (!first_forbidden.empty()) ev.message = first_forbidden;
  else if (over)
    ev.message = fmt::format("usage {} exceeds the limit {} at time {}", ev.peak_usage, P.usage_limit, worst);
  ev.feasible = first_forbidden.empty() && !over;
  return ev;
}

void write_iopddl_json(const Problem& p, std::ostream& out) {
  auto cost = [](Cost c) -> int64_t {
    if (std::isinf(c) || c >= static_cast<Cost>(kIopddlForbiddenCost)) return 1'000'000'000'000'000'000LL;
    return static_cast<int64_t>(std::llround(c));
  };
  fmt::memory_buffer b;
  auto it = std::back_inserter(b);
  // Writes `n` bracketed lists, list i holding get(i)'s numbers mapped by `f`.
  auto lists = [&](size_t n, auto get, auto f) {
    for (size_t i = 0; i < n; ++i) {
      fmt::format_to(it, "{}[", i ? "," : "");
      const auto& v = get(i);
      for (size_t s = 0; s < v.size(); ++s) fmt::format_to(it, "{}{}", s ? "," : "", f(v[s]));
      fmt::format_to(it, "]");
    }
  };
  auto same = [](auto x) { return x; };
  fmt::format_to(it, "{{\"problem\":{{\"name\":{},\"nodes\":{{\"intervals\":[",
                 // A name read from a file may hold invalid UTF-8: replaced, not thrown on.
                 nlohmann::json(p.name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  for (size_t i = 0; i < p.nodes.size(); ++i)
    fmt::format_to(it, "{}[{},{}]", i ? "," : "", p.nodes[i].start, p.nodes[i].end);
  fmt::format_to(it, "],\"costs\":[");
  lists(p.nodes.size(), [&](size_t i) -> const auto& { return p.nodes[i].costs; }, cost);
  fmt::format_to(it, "],\"usages\":[");
  lists(p.nodes.size(), [&](size_t i) -> const auto& { return p.nodes[i].usages; }, same);
  fmt::format_to(it, "]}},\"edges\":{{\"nodes\":[");
  for (size_t k = 0; k < p.edges.size(); ++k)
    fmt::format_to(it, "{}[{},{}]", k ? "," : "", p.edges[k].u, p.edges[k].v);
  fmt::format_to(it, "],\"costs\":[");
  lists(p.edges.size(), [&](size_t k) -> const auto& { return p.edges[k].costs; }, cost);
  fmt::format_to(it, "]}}");
  if (p.usage_limit >= 0) fmt::format_to(it, ",\"usage_limit\":{}", p.usage_limit);
  fmt::format_to(it, "}}}}\n");
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

void write_iopddl_json(const Problem& p, const std::string& path) {
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw IopddlError(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
    write_iopddl_json(p, f);
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw IopddlError(fmt::format("{}: write failed", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw IopddlError(fmt::format("{}: cannot rename from {}: {}", path, tmp, std::strerror(err)));
  }
}

}  // namespace autoshard

#include "mesh/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <charconv>
#include <set>
#include <stdexcept>

namespace autoshard {

CommBackend parse_backend(std::string_view s, std::string_view option) {
  if (s == "nccl") return CommBackend::kNccl;
  if (s == "gloo") return CommBackend::kGloo;
  throw std::invalid_argument(fmt::format("{}: expected nccl or gloo, got '{}'", option, s));
}

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> names, const Hardware& hw,
           CommBackend backend)
    : hw_(hw), backend_(backend) {
  if (shape.empty()) throw std::invalid_argument("mesh: empty shape");
  if (names.empty()) {
    for (size_t i = 0; i < shape.size(); ++i) names.push_back(fmt::format("d{}", i));
  }
  if (names.size() != shape.size())
    throw std::invalid_argument(fmt::format("mesh: {} dims but {} names", shape.size(),
                                            names.size()));
  std::set<std::string> seen;
  for (const auto& n : names) {
    if (n.empty()) throw std::invalid_argument("mesh: empty dim name");
    if (!seen.insert(n).second)
      throw std::invalid_argument(fmt::format("mesh: duplicate dim name '{}'", n));
  }
  dims_.resize(shape.size());
  // DTensor's MeshTopoInfo walks dims from the last one, multiplying sizes; once the running
  // product exceeds the GPUs per host the dim spans hosts.
  int64_t running = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] < 1)
      throw std::invalid_argument(fmt::format("mesh: dim {} has size {}", k, shape[k]));
    // 2^24 devices is far beyond any cluster and keeps device-count products in range.
    if (shape[k] > (int64_t{1} << 24) / running)
      throw std::invalid_argument("mesh: more than 2^24 devices");
    running *= shape[k];
    MeshDim& d = dims_[k];
    d.name = names[k];
    d.size = shape[k];
    d.inter_node = running > hw.gpus_per_node;
    if (backend == CommBackend::kGloo) {
      // Gloo moves data through host memory and TCP; assume a 100 Gb/s NIC-class rate
      // (12.5 GB/s) and 50 us per hop, for both kinds of dims.
      d.busbw_gbps = 12.5;
      d.latency_us = 50.0;
    } else {
      d.busbw_gbps = d.inter_node ? hw.inter_busbw_gbps : hw.intra_busbw_gbps;
      d.latency_us = d.inter_node ? hw.inter_latency_us : hw.intra_latency_us;
    }
  }
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<int64_t> Mesh::parse_shape(std::string_view text) {
  std::string_view s = trim(text);
  if (s.empty()) throw std::invalid_argument("mesh shape: empty");
  // Python tuple/list spelling: "(2, 8)", "[16]", "(16,)".
  if ((s.front() == '(' && s.back() == ')') || (s.front() == '[' && s.back() == ']')) {
    s = trim(s.substr(1, s.size() - 2));
    if (!s.empty() && s.back() == ',') s = trim(s.substr(0, s.size() - 1));
    if (s.empty()) throw std::invalid_argument(fmt::format("mesh shape '{}': empty", text));
  }
  std::vector<int64_t> shape;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t next = s.find_first_of("x,X*", pos);
    if (next == std::string_view::npos) next = s.size();
    std::string_view tok = trim(s.substr(pos, next - pos));
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (tok.empty() || ec != std::errc() || ptr != tok.data() + tok.size() || v < 1)
      throw std::invalid_argument(fmt::format(
          "mesh shape '{}': '{}' at position {} is not a positive integer", text, tok,
          static_cast<size_t>(s.data() - text.data()) + pos));
    shape.push_back(v);
    pos = next + 1;
  }
  return shape;
}

std::vector<std::string> Mesh::parse_names(std::string_view text) {
  std::vector<std::string> names;
  std::string_view s = trim(text);
  if (s.empty()) return names;  // no names given: the mesh picks d0, d1, ...
  std::set<std::string, std::less<>> seen;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t next = s.find(',', pos);
    if (next == std::string_view::npos) next = s.size();
    std::string_view name = trim(s.substr(pos, next - pos));
    if (name.empty())
      throw std::invalid_argument(
          fmt::format("mesh dim names '{}': empty name in item {}", text, names.size()));
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
        throw std::invalid_argument(fmt::format(
            "mesh dim names '{}': '{}' has character '{}' (use letters, digits, '_' or '-')",
            text, name, c));
    if (!seen.emplace(name).second)
      throw std::invalid_argument(fmt::format("mesh dim names '{}': duplicate '{}'", text, name));
    names.emplace_back(name);
    pos = next + 1;
  }
  return names;
}

std::vector<int64_t> Mesh::shape() const {
  std::vector<int64_t> r;
  for (const auto& d : dims_) r.push_back(d.size);
  return r;
}

std::vector<std::string> Mesh::names() const {
  std::vector<std::string> r;
  for (const auto& d : dims_) r.push_back(d.name);
  return r;
}

int64_t Mesh::num_devices() const {
  int64_t n = 1;
  for (const auto& d : dims_) n *= d.size;
  return n;
}

std::string Mesh::describe() const {
  return fmt::format("{} ({})", fmt::join(shape(), "x"), fmt::join(names(), ", "));
}

}  // namespace autoshard

#pragma once
/// Shared checks for the libFuzzer harnesses: every loader must either return a value or throw
/// std::runtime_error with a one-line message that starts with the origin it was given.  Any
/// other exception escaping (nlohmann type errors, std::out_of_range, bad_alloc...) reaches
/// libFuzzer as an uncaught exception, i.e. a crash, which is the point.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace autoshard::fuzz {

/// Aborts (a fuzzer crash) unless `what` is one line starting with "<origin>".
inline void check_message(std::string_view what, std::string_view origin) {
  bool ok = what.substr(0, origin.size()) == origin && what.find('\n') == std::string_view::npos &&
            what.find('\r') == std::string_view::npos && what.size() < 4096;
  if (!ok) {
    std::fprintf(stderr, "bad error message (must be one line starting with '%.*s'): %.*s\n",
                 static_cast<int>(origin.size()), origin.data(), static_cast<int>(what.size()),
                 what.data());
    std::abort();
  }
}

/// Aborts with a message when a property the harness checks does not hold.
[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "property violated: %s\n", why.c_str());
  std::abort();
}

/// A file below the source tree (AUTOSHARD_SOURCE_DIR), read once by a harness, e.g. the graph
/// that placements files refer to.  Aborts when missing: the harness cannot run without it.
inline std::string source_file(const std::string& rel) {
  std::string path = std::string(AUTOSHARD_SOURCE_DIR) + "/" + rel;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open " + path);
  std::string data;
  char buf[1 << 14];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  std::fclose(f);
  return data;
}

}  // namespace autoshard::fuzz

#include "ir/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace autoshard {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open file: {}", path,
                                                std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  // Reading a directory "opens" on Linux but fails on the first read.
  if (in.bad()) throw std::runtime_error(fmt::format("{}: cannot read file", path));
  return ss.str();
}

namespace {

[[noreturn]] void fail_write(const std::string& path, std::string_view what, int err) {
  throw std::runtime_error(
      fmt::format("{}: cannot write file: {}: {}", path, what, std::strerror(err)));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  // The temporary lives in the same directory so that rename() is atomic (same file system).
  // O_EXCL plus pid and a counter keep concurrent writers from sharing a temporary.
  static std::atomic<unsigned> counter{0};
  std::string tmp = fmt::format("{}.tmp.{}.{}", path, static_cast<long>(::getpid()),
                                counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail_write(path, "create temporary", errno);
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail_write(path, "write", err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail_write(path, "fsync", err);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail_write(path, "close", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail_write(path, "rename", err);
  }
}

std::string one_line(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return r;
}

std::string excerpt(std::string_view s, size_t max) {
  if (s.size() <= max) return one_line(s);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not mid-character
  return one_line(s.substr(0, n)) + "...";
}

namespace {

/// Throws "<origin>: malformed JSON at line L, column C (byte B): <reason>" for a 0-based byte.
[[noreturn]] void throw_malformed_at(std::string_view text, std::string_view origin, size_t byte,
                                     const std::string& reason) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  throw std::runtime_error(one_line(fmt::format(
      "{}: malformed JSON at line {}, column {} (byte {}): {}", origin, line, column, byte,
      reason)));
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, std::string_view origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line L, column C:
    // <reason>"; keep only the reason and compute the position ourselves.
    std::string msg = e.what();
    std::string reason = msg;
    if (size_t col = msg.find("column"); col != std::string::npos) {
      if (size_t colon = msg.find(": ", col); colon != std::string::npos)
        reason = msg.substr(colon + 2);
    }
    // The "last read" excerpt can hold the rest of a huge file (unterminated string).
    if (reason.size() > 160) reason = reason.substr(0, 160) + "...'";
    // e.byte is 1-based and may point one past the end for truncated input.
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    if (byte > text.size()) byte = text.size();
    throw_malformed_at(text, origin, byte, reason);
  } catch (const nlohmann::json::exception& e) {
    // out_of_range.406: a number beyond double ("1e999"); nlohmann gives no position, so the
    // token it quotes is looked up in the text (found by the fuzzer, issue 14).
    std::string msg = e.what();
    std::string token;
    if (size_t q = msg.find('\''); q != std::string::npos) {
      size_t q2 = msg.find('\'', q + 1);
      if (q2 != std::string::npos) token = msg.substr(q + 1, q2 - q - 1);
    }
    size_t byte = token.empty() ? std::string_view::npos : text.find(token);
    std::string reason = msg.find("number overflow") != std::string::npos
                             ? fmt::format("number '{}' out of range", token.substr(0, 64))
                             : msg.substr(0, 160);
    if (byte == std::string_view::npos)
      throw std::runtime_error(one_line(fmt::format("{}: malformed JSON: {}", origin, reason)));
    throw_malformed_at(text, origin, byte, reason);
  }
}

}  // namespace autoshard

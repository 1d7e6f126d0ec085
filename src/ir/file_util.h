#pragma once
/// Small file and JSON helpers shared by every reader/writer of autoshard's files, so that all
/// of them report errors the same way: one line, "<origin>: <where>: <why>".
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace autoshard {

/// Reads a whole file.  Throws std::runtime_error "<path>: cannot open file: <reason>".
std::string read_text_file(const std::string& path);

/// Writes `content` to a temporary file beside `path`, then renames it over `path`, so that
/// readers never see a half-written file.  Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, std::string_view content);

/// Parses JSON text.  On malformed input throws std::runtime_error
/// "<origin>: malformed JSON at line L, column C (byte B): <reason>" on one line.
nlohmann::json parse_json_text(std::string_view text, std::string_view origin);

/// Replaces control characters (newlines, tabs...) by spaces so a message stays on one line.
std::string one_line(std::string_view s);
/// one_line(s) cut to at most `max` bytes (at a UTF-8 character boundary) with "..." appended
/// when cut: how a message quotes a value from a file, which may be megabytes long.
std::string excerpt(std::string_view s, size_t max = 80);

}  // namespace autoshard

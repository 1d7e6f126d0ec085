#include "io/container.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <stdexcept>

namespace autoshard {

namespace {

constexpr char kStateMagic[4] = {'A', 'S', 'H', 'D'};
constexpr char kReplayMagic[4] = {'A', 'S', 'R', 'P'};
constexpr uint32_t kZstd = 1;

const char* magic_of(FileKind k) { return k == FileKind::kState ? kStateMagic : kReplayMagic; }

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + static_cast<size_t>(i)])) << (8 * i);
  return v;
}
uint64_t get_u64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + static_cast<size_t>(i)])) << (8 * i);
  return v;
}

/// CRC-32 of the header's first 32 bytes and the payload (zlib's crc32 takes uInt lengths:
/// feed large payloads in pieces).
uint32_t checksum(std::string_view header32, std::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(header32.data()), static_cast<uInt>(header32.size()));
  size_t at = 0;
  while (at < payload.size()) {
    size_t n = std::min<size_t>(payload.size() - at, size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

[[noreturn]] void fail(std::string_view origin, size_t offset, const std::string& why) {
  throw std::runtime_error(fmt::format("{}: byte {}: {}", origin, offset, why));
}

}  // namespace

std::string_view file_kind_name(FileKind k) {
  return k == FileKind::kState ? "state" : "replay";
}

std::string pack_container(FileKind kind, std::string_view payload, int level) {
  size_t bound = ZSTD_compressBound(payload.size());
  std::string out(kContainerHeaderSize + bound, '\0');
  size_t n = ZSTD_compress(out.data() + kContainerHeaderSize, bound, payload.data(), payload.size(), level);
  if (ZSTD_isError(n)) throw std::runtime_error(fmt::format("zstd compression failed: {}", ZSTD_getErrorName(n)));
  out.resize(kContainerHeaderSize + n);
  std::memcpy(out.data(), magic_of(kind), 4);
  put_u32(out, 4, kStateFormatVersion);
  put_u32(out, 8, kZstd);
  put_u32(out, 12, 0);
  put_u64(out, 16, payload.size());
  put_u64(out, 24, n);
  put_u32(out, 32, checksum(std::string_view(out).substr(0, 32), std::string_view(out).substr(kContainerHeaderSize)));
  return out;
}

std::string unpack_container(FileKind kind, std::string_view file, std::string_view origin,
                             uint64_t max_payload) {
  const std::string_view name = file_kind_name(kind);
  if (file.size() < 4 || std::memcmp(file.data(), magic_of(kind), std::min<size_t>(4, file.size())) != 0) {
    FileKind other = kind == FileKind::kState ? FileKind::kReplay : FileKind::kState;
    if (file.size() >= 4 && std::memcmp(file.data(), magic_of(other), 4) == 0)
      fail(origin, 0, fmt::format("this is an autoshard {} file, not a {} file", file_kind_name(other), name));
    if (file.size() < 4 && std::memcmp(file.data(), magic_of(kind), file.size()) == 0)
      fail(origin, file.size(), fmt::format("truncated {} header ({} of {} bytes)", name, file.size(), kContainerHeaderSize));
    fail(origin, 0, fmt::format("not an autoshard {} file (bad magic)", name));
  }
  if (file.size() < kContainerHeaderSize)
    fail(origin, file.size(), fmt::format("truncated {} header ({} of {} bytes)", name, file.size(), kContainerHeaderSize));
  uint32_t version = get_u32(file, 4);
  if (version > kStateFormatVersion)
    throw std::runtime_error(fmt::format(
        "{}: {} format version {} is newer than this autoshard supports ({})", origin, name, version,
        kStateFormatVersion));
  if (version == 0) fail(origin, 4, "format version 0 is invalid");
  uint32_t compression = get_u32(file, 8);
  if (compression != kZstd) fail(origin, 8, fmt::format("unknown compression {} (expected 1 = zstd)", compression));
  uint32_t flags = get_u32(file, 12);
  if (flags != 0) fail(origin, 12, fmt::format("unknown flags {:#x}", flags));
  uint64_t usize = get_u64(file, 16);
  uint64_t csize = get_u64(file, 24);
  const uint64_t have = file.size() - kContainerHeaderSize;
  if (csize != have)
    fail(origin, 24, csize > have ? fmt::format("truncated: the header declares {} payload bytes but the file has {}", csize, have)
                                  : fmt::format("{} bytes of trailing data after the {}-byte payload", have - csize, csize));
  if (usize > max_payload)
    fail(origin, 16, fmt::format("declared payload of {} bytes exceeds the limit of {}", usize, max_payload));
  const std::string_view payload = file.substr(kContainerHeaderSize);
  uint32_t stored = get_u32(file, 32);
  uint32_t actual = checksum(file.substr(0, 32), payload);
  if (stored != actual)
    fail(origin, 32, fmt::format("checksum mismatch (stored {:08x}, computed {:08x}): the file is corrupted", stored, actual));
  unsigned long long frame = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (frame == ZSTD_CONTENTSIZE_ERROR || frame == ZSTD_CONTENTSIZE_UNKNOWN || frame != usize)
    fail(origin, kContainerHeaderSize, "the compressed payload does not match the declared size");
  std::string out(static_cast<size_t>(usize), '\0');
  size_t n = ZSTD_decompress(out.data(), out.size(), payload.data(), payload.size());
  if (ZSTD_isError(n)) fail(origin, kContainerHeaderSize, fmt::format("cannot decompress: {}", ZSTD_getErrorName(n)));
  if (n != usize) fail(origin, kContainerHeaderSize, fmt::format("decompressed {} bytes, declared {}", n, usize));
  return out;
}

}  // namespace autoshard

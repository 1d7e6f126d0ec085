#pragma once
/// The framing of autoshard's binary files (state .ap and replay .replay): a fixed header, then
/// a zstd-compressed payload.
///
///   offset  size  field
///        0     4  magic: "ASHD" (state) or "ASRP" (replay)
///        4     4  format version (little-endian u32)
///        8     4  compression: 1 = zstd
///       12     4  flags (0)
///       16     8  uncompressed payload size (u64)
///       24     8  compressed payload size (u64) = file size - 36
///       32     4  CRC-32 (zlib) of bytes 0..31 and of the compressed payload
///       36     -  payload
///
/// Reading checks, in order and before allocating anything sized by the file: the magic, the
/// version, the compression, the declared sizes against the file size and a decompression cap,
/// the checksum; only then does it decompress.  Every failure is a one-line
/// std::runtime_error "<origin>: byte <offset>: <why>".
#include <cstdint>
#include <string>
#include <string_view>

namespace autoshard {

enum class FileKind : uint8_t { kState, kReplay };

inline constexpr uint32_t kStateFormatVersion = 1;
inline constexpr size_t kContainerHeaderSize = 36;
/// Largest payload a reader decompresses (protobuf cannot parse more than 2 GiB anyway).
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 31;

std::string_view file_kind_name(FileKind k);

/// Header + compressed payload.  `level` is the zstd level.
std::string pack_container(FileKind kind, std::string_view payload, int level = 3);

/// Verifies and decompresses; returns the payload.
std::string unpack_container(FileKind kind, std::string_view file, std::string_view origin,
                             uint64_t max_payload = kMaxPayloadBytes);

}  // namespace autoshard

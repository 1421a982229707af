// Reading an input file a user named, with a size cap.
//
// Inputs may be anything a path can name: a regular file, a FIFO or process substitution
// (`<(generate-topology)`), a device. Streams that never end (`/dev/zero`, `yes > fifo`) must not
// exhaust memory, so at most kMaxInputBytes are read; a longer input is a ConfigError naming the
// limit. A FIFO with no writer reads as empty instead of blocking for ever, one whose writer
// holds it open without writing is refused after kInputIdleMillis, and one that trickles (a byte
// every few seconds, never idle for long) after kInputTotalMillis.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace cs {

// 64 MiB: a generated topology listing 100,000 devices and links is about 10 MB.
inline constexpr std::int64_t kMaxInputBytes = std::int64_t{64} << 20;

// 5 s: the longest a stream (a FIFO, a process substitution) may send nothing before it ends.
inline constexpr int kInputIdleMillis = 5000;

// 60 s: the longest a stream may take to end at all (a generator that writes a topology takes
// well under a second).
inline constexpr int kInputTotalMillis = 60000;

// The whole content of `path`. Throws ConfigError located at `shown` (the path as the user wrote
// it, or e.g. "--megatron-args @FILE") when the path does not exist, is a folder, cannot be read,
// holds more than `max_bytes`, or is a stream that sends nothing for `idle_ms` without ending or
// has not ended after `total_ms`; `what` names the input in messages ("a YAML file").
std::string read_input_file(const std::filesystem::path& path, const std::string& shown,
                            const std::string& what, std::int64_t max_bytes = kMaxInputBytes,
                            int idle_ms = kInputIdleMillis, int total_ms = kInputTotalMillis);

// For readers that must read an input to its end (a trace, an ET file, a log): a FIFO with a
// writer that never closes would block them for ever and a device such as /dev/zero never ends,
// so anything but a regular file (or a link to one) is refused, and so is a regular file above
// `max_bytes`. Returns the file's size. Throws ConfigError located at `shown`, naming `what` and
// the limit, for those and for a missing file or a folder.
std::int64_t require_regular_file(const std::filesystem::path& path, const std::string& shown,
                                  const std::string& what, std::int64_t max_bytes);
// read_input_file of a file require_regular_file accepts.
std::string read_regular_file(const std::filesystem::path& path, const std::string& shown,
                              const std::string& what, std::int64_t max_bytes = kMaxInputBytes);
// "64 MiB", "3 GiB", or the number of bytes when it is no whole number of MiB.
std::string size_text(std::int64_t bytes);

}  // namespace cs

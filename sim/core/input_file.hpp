// Reading an input file a user named, with a size cap.
//
// Inputs may be anything a path can name: a regular file, a FIFO or process substitution
// (`<(generate-topology)`), a device. Streams that never end (`/dev/zero`, `yes > fifo`) must not
// exhaust memory, so at most kMaxInputBytes are read; a longer input is a ConfigError naming the
// limit. A FIFO with no writer reads as empty instead of blocking for ever.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace cs {

// 64 MiB: a generated topology listing 100,000 devices and links is about 10 MB.
inline constexpr std::int64_t kMaxInputBytes = std::int64_t{64} << 20;

// The whole content of `path`. Throws ConfigError located at `shown` (the path as the user wrote
// it, or e.g. "--megatron-args @FILE") when the path does not exist, is a folder, cannot be read,
// or holds more than `max_bytes`; `what` names the input in messages ("a YAML file").
std::string read_input_file(const std::filesystem::path& path, const std::string& shown,
                            const std::string& what, std::int64_t max_bytes = kMaxInputBytes);

}  // namespace cs

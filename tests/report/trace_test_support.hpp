// Helpers for the trace tests: running the 16-GPU fixture with a trace, reading the result back
// (JSON with nlohmann::json, .pftrace through `protoc --decode` into a small text-format tree).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "session/run.hpp"

namespace cs::test {

std::filesystem::path trace_dir();  // a fresh folder per test binary run
std::string read_bytes(const std::filesystem::path& p);

// Runs tests/report/sixteen-gpus.yaml (two DGX H100 nodes, tp 2, pp 4, dp 2, 4 microbatches).
report::Summary run_fixture(const std::filesystem::path& trace, report::TraceOptions options = {});

// A message of protobuf text format: scalar fields as text (strings unquoted), sub-messages.
struct TextMessage {
    std::multimap<std::string, std::string> fields;
    std::multimap<std::string, TextMessage> messages;
    std::string field(const std::string& name, const std::string& fallback = "") const;
    const TextMessage* message(const std::string& name) const;
    std::vector<std::string> all(const std::string& name) const;
};

bool have_protoc();
// Decodes a .pftrace with protoc and tests/report/perfetto_subset.proto; the packets in order.
std::vector<TextMessage> decode_pftrace(const std::filesystem::path& trace);

}  // namespace cs::test

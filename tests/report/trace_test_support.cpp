#include "trace_test_support.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "workload/experiment.hpp"

namespace cs::test {

std::filesystem::path trace_dir() {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() /
                 ("clustersim-report-tests-" + std::to_string(::getpid()));
        std::filesystem::remove_all(d);
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

std::string read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

report::Summary run_fixture(const std::filesystem::path& trace, report::TraceOptions options) {
    const auto spec = workload::load_experiment(
        std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "tests/report/sixteen-gpus.yaml",
        {"topology.nodes=2"});
    api::RunOptions opt;
    opt.trace = trace;
    opt.trace_options = std::move(options);
    return api::run(spec, opt).summary;
}

std::string TextMessage::field(const std::string& name, const std::string& fallback) const {
    auto it = fields.find(name);
    return it == fields.end() ? fallback : it->second;
}

const TextMessage* TextMessage::message(const std::string& name) const {
    auto it = messages.find(name);
    return it == messages.end() ? nullptr : &it->second;
}

std::vector<std::string> TextMessage::all(const std::string& name) const {
    std::vector<std::string> out;
    auto [a, b] = fields.equal_range(name);
    for (auto it = a; it != b; ++it)
        out.push_back(it->second);
    return out;
}

bool have_protoc() {
    return std::system("protoc --version > /dev/null 2>&1") == 0;
}

namespace {
std::string unquote(const std::string& v) {
    if (v.size() < 2 || v.front() != '"') return v;
    std::string out;
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
        if (v[i] == '\\' && i + 2 < v.size()) ++i;
        out += v[i];
    }
    return out;
}

std::string trim(const std::string& s) {
    const auto a = s.find_first_not_of(' ');
    return a == std::string::npos ? "" : s.substr(a);
}

// Parses lines from `in` until the closing brace of the current message.
void parse_message(std::istream& in, TextMessage& msg) {
    std::string line;
    while (std::getline(in, line)) {
        line = trim(line);
        if (line.empty()) continue;
        if (line == "}") return;
        if (line.size() > 2 && line.substr(line.size() - 2) == " {") {
            TextMessage child;
            parse_message(in, child);
            msg.messages.emplace(line.substr(0, line.size() - 2), std::move(child));
            continue;
        }
        const auto colon = line.find(": ");
        if (colon == std::string::npos) throw std::runtime_error("unreadable protoc line: " + line);
        msg.fields.emplace(line.substr(0, colon), unquote(line.substr(colon + 2)));
    }
}
}  // namespace

std::vector<TextMessage> decode_pftrace(const std::filesystem::path& trace) {
    const std::filesystem::path proto_dir =
        std::filesystem::path(CLUSTERSIM_SOURCE_DIR) / "tests/report";
    const auto out = trace.string() + ".txt";
    const std::string cmd = "protoc --decode=perfetto.protos.Trace -I '" + proto_dir.string() +
                            "' '" + (proto_dir / "perfetto_subset.proto").string() + "' < '" +
                            trace.string() + "' > '" + out + "'";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("protoc failed: " + cmd);
    std::ifstream in(out);
    TextMessage root;
    parse_message(in, root);
    std::vector<TextMessage> packets;
    auto [a, b] = root.messages.equal_range("packet");
    for (auto it = a; it != b; ++it)
        packets.push_back(it->second);
    return packets;
}

}  // namespace cs::test

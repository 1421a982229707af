#include "report/chrome_trace.hpp"

#include <cstdio>

#include "schedule/schedule.hpp"

namespace cs::report {
namespace {
enum Stream : int { kCompute = 0, kPpSend = 1, kPpRecv = 2, kDp = 3 };
const char* const kStreamNames[] = {"compute", "pp send", "pp recv", "dp comm"};
constexpr int kStreams = 4;

std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}
}  // namespace

std::string trace_timestamp(Time t) {
    const std::int64_t ps = t.count_ps();
    char buf[40];
    std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(ps / 1000000),
                  static_cast<long long>(ps % 1000000));
    return buf;
}

ChromeTraceWriter::ChromeTraceWriter(const std::filesystem::path& path,
                                     const replay::Replay& replay,
                                     const topology::Cluster& cluster)
    : file_(path), out_(file_.stream()), replay_(replay), cluster_(cluster) {
    out_ << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
    for (const auto& w : replay_.workers()) {
        for (int gpu : w.gpus) {
            const int node = cluster_.node_of_gpu(gpu) < 0 ? 0 : cluster_.node_of_gpu(gpu);
            begin_event();
            out_ << "{\"ph\":\"M\",\"pid\":" << node << ",\"name\":\"process_name\",\"args\":{"
                 << "\"name\":\"node " << node << "\"}}";
            for (int s = 0; s < kStreams; ++s) {
                begin_event();
                out_ << "{\"ph\":\"M\",\"pid\":" << node << ",\"tid\":" << gpu * kStreams + s
                     << ",\"name\":\"thread_name\",\"args\":{\"name\":\"GPU " << gpu << " "
                     << kStreamNames[s] << " (stage " << w.stage << ")\"}}";
                begin_event();
                out_ << "{\"ph\":\"M\",\"pid\":" << node << ",\"tid\":" << gpu * kStreams + s
                     << ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":"
                     << gpu * kStreams + s << "}}";
            }
        }
    }
}

void ChromeTraceWriter::begin_event() {
    if (!first_) out_ << ",\n";
    first_ = false;
}

void ChromeTraceWriter::slice(int gpu, int stream, const std::string& name, Time start, Time end,
                              const std::string& args) {
    const int node = cluster_.node_of_gpu(gpu) < 0 ? 0 : cluster_.node_of_gpu(gpu);
    begin_event();
    out_ << "{\"ph\":\"X\",\"pid\":" << node << ",\"tid\":" << gpu * kStreams + stream
         << ",\"ts\":" << trace_timestamp(start) << ",\"dur\":" << trace_timestamp(end - start)
         << ",\"name\":\"" << escape(name) << "\",\"args\":{" << args << "}}";
}

void ChromeTraceWriter::on_pass(const replay::PassRecord& p) {
    const auto& w = replay_.workers()[static_cast<std::size_t>(p.worker)];
    const std::string name = std::string(schedule::pass_letter(p.pass)) + std::to_string(p.microbatch);
    char args[256];
    std::snprintf(args, sizeof args,
                  "\"stage\":%d,\"chunk\":%d,\"virtual_stage\":%d,\"microbatch\":%d,"
                  "\"compute_us\":%s,\"collective_us\":%s,\"model_flops\":%.17g",
                  w.stage, p.chunk, p.virtual_stage, p.microbatch,
                  trace_timestamp(p.compute).c_str(), trace_timestamp(p.collective).c_str(),
                  p.plan ? p.plan->model_flops().value : 0.0);
    for (int gpu : w.gpus) slice(gpu, kCompute, name, p.start, p.end, args);
}

void ChromeTraceWriter::on_optimizer(int worker, Time start, Time end) {
    for (int gpu : replay_.workers()[static_cast<std::size_t>(worker)].gpus)
        slice(gpu, kCompute, "optimizer step", start, end, "");
}

void ChromeTraceWriter::on_transfer(const replay::TransferRecord& t) {
    using K = replay::TransferRecord::Kind;
    const auto& src = replay_.workers()[static_cast<std::size_t>(t.src_worker)];
    const auto& dst = replay_.workers()[static_cast<std::size_t>(t.dst_worker)];
    char args[200];
    std::snprintf(args, sizeof args, "\"bytes\":%lld,\"microbatch\":%d,\"to_stage\":%d",
                  static_cast<long long>(t.bytes.value), t.microbatch, dst.stage);
    if (t.kind == K::DpGradients || t.kind == K::DpParameters) {
        const char* name = t.kind == K::DpGradients ? "dp gradient sync" : "dp parameter gather";
        for (int gpu : src.gpus) slice(gpu, kDp, name, t.start, t.end, args);
        return;
    }
    if (t.src_worker == t.dst_worker) return;  // handed over on the same GPU
    const std::string name = std::string(t.kind == K::Activation ? "send act " : "send grad ") +
                             std::to_string(t.microbatch);
    const std::string rname = std::string(t.kind == K::Activation ? "recv act " : "recv grad ") +
                              std::to_string(t.microbatch);
    for (std::size_t g = 0; g < src.gpus.size(); ++g) {
        slice(src.gpus[g], kPpSend, name, t.start, t.end, args);
        slice(dst.gpus[g], kPpRecv, rname, t.start, t.end, args);
        // Flow arrow: sender's send slice -> receiver's receive slice.
        const std::uint64_t id = next_flow_++;
        const int spid = cluster_.node_of_gpu(src.gpus[g]) < 0 ? 0 : cluster_.node_of_gpu(src.gpus[g]);
        const int dpid = cluster_.node_of_gpu(dst.gpus[g]) < 0 ? 0 : cluster_.node_of_gpu(dst.gpus[g]);
        begin_event();
        out_ << "{\"ph\":\"s\",\"id\":" << id << ",\"pid\":" << spid
             << ",\"tid\":" << src.gpus[g] * kStreams + kPpSend << ",\"ts\":"
             << trace_timestamp(t.start) << ",\"name\":\"p2p\",\"cat\":\"pipeline\"}";
        begin_event();
        out_ << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << id << ",\"pid\":" << dpid
             << ",\"tid\":" << dst.gpus[g] * kStreams + kPpRecv << ",\"ts\":"
             << trace_timestamp(t.end) << ",\"name\":\"p2p\",\"cat\":\"pipeline\"}";
    }
}

void ChromeTraceWriter::on_iteration_end(Time end) {
    begin_event();
    out_ << "{\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" << trace_timestamp(Time::zero())
         << ",\"name\":\"iteration start\"}";
    begin_event();
    out_ << "{\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" << trace_timestamp(end)
         << ",\"name\":\"iteration end\"}";
}

void ChromeTraceWriter::finish(const std::string& metadata_json) {
    out_ << "\n],\"metadata\":" << metadata_json << "}\n";
    file_.commit();
}

}  // namespace cs::report

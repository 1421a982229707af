#include "ingest/torch_trace.hpp"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <streambuf>

#include "core/errors.hpp"
#include "core/input_file.hpp"

namespace cs::api {
namespace {

using Json = nlohmann::json;

// A read-only stream buffer over a file, inflating gzip (detected by its magic bytes) on the way,
// that knows how many bytes of JSON it has handed out, so that errors can say where they are.
class TraceStreamBuf : public std::streambuf {
  public:
    TraceStreamBuf(std::istream& in, std::string display) : in_(in), display_(std::move(display)) {
        const int c0 = in_.get(), c1 = in_.get();
        in_.clear();
        in_.seekg(0);
        gzip_ = c0 == 0x1f && c1 == 0x8b;
        if (gzip_) {
            zs_ = z_stream{};
            // 16 + MAX_WBITS: a gzip header and trailer around the deflate stream.
            if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK)
                throw ConfigError(SourceLocation{display_}, "cannot initialise zlib");
            zinit_ = true;
        }
    }
    ~TraceStreamBuf() override {
        if (zinit_) inflateEnd(&zs_);
    }
    TraceStreamBuf(const TraceStreamBuf&) = delete;
    TraceStreamBuf& operator=(const TraceStreamBuf&) = delete;

    bool gzip() const { return gzip_; }
    // JSON bytes consumed so far.
    std::int64_t offset() const { return delivered_ - (egptr() - gptr()); }

  protected:
    int_type underflow() override {
        if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
        const std::size_t n = gzip_ ? inflate_more() : read_plain();
        if (n == 0) return traits_type::eof();
        if (delivered_ + static_cast<std::int64_t>(n) > kMaxTraceJsonBytes)
            throw ConfigError(SourceLocation{display_},
                              "holds more than the " + size_text(kMaxTraceJsonBytes) +
                                  " of JSON a trace may hold" + (gzip_ ? " after inflating" : "") +
                                  "; profile fewer steps (torch.profiler's schedule) or trim it");
        scan_tokens(n);
        delivered_ += static_cast<std::int64_t>(n);
        check_ratio();
        setg(out_.data(), out_.data(), out_.data() + n);
        return traits_type::to_int_type(*gptr());
    }

  private:
    // nlohmann's lexer keeps every character it reads until the next string or number starts (it
    // holds a token whole, with the blanks, brackets and literals before it): a gzip of one endless
    // string, or of GBs of blanks, would fill memory before the parser sees the end. Counts the
    // characters since a string or number last began, across chunks.
    void scan_tokens(std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            const char c = out_[i];
            if (in_string_) {
                if (escape_)
                    escape_ = false;
                else if (c == '\\')
                    escape_ = true;
                else if (c == '"')
                    in_string_ = false;
            } else if (c == '"') {
                in_string_ = true;
                in_number_ = false;
                token_ = 0;
            } else if (c == '-' || (c >= '0' && c <= '9') ||
                       (in_number_ && (c == '.' || c == 'e' || c == 'E' || c == '+'))) {
                if (!in_number_) token_ = 0;
                in_number_ = true;
            } else {
                in_number_ = false;
            }
            if (++token_ > kMaxTraceToken)
                throw ConfigError(
                    SourceLocation{display_},
                    "byte " + std::to_string(delivered_ + static_cast<std::int64_t>(i)) +
                        (gzip_ ? " (of the inflated JSON)" : "") + ": " +
                        (in_string_   ? "a string longer than "
                         : in_number_ ? "a number longer than "
                                      : "blanks, brackets or literals without a string or "
                                        "number for more than ") +
                        size_text(kMaxTraceToken) +
                        ", the longest a trace may hold; expected a PyTorch profiler Chrome trace");
        }
    }

    // A gzip bomb inflates about 1,000 times; profiler traces about 10 to 20 times. Past the
    // first kGzipRatioAfter bytes, more than kMaxGzipRatio times the compressed bytes read is
    // refused, so that a few MB of gzip cannot make minutes of parsing.
    void check_ratio() const {
        if (!gzip_ || delivered_ <= kGzipRatioAfter || delivered_ <= kMaxGzipRatio * compressed_)
            return;
        throw ConfigError(SourceLocation{display_},
                          "inflates to more than " + std::to_string(kMaxGzipRatio) +
                              " times its compressed size (" + std::to_string(delivered_) +
                              " bytes of JSON from the first " + std::to_string(compressed_) +
                              " bytes of gzip): a gzip bomb, not a profiler trace; give the "
                              "trace uncompressed if it is one");
    }

    std::size_t read_plain() {
        in_.read(out_.data(), static_cast<std::streamsize>(out_.size()));
        return static_cast<std::size_t>(in_.gcount());
    }

    std::size_t inflate_more() {
        if (ended_) return 0;
        zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
        zs_.avail_out = static_cast<uInt>(out_.size());
        while (zs_.avail_out == out_.size()) {
            if (zs_.avail_in == 0) {
                in_.read(in_buf_.data(), static_cast<std::streamsize>(in_buf_.size()));
                const auto got = in_.gcount();
                if (got == 0)
                    throw ConfigError(SourceLocation{display_},
                                      "truncated gzip file: the compressed data ends "
                                      "at byte " +
                                          std::to_string(compressed_) +
                                          " before the end of its stream (after " +
                                          std::to_string(delivered_) + " bytes of JSON)");
                compressed_ += got;
                zs_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
                zs_.avail_in = static_cast<uInt>(got);
            }
            const int rc = inflate(&zs_, Z_NO_FLUSH);
            if (rc == Z_STREAM_END) {
                ended_ = true;
                break;
            }
            if (rc != Z_OK && rc != Z_BUF_ERROR)
                throw ConfigError(SourceLocation{display_},
                                  "corrupt gzip data near compressed byte " +
                                      std::to_string(compressed_ - zs_.avail_in) + " (zlib: " +
                                      (zs_.msg ? zs_.msg : "error " + std::to_string(rc)) + ")");
        }
        return out_.size() - zs_.avail_out;
    }

    std::istream& in_;
    std::string display_;
    bool gzip_ = false, zinit_ = false, ended_ = false;
    z_stream zs_{};
    std::array<char, 1 << 16> in_buf_{};
    std::array<char, 1 << 16> out_{};
    std::int64_t delivered_ = 0, compressed_ = 0;
    std::int64_t token_ = 0;
    bool in_string_ = false, escape_ = false, in_number_ = false;
};

// A JSON number as a whole number, when it is one within int64 (a float like 3.0 too); JSON
// floats beyond int64 must not be cast (undefined behaviour).
std::optional<std::int64_t> whole(double v) {
    if (!(v >= -9.2e18 && v <= 9.2e18) || v != std::floor(v)) return std::nullopt;
    return static_cast<std::int64_t>(v);
}

// The SAX handler: keeps the few fields of the events clustersim reads, skips the rest.
class Handler : public nlohmann::json_sax<Json> {
  public:
    Handler(TorchTrace& out, const TraceStreamBuf* buf, std::int64_t max_memory)
        : out_(out), buf_(buf), max_memory_(max_memory) {}

    bool null() override { return scalar(Value{}); }
    bool boolean(bool) override { return scalar(Value{}); }
    bool number_integer(number_integer_t v) override {
        return scalar(Value{true, static_cast<double>(v), v, true, {}});
    }
    bool number_unsigned(number_unsigned_t v) override {
        const bool fits = v <= static_cast<number_unsigned_t>(INT64_MAX);
        return scalar(
            Value{true, static_cast<double>(v), fits ? static_cast<std::int64_t>(v) : 0, fits, {}});
    }
    bool number_float(number_float_t v, const string_t&) override {
        const auto w = whole(v);
        return scalar(Value{true, v, w.value_or(0), w.has_value(), {}});
    }
    bool string(string_t& v) override { return scalar(Value{false, 0, 0, false, v}); }
    bool binary(binary_t&) override { return scalar(Value{}); }

    bool start_object(std::size_t) override {
        const auto d = stack_.size();
        check_depth();
        if (d == 0) root_object_ = true;
        if (in_events_array(d)) begin_event();
        if (event_open_ && d == event_depth_ && key_ == "args") in_args_ = true;
        stack_.push_back('o');
        return true;
    }
    bool end_object() override {
        stack_.pop_back();
        const auto d = stack_.size();
        if (in_args_ && d == event_depth_)
            in_args_ = false;
        else if (event_open_ && d + 1 == event_depth_)
            end_event();
        return true;
    }
    bool start_array(std::size_t) override {
        const auto d = stack_.size();
        check_depth();
        if (d == 0) {
            events_depth_ = 1;  // the JSON Array Format: the events themselves
            saw_events_ = true;
        } else if (d == 1 && root_object_ && key_ == "traceEvents") {
            events_depth_ = 2;
            saw_events_ = true;
        } else if (in_args_ && d == event_depth_ + 1) {
            if (key_ == "Input Dims") dims_open_ = true;
            if (key_ == "Input type") types_open_ = true;
        } else if (dims_open_ && d == event_depth_ + 2) {
            ev_.args.emplace_back();
            ev_.has_shapes = true;
        } else if (dims_open_ && d == event_depth_ + 3) {
            auto& a = ev_.args.back();
            a.list = true;
            a.shapes.emplace_back();
        }
        stack_.push_back('a');
        return true;
    }
    bool end_array() override {
        stack_.pop_back();
        const auto d = stack_.size();
        if (d == event_depth_ + 1) dims_open_ = types_open_ = false;
        if (d + 1 == events_depth_) events_depth_ = 0;
        return true;
    }
    bool key(string_t& k) override {
        key_ = k;
        return true;
    }
    bool parse_error(std::size_t position, const std::string& last_token,
                     const nlohmann::detail::exception& ex) override {
        const std::string what = ex.what();
        const bool eof = what.find("end of input") != std::string::npos;
        throw ConfigError(
            SourceLocation{out_.source},
            "byte " + std::to_string(position) + (out_.gzip ? " (of the inflated JSON)" : "") +
                ": " +
                (eof ? "truncated: the JSON ends before its last value is complete"
                     : "not valid JSON near '" + last_token.substr(0, 40) + "'") +
                (event_open_ || out_.events > 0
                     ? " (in or after traceEvents entry " + std::to_string(out_.events) + ")"
                     : "") +
                "; expected a PyTorch profiler Chrome trace (" + what + ")");
    }

    bool saw_events() const { return saw_events_; }

  private:
    struct Value {
        bool number = false;
        double real = 0;
        std::int64_t integer = 0;
        bool integral = false;  // `integer` holds the number (a whole number within int64)
        std::string text;
    };

    void check_depth() const {
        if (stack_.size() < kMaxTraceDepth) return;
        throw ConfigError(SourceLocation{out_.source},
                          "byte " + std::to_string(buf_ ? buf_->offset() : 0) +
                              (out_.gzip ? " (of the inflated JSON)" : "") +
                              ": arrays and objects nested more than " +
                              std::to_string(kMaxTraceDepth) +
                              " deep; a PyTorch profiler Chrome trace nests a few levels");
    }

    // What a kept event holds in memory, counted against --max-memory twice over: calibrate and
    // diff build about as much again from it.
    void hold(std::size_t bytes) {
        held_ += static_cast<std::int64_t>(bytes);
        if (held_ > max_memory_ / 2)
            throw ConfigError(SourceLocation{out_.source},
                              "the " + std::to_string(out_.events) +
                                  " trace events read so far keep about " + std::to_string(held_) +
                                  " bytes, and reading and fitting them would take more than "
                                  "--max-memory (" +
                                  std::to_string(max_memory_) +
                                  " bytes); raise --max-memory or profile fewer steps");
    }

    bool in_events_array(std::size_t depth) const {
        return events_depth_ > 0 && depth == events_depth_ && stack_.back() == 'a';
    }

    void begin_event() {
        event_open_ = true;
        event_depth_ = stack_.size() + 1;
        ev_ = Event{};
        bad_number_.clear();
        ev_.index = out_.events;
        ev_.offset = buf_ ? buf_->offset() : 0;
    }

    bool scalar(const Value& v) {
        const auto d = stack_.size();
        if (!event_open_) return true;
        if (d == event_depth_) {
            if (key_ == "ph")
                ev_.ph = v.text;
            else if (key_ == "cat")
                ev_.cat = v.text;
            else if (key_ == "name")
                ev_.name = v.text;
            else if (key_ == "ts" && v.number)
                ev_.ts = v.real, ev_.has_ts = true;
            else if (key_ == "dur" && v.number)
                ev_.dur = v.real, ev_.has_dur = true;
            else if (key_ == "tid" && v.number && v.integral)
                ev_.tid = v.integer;
        } else if (in_args_ && d == event_depth_ + 1) {
            if (!v.number) return true;
            if (!v.integral) {
                if (key_ == "External id" || key_ == "correlation" || key_ == "stream" ||
                    key_ == "device")
                    bad_number_ = "args \"" + key_ + "\" is not a whole number within int64";
                return true;
            }
            if (key_ == "External id")
                ev_.external_id = v.integer;
            else if (key_ == "correlation")
                ev_.correlation = v.integer;
            else if (key_ == "stream")
                ev_.stream = v.integer;
            else if (key_ == "device")
                ev_.device = v.integer;
        } else if (types_open_ && d == event_depth_ + 2) {
            ev_.types.push_back(v.text);
        } else if (dims_open_ && d == event_depth_ + 3 && v.number) {
            auto& a = ev_.args.back();
            if (a.shapes.empty()) a.shapes.emplace_back();
            a.shapes.back().push_back(dimension(v));
        } else if (dims_open_ && d == event_depth_ + 4 && v.number) {
            ev_.args.back().shapes.back().push_back(dimension(v));
        }
        return true;
    }

    // A tensor dimension of Input Dims; out of range ones are reported when the event ends.
    std::int64_t dimension(const Value& v) {
        if (!v.integral || v.integer < 0 || v.integer > kMaxTraceDim) {
            bad_number_ = "a dimension in \"Input Dims\" is " + number_text(v) +
                          "; expected a whole number from 0 to 2^40";
            return 0;
        }
        return v.integer;
    }

    static std::string number_text(const Value& v) {
        if (v.integral) return std::to_string(v.integer);
        std::ostringstream o;
        o << v.real;
        return o.str();
    }

    [[noreturn]] void fail_event(const std::string& what) const {
        throw ConfigError(SourceLocation{out_.source},
                          "traceEvents entry " + std::to_string(ev_.index) + " (byte " +
                              std::to_string(ev_.offset) + ", " + ev_.cat + " \"" +
                              ev_.name.substr(0, 60) + "\"): " + what);
    }

    void end_event() {
        event_open_ = in_args_ = dims_open_ = types_open_ = false;
        ++out_.events;
        const bool gpu = ev_.cat == "kernel" || ev_.cat == "gpu_memset" || ev_.cat == "gpu_memcpy";
        const bool cpu = ev_.cat == "cpu_op";
        const bool runtime = ev_.cat == "cuda_runtime" || ev_.cat == "cuda_driver";
        const bool annotation = ev_.cat == "user_annotation";
        if (!gpu && !cpu && !runtime && !annotation) return;
        if (ev_.ph != "X") return;
        if (!ev_.has_ts) fail_event("no numeric \"ts\" (start, microseconds)");
        if (!ev_.has_dur) fail_event("no numeric \"dur\" (duration, microseconds)");
        if (ev_.dur < 0) fail_event("negative \"dur\"");
        if (!std::isfinite(ev_.ts) || std::abs(ev_.ts) > 1e18)
            fail_event("\"ts\" is not a finite number of microseconds within 1e18");
        if (!std::isfinite(ev_.dur) || ev_.dur > kMaxTraceDurationUs)
            fail_event(
                "\"dur\" is more than the 9.2e12 microseconds (about 106 days) the "
                "simulator's clock holds");
        if (!bad_number_.empty()) fail_event(bad_number_);
        if (out_.events > kMaxTraceEvents)
            fail_event("more than " + std::to_string(kMaxTraceEvents) +
                       " trace events; profile fewer steps (torch.profiler's schedule)");
        std::size_t bytes = ev_.name.size();
        for (const auto& a : ev_.args) {
            bytes += sizeof(TraceArg) + a.type.size();
            for (const auto& shape : a.shapes) {
                bytes += sizeof(shape) + shape.size() * sizeof(std::int64_t);
                std::int64_t elements = 1;
                for (const auto dim : shape)
                    if (__builtin_mul_overflow(elements, dim, &elements) ||
                        elements > kMaxTraceShapeElements)
                        fail_event("a shape in \"Input Dims\" has more than 2^50 elements");
            }
        }
        if (gpu) {
            TraceGpuEvent g;
            g.cat = ev_.cat == "kernel"       ? TraceGpuEvent::Cat::Kernel
                    : ev_.cat == "gpu_memset" ? TraceGpuEvent::Cat::Memset
                                              : TraceGpuEvent::Cat::Memcpy;
            g.name = std::move(ev_.name);
            g.ts_us = ev_.ts;
            g.dur_us = ev_.dur;
            g.stream = ev_.stream >= 0 ? ev_.stream : ev_.tid;
            g.device = ev_.device;
            g.external_id = ev_.external_id;
            g.correlation = ev_.correlation;
            g.index = ev_.index;
            hold(sizeof(TraceGpuEvent) + bytes);
            out_.gpu.push_back(std::move(g));
        } else if (cpu) {
            TraceCpuOp op;
            op.name = std::move(ev_.name);
            op.ts_us = ev_.ts;
            op.dur_us = ev_.dur;
            op.tid = ev_.tid;
            op.external_id = ev_.external_id;
            op.has_shapes = ev_.has_shapes;
            hold(sizeof(TraceCpuOp) + bytes);
            op.args = std::move(ev_.args);
            for (std::size_t i = 0; i < op.args.size() && i < ev_.types.size(); ++i)
                op.args[i].type = ev_.types[i];
            out_.cpu_ops.push_back(std::move(op));
        } else if (runtime) {
            hold(sizeof(TraceRuntimeCall) + bytes);
            out_.runtime.push_back(
                TraceRuntimeCall{std::move(ev_.name), ev_.ts, ev_.dur, ev_.tid, ev_.correlation});
        } else {
            hold(sizeof(TraceAnnotation) + bytes);
            out_.annotations.push_back(TraceAnnotation{std::move(ev_.name), ev_.ts, ev_.dur});
        }
    }

    struct Event {
        std::string ph, cat, name;
        double ts = 0, dur = 0;
        bool has_ts = false, has_dur = false, has_shapes = false;
        std::int64_t tid = -1, external_id = -1, correlation = -1, stream = -1, device = 0;
        std::int64_t index = 0, offset = 0;
        std::vector<TraceArg> args;
        std::vector<std::string> types;
    };

    TorchTrace& out_;
    const TraceStreamBuf* buf_;
    std::int64_t max_memory_;
    std::int64_t held_ = 0;
    std::string bad_number_;  // the first out-of-range number of the open event
    std::vector<char> stack_;
    std::string key_;
    bool root_object_ = false, saw_events_ = false;
    std::size_t events_depth_ = 0, event_depth_ = 0;
    bool event_open_ = false, in_args_ = false, dims_open_ = false, types_open_ = false;
    Event ev_;
};

void parse_stream(std::istream& in, TorchTrace& out, const TraceStreamBuf* buf,
                  std::int64_t max_memory) {
    Handler handler(out, buf, max_memory);
    // strict: anything after the trace's closing bracket is an error too.
    Json::sax_parse(in, &handler, nlohmann::json::input_format_t::json, true);
    if (buf) out.bytes = buf->offset();
    if (!handler.saw_events())
        throw ConfigError(SourceLocation{out.source},
                          "not a Chrome trace: no \"traceEvents\" array (expected the JSON "
                          "torch.profiler's export_chrome_trace writes)");
    std::int64_t kernels = 0;
    for (const auto& g : out.gpu)
        kernels += g.cat == TraceGpuEvent::Cat::Kernel;
    if (kernels == 0)
        throw ConfigError(SourceLocation{out.source},
                          "" + std::to_string(out.events) +
                              " trace events but no GPU kernels (cat \"kernel\"); profile with "
                              "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]");
}

bool contains(std::string_view s, std::string_view part) {
    return s.find(part) != std::string_view::npos;
}

}  // namespace

std::int64_t TraceArg::numel(std::size_t shape) const {
    if (shape >= shapes.size() || shapes[shape].empty()) return 0;
    std::int64_t n = 1;
    for (auto d : shapes[shape])
        n *= d;
    return n;
}

TorchTrace read_torch_trace(const std::filesystem::path& path, std::int64_t max_memory) {
    TorchTrace out;
    out.source = path.string();
    // Streamed (traces run to GBs, gzipped or not), so not through read_input_file; its messages
    // for a missing file or a folder all the same.
    const SourceLocation where{out.source};
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found)
        throw ConfigError(where, "no such file");
    if (status.type() == std::filesystem::file_type::directory)
        throw ConfigError(where,
                          "is a directory, expected a PyTorch profiler trace (.json or "
                          ".json.gz)");
    require_regular_file(path, out.source, "a PyTorch profiler trace", kMaxTraceJsonBytes);
    std::ifstream file(path, std::ios::binary);
    if (!file)
        throw ConfigError(where,
                          std::string("cannot open the trace file: ") + std::strerror(errno));
    TraceStreamBuf buf(file, out.source);
    out.gzip = buf.gzip();
    std::istream in(&buf);
    parse_stream(in, out, &buf, max_memory);
    return out;
}

TorchTrace parse_torch_trace(std::string_view json, const std::string& display,
                             std::int64_t max_memory) {
    TorchTrace out;
    out.source = display;
    std::istringstream in{std::string(json)};
    TraceStreamBuf buf(in, display);
    out.gzip = buf.gzip();
    std::istream s(&buf);
    parse_stream(s, out, &buf, max_memory);
    return out;
}

std::string_view kernel_kind_name(KernelKind kind) {
    return name_of(workload::kKernelKindNames, kind);
}

int element_bytes(std::string_view type) {
    if (type == "c10::BFloat16" || type == "c10::Half" || type == "short") return 2;
    if (type == "float" || type == "int") return 4;
    if (type == "double" || type == "long int" || type == "long") return 8;
    if (type == "bool" || type == "unsigned char" || type == "signed char" ||
        contains(type, "Float8"))
        return 1;
    return 0;
}

namespace {

// Bytes summed over a hostile trace's many large tensors stay below 2^58, so that the few
// multiples op_hbm_bytes takes of them stay within int64.
std::int64_t capped_sum(std::int64_t a, std::int64_t b) {
    constexpr std::int64_t cap = std::int64_t{1} << 58;
    return a > cap - b ? cap : a + b;
}

}  // namespace

std::int64_t op_hbm_bytes(const TraceCpuOp& op, KernelKind kind) {
    if (!op.has_shapes) return 0;
    // Bytes of argument i (every tensor of a list), 0 for scalars and unknown types.
    const auto arg_bytes = [&](std::size_t i) -> std::int64_t {
        if (i >= op.args.size()) return 0;
        const auto& a = op.args[i];
        const int e = a.list ? 2 : element_bytes(a.type);  // lists: the 16-bit activations
        std::int64_t total = 0;
        for (std::size_t s = 0; s < a.shapes.size(); ++s)
            total = capped_sum(total, a.numel(s) * e);  // numel <= 2^50 (kMaxTraceShapeElements)
        return total;
    };
    std::int64_t inputs = 0;
    for (std::size_t i = 0; i < op.args.size(); ++i)
        inputs = capped_sum(inputs, arg_bytes(i));
    const std::string_view o = op.name;
    if (o == "aten::fill_" || o == "aten::zero_") return arg_bytes(0);
    if (o == "aten::copy_") return arg_bytes(0) + arg_bytes(1);
    if (kind == KernelKind::Concat) return 2 * inputs;
    if (kind == KernelKind::Reduce) return arg_bytes(0);
    if (o == "aten::native_layer_norm_backward")
        return 2 * (arg_bytes(0) + arg_bytes(1)) + arg_bytes(1);
    // Tensor lists without recorded sizes (the fused optimizers) give no bytes.
    if (inputs == 0) return 0;
    return inputs + arg_bytes(0);
}

}  // namespace cs::api

#include "ingest/torch_trace.hpp"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <streambuf>

#include "core/errors.hpp"
#include "core/input_file.hpp"
#include "ingest/json_pull.hpp"

namespace cs::api {
namespace {

using Json = nlohmann::json;

// A read-only stream buffer over a file, inflating gzip (detected by its magic bytes) on the way,
// that knows how many bytes of JSON it has handed out, so that errors can say where they are. The
// pull parser takes its chunks directly (next_chunk); nlohmann reads it as a std::istream.
class TraceStreamBuf : public std::streambuf, public JsonChunkSource {
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
    // JSON bytes consumed so far through the stream.
    std::int64_t offset() const { return delivered_ - (egptr() - gptr()); }

    // The pull parser that reads this buffer's chunks (next_chunk), if one does.
    void follow(const JsonPullParser* parser) { parser_ = parser; }

    // The next chunk of JSON (empty at the end), its bounds checked.
    std::string_view next_chunk() override {
        const std::size_t n = gzip_ ? inflate_more() : read_plain();
        if (n == 0) return {};
        if (delivered_ + static_cast<std::int64_t>(n) > kMaxTraceJsonBytes)
            throw ConfigError(SourceLocation{display_},
                              "holds more than the " + size_text(kMaxTraceJsonBytes) +
                                  " of JSON a trace may hold" + (gzip_ ? " after inflating" : "") +
                                  "; profile fewer steps (torch.profiler's schedule) or trim it");
        if (!parser_ ||
            delivered_ + static_cast<std::int64_t>(n) - parser_->token_start() > kMaxTraceToken) {
            if (parser_) resume_tokens(*parser_);
            scan_tokens(n);
        }
        delivered_ += static_cast<std::int64_t>(n);
        check_ratio();
        return {out_.data(), n};
    }

  protected:
    int_type underflow() override {
        if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
        const std::string_view chunk = next_chunk();
        if (chunk.empty()) return traits_type::eof();
        setg(out_.data(), out_.data(), out_.data() + chunk.size());
        return traits_type::to_int_type(*gptr());
    }

  private:
    // A pull parser has read every byte before this chunk (as far as they are JSON: it stops at
    // the first error, and nlohmann then reads the text again through scan_tokens), so it knows
    // where the last string or number began, and no byte of the chunk can pass the limit unless
    // that was nearly kMaxTraceToken bytes ago: only then are the chunk's bytes scanned, from the
    // state the parser is in, the same state scan_tokens would have reached.
    void resume_tokens(const JsonPullParser& parser) {
        using Inside = JsonPullParser::Inside;
        token_ = delivered_ - parser.token_start();
        in_string_ = parser.inside() == Inside::String || parser.inside() == Inside::Escape;
        escape_ = parser.inside() == Inside::Escape;
        in_number_ = parser.inside() == Inside::Number;
    }

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
    const JsonPullParser* parser_ = nullptr;
};

// A JSON number as a whole number, when it is one within int64 (a float like 3.0 too); JSON
// floats beyond int64 must not be cast (undefined behaviour).
std::optional<std::int64_t> whole(double v) {
    if (!(v >= -9.2e18 && v <= 9.2e18) || v != std::floor(v)) return std::nullopt;
    return static_cast<std::int64_t>(v);
}

// The keys the reader looks at, named once when read instead of compared at every value.
enum class Key : std::uint8_t {
    Other,
    TraceEvents,
    Ph,
    Cat,
    Name,
    Ts,
    Dur,
    Tid,
    Args,
    InputDims,
    InputType,
    ExternalId,
    Correlation,
    Stream,
    Device,
};

constexpr std::array<std::string_view, 15> kKeyNames = {
    "",     "traceEvents", "ph",         "cat",         "name",        "ts",     "dur",   "tid",
    "args", "Input Dims",  "Input type", "External id", "correlation", "stream", "device"};

// Equal short texts, compared byte by byte: cheaper than a call to memcmp for a few bytes.
bool same_text(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) return false;
    return true;
}

Key key_of(std::string_view text) {
    // The names of the key's length only (at most three of them), as every key is looked up.
    const auto either = [&](std::initializer_list<Key> keys) {
        for (const Key k : keys)
            if (same_text(text, kKeyNames[static_cast<std::size_t>(k)])) return k;
        return Key::Other;
    };
    switch (text.size()) {
        case 2:
            return either({Key::Ph, Key::Ts});
        case 3:
            return either({Key::Cat, Key::Dur, Key::Tid});
        case 4:
            return either({Key::Name, Key::Args});
        case 6:
            return either({Key::Stream, Key::Device});
        case 10:
            return either({Key::InputDims, Key::InputType});
        case 11:
            return either({Key::TraceEvents, Key::ExternalId, Key::Correlation});
        default:
            return Key::Other;
    }
}

// The categories of events the reader keeps ("cat"), the others Other.
enum class Category : std::uint8_t { Other, Kernel, Memset, Memcpy, CpuOp, Runtime, Annotation };

Category category_of(std::string_view cat) {
    if (same_text(cat, "kernel")) return Category::Kernel;
    if (same_text(cat, "gpu_memset")) return Category::Memset;
    if (same_text(cat, "gpu_memcpy")) return Category::Memcpy;
    if (same_text(cat, "cpu_op")) return Category::CpuOp;
    if (same_text(cat, "cuda_runtime") || same_text(cat, "cuda_driver")) return Category::Runtime;
    if (same_text(cat, "user_annotation")) return Category::Annotation;
    return Category::Other;
}

// Keeps the few fields of the events clustersim reads, skips the rest: the receiver of the JSON
// events of either parser (the pull parser's, or nlohmann's SAX events through NlohmannEvents).
class Handler {
  public:
    Handler(TorchTrace& out, std::int64_t max_memory) : out_(out), max_memory_(max_memory) {}

    void other_scalar() { scalar(Value{}); }
    void integer(std::int64_t v) { scalar(Value{true, static_cast<double>(v), v, true, {}}); }
    void unsigned_integer(std::uint64_t v) {
        const bool fits = v <= static_cast<std::uint64_t>(INT64_MAX);
        scalar(
            Value{true, static_cast<double>(v), fits ? static_cast<std::int64_t>(v) : 0, fits, {}});
    }
    void real(double v) {
        const auto w = whole(v);
        scalar(Value{true, v, w.value_or(0), w.has_value(), {}});
    }
    void string(std::string_view v) { scalar(Value{false, 0, 0, false, v}); }

    // `offset`: the JSON bytes read up to and including the bracket.
    void start_object(std::int64_t offset) {
        const auto d = stack_.size();
        check_depth(offset);
        if (d == 0) root_object_ = true;
        if (in_events_array(d)) begin_event(offset);
        if (event_open_ && d == event_depth_ && key_ == Key::Args) in_args_ = true;
        stack_.push_back('o');
    }
    void end_object() {
        stack_.pop_back();
        const auto d = stack_.size();
        if (in_args_ && d == event_depth_)
            in_args_ = false;
        else if (event_open_ && d + 1 == event_depth_)
            end_event();
    }
    void start_array(std::int64_t offset) {
        const auto d = stack_.size();
        check_depth(offset);
        if (d == 0) {
            events_depth_ = 1;  // the JSON Array Format: the events themselves
            saw_events_ = true;
        } else if (d == 1 && root_object_ && key_ == Key::TraceEvents) {
            events_depth_ = 2;
            saw_events_ = true;
        } else if (in_args_ && d == event_depth_ + 1) {
            if (key_ == Key::InputDims) dims_open_ = true;
            if (key_ == Key::InputType) types_open_ = true;
        } else if (dims_open_ && d == event_depth_ + 2) {
            ev_.args.emplace_back();
            ev_.has_shapes = true;
        } else if (dims_open_ && d == event_depth_ + 3) {
            auto& a = ev_.args.back();
            a.list = true;
            a.shapes.emplace_back();
        }
        stack_.push_back('a');
    }
    void end_array() {
        stack_.pop_back();
        const auto d = stack_.size();
        if (d == event_depth_ + 1) dims_open_ = types_open_ = false;
        if (d + 1 == events_depth_) events_depth_ = 0;
    }
    void key(std::string_view k) { key_ = key_of(k); }
    [[noreturn]] void parse_error(std::size_t position, const std::string& last_token,
                                  const nlohmann::detail::exception& ex) const {
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
        std::string_view text;
    };

    void check_depth(std::int64_t offset) const {
        if (stack_.size() < kMaxTraceDepth) return;
        throw ConfigError(
            SourceLocation{out_.source},
            "byte " + std::to_string(offset) + (out_.gzip ? " (of the inflated JSON)" : "") +
                ": arrays and objects nested more than " + std::to_string(kMaxTraceDepth) +
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

    void begin_event(std::int64_t offset) {
        event_open_ = true;
        event_depth_ = stack_.size() + 1;
        ev_ = Event{};
        bad_number_.clear();
        ev_.index = out_.events;
        ev_.offset = offset;
    }

    void scalar(const Value& v) {
        const auto d = stack_.size();
        if (!event_open_) return;
        if (d == event_depth_) {
            if (key_ == Key::Ph)
                ev_.complete = v.text == "X";
            else if (key_ == Key::Cat)
                ev_.cat = v.text;
            else if (key_ == Key::Name)
                ev_.name = v.text;
            else if (key_ == Key::Ts && v.number)
                ev_.ts = v.real, ev_.has_ts = true;
            else if (key_ == Key::Dur && v.number)
                ev_.dur = v.real, ev_.has_dur = true;
            else if (key_ == Key::Tid && v.number && v.integral)
                ev_.tid = v.integer;
        } else if (in_args_ && d == event_depth_ + 1) {
            if (!v.number) return;
            const bool id = key_ == Key::ExternalId || key_ == Key::Correlation ||
                            key_ == Key::Stream || key_ == Key::Device;
            if (!v.integral) {
                if (id)
                    bad_number_ = "args \"" +
                                  std::string(kKeyNames[static_cast<std::size_t>(key_)]) +
                                  "\" is not a whole number within int64";
                return;
            }
            if (key_ == Key::ExternalId)
                ev_.external_id = v.integer;
            else if (key_ == Key::Correlation)
                ev_.correlation = v.integer;
            else if (key_ == Key::Stream)
                ev_.stream = v.integer;
            else if (key_ == Key::Device)
                ev_.device = v.integer;
        } else if (types_open_ && d == event_depth_ + 2) {
            ev_.types.emplace_back(v.text);
        } else if (dims_open_ && d == event_depth_ + 3 && v.number) {
            auto& a = ev_.args.back();
            if (a.shapes.empty()) a.shapes.emplace_back();
            a.shapes.back().push_back(dimension(v));
        } else if (dims_open_ && d == event_depth_ + 4 && v.number) {
            ev_.args.back().shapes.back().push_back(dimension(v));
        }
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
        const Category category = category_of(ev_.cat);
        const bool gpu = category == Category::Kernel || category == Category::Memset ||
                         category == Category::Memcpy;
        const bool cpu = category == Category::CpuOp;
        const bool runtime = category == Category::Runtime;
        if (category == Category::Other || !ev_.complete) return;
        if (!ev_.has_ts) fail_event("no numeric \"ts\" (start, microseconds)");
        if (!ev_.has_dur) fail_event("no numeric \"dur\" (duration, microseconds)");
        if (ev_.dur < 0) fail_event("negative \"dur\"");
        // PyTorch's profiler times events to the nanosecond: a shorter non-zero duration is not
        // one it wrote (and would give relative residuals of hundreds of digits).
        if (ev_.dur > 0 && ev_.dur < 1e-3)
            fail_event(
                "\"dur\" below a nanosecond (0.001 microseconds), the profiler's "
                "resolution; expected 0 or at least 0.001");
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
            g.cat = category == Category::Kernel   ? TraceGpuEvent::Cat::Kernel
                    : category == Category::Memset ? TraceGpuEvent::Cat::Memset
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
        std::string cat, name;
        bool complete = false;  // "ph": "X"
        double ts = 0, dur = 0;
        bool has_ts = false, has_dur = false, has_shapes = false;
        std::int64_t tid = -1, external_id = -1, correlation = -1, stream = -1, device = 0;
        std::int64_t index = 0, offset = 0;
        std::vector<TraceArg> args;
        std::vector<std::string> types;
    };

    TorchTrace& out_;
    std::int64_t max_memory_;
    std::int64_t held_ = 0;
    std::string bad_number_;  // the first out-of-range number of the open event
    std::vector<char> stack_;
    Key key_ = Key::Other;
    bool root_object_ = false, saw_events_ = false;
    std::size_t events_depth_ = 0, event_depth_ = 0;
    bool event_open_ = false, in_args_ = false, dims_open_ = false, types_open_ = false;
    Event ev_;
};

// nlohmann's SAX events passed on to a Handler; its parse_error gives the message users see.
class NlohmannEvents final : public nlohmann::json_sax<Json> {
  public:
    NlohmannEvents(Handler& handler, const TraceStreamBuf& buf) : h_(handler), buf_(buf) {}

    bool null() override { return h_.other_scalar(), true; }
    bool boolean(bool) override { return h_.other_scalar(), true; }
    bool number_integer(number_integer_t v) override { return h_.integer(v), true; }
    bool number_unsigned(number_unsigned_t v) override { return h_.unsigned_integer(v), true; }
    bool number_float(number_float_t v, const string_t&) override { return h_.real(v), true; }
    bool string(string_t& v) override { return h_.string(v), true; }
    bool binary(binary_t&) override { return h_.other_scalar(), true; }
    bool start_object(std::size_t) override { return h_.start_object(buf_.offset()), true; }
    bool end_object() override { return h_.end_object(), true; }
    bool start_array(std::size_t) override { return h_.start_array(buf_.offset()), true; }
    bool end_array() override { return h_.end_array(), true; }
    bool key(string_t& k) override { return h_.key(k), true; }
    bool parse_error(std::size_t position, const std::string& last_token,
                     const nlohmann::detail::exception& ex) override {
        h_.parse_error(position, last_token, ex);
    }

  private:
    Handler& h_;
    const TraceStreamBuf& buf_;
};

// Reads the events with the pull parser; false when the text is not JSON as nlohmann reads it.
bool pull_events(TraceStreamBuf& buf, Handler& h, TorchTrace& out) {
    JsonPullParser p(buf);
    buf.follow(&p);
    for (;;) {
        switch (p.next()) {
            case JsonEvent::StartObject:
                h.start_object(p.consumed());
                break;
            case JsonEvent::EndObject:
                h.end_object();
                break;
            case JsonEvent::StartArray:
                h.start_array(p.consumed());
                break;
            case JsonEvent::EndArray:
                h.end_array();
                break;
            case JsonEvent::Key:
                h.key(p.text());
                break;
            case JsonEvent::String:
                h.string(p.text());
                break;
            case JsonEvent::Integer:
                h.integer(p.integer());
                break;
            case JsonEvent::Unsigned:
                h.unsigned_integer(p.unsigned_integer());
                break;
            case JsonEvent::Float:
                h.real(p.real());
                break;
            case JsonEvent::Boolean:
            case JsonEvent::Null:
                h.other_scalar();
                break;
            case JsonEvent::End:
                out.bytes = p.consumed();
                return true;
            case JsonEvent::Error:
                return false;
        }
    }
}

// What a whole trace must hold, checked after its last event.
void check_complete(const Handler& handler, const TorchTrace& out) {
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

// Reads a trace from the stream `open` gives, with the pull parser. A text it refuses is read
// again from its start by nlohmann's parser (a second stream from `open`), so that the message,
// with nlohmann's line, column and last token, is the one this reader has always given; the
// limits of TraceStreamBuf and Handler meet the same bytes in the same order both times.
TorchTrace read_trace(const std::string& source,
                      const std::function<std::unique_ptr<std::istream>()>& open,
                      std::int64_t max_memory) {
    {
        TorchTrace out;
        out.source = source;
        const auto in = open();
        TraceStreamBuf buf(*in, source);
        out.gzip = buf.gzip();
        Handler handler(out, max_memory);
        if (pull_events(buf, handler, out)) {
            check_complete(handler, out);
            return out;
        }
    }
    TorchTrace out;
    out.source = source;
    const auto in = open();
    TraceStreamBuf buf(*in, source);
    out.gzip = buf.gzip();
    Handler handler(out, max_memory);
    NlohmannEvents events(handler, buf);
    std::istream text(&buf);
    // strict: anything after the trace's closing bracket is an error too.
    Json::sax_parse(text, &events, nlohmann::json::input_format_t::json, true);
    out.bytes = buf.offset();
    check_complete(handler, out);
    return out;
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
    const auto open = [&]() -> std::unique_ptr<std::istream> {
        auto file = std::make_unique<std::ifstream>(path, std::ios::binary);
        if (!*file)
            throw ConfigError(where,
                              std::string("cannot open the trace file: ") + std::strerror(errno));
        return file;
    };
    return read_trace(out.source, open, max_memory);
}

TorchTrace parse_torch_trace(std::string_view json, const std::string& display,
                             std::int64_t max_memory) {
    const auto open = [&]() -> std::unique_ptr<std::istream> {
        return std::make_unique<std::istringstream>(std::string(json));
    };
    return read_trace(display, open, max_memory);
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

#include "ingest/json_pull.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace cs::api {
namespace {

bool blank(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool digit(int c) {
    return c >= '0' && c <= '9';
}

// A byte that stands for itself inside a string: printable ASCII but the quote and the backslash.
constexpr std::array<bool, 256> kPlain = [] {
    std::array<bool, 256> plain{};
    for (int c = 0x20; c < 0x80; ++c)
        plain[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
    return plain;
}();

bool plain(unsigned char c) {
    return kPlain[c];
}

void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
        out += static_cast<char>(code);
    } else if (code < 0x800) {
        out += static_cast<char>(0xC0 | (code >> 6));
        out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
        out += static_cast<char>(0xE0 | (code >> 12));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (code >> 18));
        out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code & 0x3F));
    }
}

}  // namespace

bool JsonPullParser::refill() {
    if (eof_) return false;
    if (number_start_) number_.append(number_start_, end_);
    base_ += end_ - begin_;
    const std::string_view chunk = source_.next_chunk();
    if (chunk.empty()) {
        eof_ = true;
        begin_ = pos_ = end_;
        if (number_start_) number_start_ = end_;
        return false;
    }
    begin_ = pos_ = chunk.data();
    end_ = chunk.data() + chunk.size();
    if (number_start_) number_start_ = begin_;
    return true;
}

int JsonPullParser::skip_blanks() {
    for (;;) {
        while (pos_ < end_ && blank(static_cast<unsigned char>(*pos_)))
            ++pos_;
        if (pos_ < end_) return static_cast<unsigned char>(*pos_);
        if (!refill()) return kEof;
    }
}

JsonEvent JsonPullParser::fail(std::string_view what) {
    state_ = State::Failed;
    error_ = "byte " + std::to_string(consumed()) + ": " + std::string(what);
    return JsonEvent::Error;
}

// The states outside the grammar: the start (a byte order mark), the end, an error.
std::optional<JsonEvent> JsonPullParser::outside() {
    if (state_ == State::Ended) return JsonEvent::End;
    if (state_ == State::Failed) return JsonEvent::Error;
    // nlohmann skips a UTF-8 byte order mark at the very start, and nowhere else.
    state_ = State::Value;
    if (peek() == 0xEF) {
        ++pos_;
        if (get() != 0xBB || get() != 0xBF) return fail("a byte order mark other than EF BB BF");
    }
    return std::nullopt;
}

JsonEvent JsonPullParser::next() {
    if (state_ >= State::Start) {
        if (const auto e = outside()) return *e;
    }
    for (;;) {
        int c = pos_ < end_ ? static_cast<unsigned char>(*pos_) : kEof;
        if (c <= ' ') c = skip_blanks();
        switch (state_) {
            case State::Value:
                return value(c);
            case State::ValueOrEnd:
                if (c == ']') return close();
                return value(c);
            case State::KeyOrEnd:
                if (c == '}') return close();
                [[fallthrough]];
            case State::Key:
                if (c != '"') return fail("expected a key (a string)");
                ++pos_;
                if (!string()) return JsonEvent::Error;
                // The colon at once when it follows in this chunk (its byte is read before the
                // key's event instead of after, which no limit can tell apart).
                if (pos_ < end_ && *pos_ == ':') {
                    ++pos_;
                    state_ = State::Value;
                } else {
                    state_ = State::Colon;
                }
                return JsonEvent::Key;
            case State::Colon:
                if (c != ':') return fail("expected ':' after a key");
                ++pos_;
                state_ = State::Value;
                continue;
            case State::CommaOrEnd: {
                const bool object = stack_.back() == 'o';
                if (c == ',') {
                    ++pos_;
                    state_ = object ? State::Key : State::Value;
                    continue;
                }
                if (c == (object ? '}' : ']')) return close();
                return fail(object ? "expected ',' or '}'" : "expected ',' or ']'");
            }
            case State::Done:
                // The lexer reads a NUL byte where a token starts as the end of the text.
                if (c == 0) ++pos_;
                if (c == 0 || c == kEof) {
                    state_ = State::Ended;
                    return JsonEvent::End;
                }
                return fail("text after the top-level value");
            case State::Start:
            case State::Ended:
            case State::Failed:
                return fail("internal state");
        }
    }
}

JsonEvent JsonPullParser::close() {
    ++pos_;
    const bool object = stack_.back() == 'o';
    stack_.pop_back();
    state_ = stack_.empty() ? State::Done : State::CommaOrEnd;
    return object ? JsonEvent::EndObject : JsonEvent::EndArray;
}

JsonEvent JsonPullParser::after_value(JsonEvent e) {
    state_ = stack_.empty() ? State::Done : State::CommaOrEnd;
    return e;
}

JsonEvent JsonPullParser::value(int c) {
    switch (c) {
        case '{':
            ++pos_;
            stack_.push_back('o');
            state_ = State::KeyOrEnd;
            return JsonEvent::StartObject;
        case '[':
            ++pos_;
            stack_.push_back('a');
            state_ = State::ValueOrEnd;
            return JsonEvent::StartArray;
        case '"':
            ++pos_;
            if (!string()) return JsonEvent::Error;
            return after_value(JsonEvent::String);
        case 't':
            if (!literal("true")) return fail("invalid literal");
            boolean_ = true;
            return after_value(JsonEvent::Boolean);
        case 'f':
            if (!literal("false")) return fail("invalid literal");
            boolean_ = false;
            return after_value(JsonEvent::Boolean);
        case 'n':
            if (!literal("null")) return fail("invalid literal");
            return after_value(JsonEvent::Null);
        default:
            if (c == '-' || digit(c)) return number();
            return fail(c == kEof || c == 0 ? "the text ends where a value should be"
                                            : "expected a value");
    }
}

bool JsonPullParser::literal(std::string_view word) {
    if (end_ - pos_ >= static_cast<std::ptrdiff_t>(word.size()) &&
        std::memcmp(pos_, word.data(), word.size()) == 0) {
        pos_ += word.size();
        return true;
    }
    // Byte by byte across chunks, consuming up to the first that differs, as the lexer does.
    for (const char w : word)
        if (get() != static_cast<unsigned char>(w)) return false;
    return true;
}

// After the opening quote: the text up to the closing one, unescaped, in text_.
bool JsonPullParser::string() {
    token_start_ = consumed() - 1;
    const char* run = pos_;
    while (run < end_ && plain(static_cast<unsigned char>(*run)))
        ++run;
    if (run < end_ && *run == '"') {  // the common case: no escapes, within one chunk
        text_ = std::string_view(pos_, static_cast<std::size_t>(run - pos_));
        pos_ = run + 1;
        return true;
    }
    inside_ = Inside::String;
    string_.clear();
    for (;;) {
        string_.append(pos_, run);
        pos_ = run;
        const int c = get();
        if (c == kEof) {
            fail("the text ends inside a string");
            return false;
        }
        if (c == '"') break;
        if (c == '\\') {
            if (!escape()) return false;
        } else if (c < 0x20) {
            fail("a control character in a string (it must be escaped)");
            return false;
        } else if (c >= 0x80) {
            if (!utf8(static_cast<unsigned char>(c))) return false;
        } else {
            string_ += static_cast<char>(c);
        }
        run = pos_;
        while (run < end_ && plain(static_cast<unsigned char>(*run)))
            ++run;
    }
    text_ = string_;
    inside_ = Inside::Between;
    return true;
}

int JsonPullParser::hex4() {
    int code = 0;
    for (int i = 0; i < 4; ++i) {
        const int c = get();
        int v = -1;
        if (c >= '0' && c <= '9') v = c - '0';
        if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        if (v < 0) return -1;
        code = code * 16 + v;
    }
    return code;
}

// After a backslash: the escaped character appended to string_.
bool JsonPullParser::escape() {
    inside_ = Inside::Escape;
    const int c = get();
    inside_ = Inside::String;
    switch (c) {
        case '"':
        case '\\':
        case '/':
            string_ += static_cast<char>(c);
            return true;
        case 'b':
            string_ += '\b';
            return true;
        case 'f':
            string_ += '\f';
            return true;
        case 'n':
            string_ += '\n';
            return true;
        case 'r':
            string_ += '\r';
            return true;
        case 't':
            string_ += '\t';
            return true;
        case 'u':
            break;
        default:
            fail("a character after a backslash that no escape starts with");
            return false;
    }
    int code = hex4();
    if (code < 0) {
        fail("\\u not followed by 4 hex digits");
        return false;
    }
    if (code >= 0xDC00 && code <= 0xDFFF) {
        fail("a low surrogate \\u escape without a high one before it");
        return false;
    }
    if (code >= 0xD800 && code <= 0xDBFF) {
        if (get() != '\\') {
            fail("a high surrogate \\u escape without a low one after it");
            return false;
        }
        inside_ = Inside::Escape;
        const bool u = get() == 'u';
        inside_ = Inside::String;
        if (!u) {
            fail("a high surrogate \\u escape without a low one after it");
            return false;
        }
        const int low = hex4();
        if (low < 0) {
            fail("\\u not followed by 4 hex digits");
            return false;
        }
        if (low < 0xDC00 || low > 0xDFFF) {
            fail("a high surrogate \\u escape without a low one after it");
            return false;
        }
        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(string_, static_cast<unsigned>(code));
    return true;
}

// A byte from 0x80 on and the rest of its UTF-8 sequence, appended to string_ when well formed
// (the ranges of RFC 3629's table, as nlohmann's lexer checks them).
bool JsonPullParser::utf8(unsigned char lead) {
    int lo = 0x80, hi = 0xBF, more = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
        more = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        more = 2;
        if (lead == 0xE0) lo = 0xA0;
        if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        more = 3;
        if (lead == 0xF0) lo = 0x90;
        if (lead == 0xF4) hi = 0x8F;
    } else {
        fail("an ill-formed UTF-8 byte in a string");
        return false;
    }
    string_ += static_cast<char>(lead);
    for (int i = 0; i < more; ++i) {
        const int c = get();
        if (c < lo || c > hi) {
            fail("an ill-formed UTF-8 byte in a string");
            return false;
        }
        string_ += static_cast<char>(c);
        lo = 0x80, hi = 0xBF;
    }
    return true;
}

// The bytes of a number as JSON's grammar has them: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// The byte after it is looked at, not consumed. `whole`: without a fraction or an exponent.
bool JsonPullParser::number_text(bool& whole) {
    whole = true;
    int c = peek();
    if (c == '-') {
        ++pos_;
        c = peek();
    }
    if (c == '0') {
        ++pos_;
    } else if (digit(c)) {
        while (digit(peek()))
            ++pos_;
    } else {
        return false;
    }
    if (peek() == '.') {
        whole = false;
        ++pos_;
        if (!digit(peek())) return false;
        while (digit(peek()))
            ++pos_;
    }
    c = peek();
    if (c == 'e' || c == 'E') {
        whole = false;
        ++pos_;
        c = peek();
        if (c == '+' || c == '-') ++pos_;
        if (!digit(peek())) return false;
        while (digit(peek()))
            ++pos_;
    }
    return true;
}

JsonEvent JsonPullParser::number() {
    token_start_ = consumed();
    // The common case first: up to 19 digits (below 2^64) without sign, fraction or exponent,
    // followed within this chunk by the byte that ends them; "0" only alone (JSON has no "01").
    const char* p = pos_;
    std::uint64_t v = 0;
    while (p < end_ && p - pos_ < 19 && digit(static_cast<unsigned char>(*p)))
        v = v * 10 + static_cast<std::uint64_t>(*p++ - '0');
    if (p < end_ && p > pos_ && (*pos_ != '0' || p - pos_ == 1)) {
        const int after = static_cast<unsigned char>(*p);
        if (!digit(after) && after != '.' && after != 'e' && after != 'E') {
            pos_ = p;
            unsigned_ = v;
            return after_value(JsonEvent::Unsigned);
        }
    }
    number_.clear();
    number_start_ = pos_;
    inside_ = Inside::Number;
    bool whole = true;
    const bool ok = number_text(whole);
    inside_ = Inside::Between;
    std::string_view token;
    if (number_.empty()) {
        token = std::string_view(number_start_, static_cast<std::size_t>(pos_ - number_start_));
    } else {
        number_.append(number_start_, pos_);
        token = number_;
    }
    number_start_ = nullptr;
    if (!ok) return fail("a number not as JSON writes one");
    return after_value(convert_number(token, token.front() == '-', whole));
}

// The number's value as nlohmann's lexer converts it: strtoull / strtoll for whole numbers when
// they fit, else strtod (from_chars rounds the same, correctly; strtod decides what it refuses).
JsonEvent JsonPullParser::convert_number(std::string_view token, bool negative, bool whole) {
    if (whole) {
        if (!negative) {
            std::uint64_t v = 0;
            const auto r = std::from_chars(token.data(), token.data() + token.size(), v);
            if (r.ec == std::errc{}) {
                unsigned_ = v;
                return JsonEvent::Unsigned;
            }
        } else {
            std::int64_t v = 0;
            const auto r = std::from_chars(token.data(), token.data() + token.size(), v);
            if (r.ec == std::errc{}) {
                integer_ = v;
                return JsonEvent::Integer;
            }
        }
    }
    double v = 0;
    const auto r = std::from_chars(token.data(), token.data() + token.size(), v);
    if (r.ec != std::errc{}) {
        const std::string copy(token);
        v = std::strtod(copy.c_str(), nullptr);
    }
    if (!std::isfinite(v)) return fail("a number beyond a double's range");
    real_ = v;
    return JsonEvent::Float;
}

}  // namespace cs::api

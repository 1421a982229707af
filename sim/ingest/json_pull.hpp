// A strict JSON reader over text that arrives in chunks, handing out one event at a time (a pull
// parser), for the PyTorch trace reader (torch_trace.cpp), whose traces run to GBs: it is several
// times faster than nlohmann::json's SAX parser over a std::istream (docs/performance.md, "Torch
// trace reader"), and copies a string only when it has escapes or spans two chunks.
//
// It accepts exactly what nlohmann::json 3.11's parser accepts in strict mode and reports the same
// values: RFC 8259 with UTF-8 checked inside strings, plus a UTF-8 byte order mark as the first
// three bytes and a NUL byte where the token after the top-level value would start, read as the
// end of the text (nothing after it is read). Integers without a fraction or exponent are
// Unsigned (no sign) or Integer (a minus sign) when they fit 64 bits, Float otherwise; a Float that
// overflows a double is an error. Its own error messages are for tests: the trace reader reads an
// erroneous text again with nlohmann, whose message (line, column, the last token) users see.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cs::api {

// Where the text comes from: each call returns the next chunk, and an empty one at the end (it is
// not called again after that). A chunk stays valid until the next call.
class JsonChunkSource {
  public:
    virtual ~JsonChunkSource() = default;
    virtual std::string_view next_chunk() = 0;
};

enum class JsonEvent : std::uint8_t {
    StartObject,
    EndObject,
    StartArray,
    EndArray,
    Key,       // text()
    String,    // text()
    Integer,   // integer(): a negative whole number within int64
    Unsigned,  // unsigned_integer(): a whole number without a sign within uint64
    Float,     // real(): any other number
    Boolean,   // boolean()
    Null,
    End,    // the top-level value and what follows it were read
    Error,  // error()
};

class JsonPullParser {
  public:
    explicit JsonPullParser(JsonChunkSource& source) : source_(source) {}

    // The next event. After End or Error, the same again without reading further.
    JsonEvent next();

    // The unescaped text of a Key or String; valid until the next call of next().
    std::string_view text() const { return text_; }
    std::int64_t integer() const { return integer_; }
    std::uint64_t unsigned_integer() const { return unsigned_; }
    double real() const { return real_; }
    bool boolean() const { return boolean_; }
    // After Error: "byte N: what was wrong", N counting from 0.
    const std::string& error() const { return error_; }
    // Bytes of text consumed: after a start event, up to and including its bracket, as far as
    // nlohmann's lexer has read at the same event.
    std::int64_t consumed() const { return base_ + (pos_ - begin_); }

    // Where the last string (its opening quote) or number began, 0 before any, and whether the
    // parser is inside one (Escape: just after a backslash in a string) while it asks for the
    // next chunk: how TraceStreamBuf bounds the bytes since a token began without scanning them.
    enum class Inside : std::uint8_t { Between, String, Escape, Number };
    std::int64_t token_start() const { return token_start_; }
    Inside inside() const { return inside_; }

  private:
    enum class State : std::uint8_t {
        Value,
        ValueOrEnd,
        KeyOrEnd,
        Key,
        Colon,
        CommaOrEnd,
        Done,
        Start,  // from here on: outside()
        Ended,
        Failed,
    };
    static constexpr int kEof = -1;

    bool refill();
    std::optional<JsonEvent> outside();
    // The next byte without consuming it (kEof at the end).
    int peek() {
        if (pos_ == end_ && !refill()) return kEof;
        return static_cast<unsigned char>(*pos_);
    }
    int get() {
        const int c = peek();
        if (c != kEof) ++pos_;
        return c;
    }
    int skip_blanks();
    JsonEvent value(int c);
    JsonEvent close();
    JsonEvent after_value(JsonEvent e);
    JsonEvent fail(std::string_view what);
    bool literal(std::string_view word);
    bool string();
    bool escape();
    bool utf8(unsigned char lead);
    int hex4();
    JsonEvent number();
    bool number_text(bool& whole);
    JsonEvent convert_number(std::string_view token, bool negative, bool whole);

    JsonChunkSource& source_;
    const char* begin_ = nullptr;
    const char* pos_ = nullptr;
    const char* end_ = nullptr;
    std::int64_t base_ = 0;  // bytes of the chunks before the current one
    bool eof_ = false;
    State state_ = State::Start;
    std::vector<char> stack_;  // 'o' or 'a' for each open object or array
    std::string_view text_;
    std::string string_;  // a string's text when it is copied
    // A number spanning chunks: its bytes so far. number_start_ marks where it began in the
    // current chunk while one is read.
    std::string number_;
    const char* number_start_ = nullptr;
    std::int64_t integer_ = 0;
    std::uint64_t unsigned_ = 0;
    double real_ = 0;
    bool boolean_ = false;
    std::string error_;
    std::int64_t token_start_ = 0;
    Inside inside_ = Inside::Between;
};

}  // namespace cs::api

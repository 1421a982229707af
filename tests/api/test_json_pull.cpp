// The streaming JSON reader of torch traces (ingest/json_pull.hpp): its events and errors, and,
// over many valid and broken texts cut into chunks of every small size, the same verdict and the
// same events as nlohmann::json's SAX parser, whose language it must accept exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ingest/json_pull.hpp"

namespace {

using cs::api::JsonEvent;
using cs::api::JsonPullParser;

// Hands out a text in chunks of `size` bytes.
class Chunks : public cs::api::JsonChunkSource {
  public:
    Chunks(std::string_view text, std::size_t size) : text_(text), size_(size) {}
    std::string_view next_chunk() override {
        const auto chunk = text_.substr(at_, size_);
        at_ += chunk.size();
        return chunk;
    }

  private:
    std::string_view text_;
    std::size_t size_, at_ = 0;
};

std::string number_text(double v) {
    char out[40];
    std::snprintf(out, sizeof out, "%.17g", v);
    return out;
}

// The events of a text as one line ("{ k:a [ u:1 i:-2 f:3.5 s:x b n ] }"), or "error: ..."
// after those read before the error.
std::string pull(std::string_view text, std::size_t chunk = 1 << 16) {
    Chunks source(text, chunk);
    JsonPullParser p(source);
    std::string out;
    for (;;) {
        switch (p.next()) {
            case JsonEvent::StartObject:
                out += "{ ";
                break;
            case JsonEvent::EndObject:
                out += "} ";
                break;
            case JsonEvent::StartArray:
                out += "[ ";
                break;
            case JsonEvent::EndArray:
                out += "] ";
                break;
            case JsonEvent::Key:
                out += "k:" + std::string(p.text()) + " ";
                break;
            case JsonEvent::String:
                out += "s:" + std::string(p.text()) + " ";
                break;
            case JsonEvent::Integer:
                out += "i:" + std::to_string(p.integer()) + " ";
                break;
            case JsonEvent::Unsigned:
                out += "u:" + std::to_string(p.unsigned_integer()) + " ";
                break;
            case JsonEvent::Float:
                out += "f:" + number_text(p.real()) + " ";
                break;
            case JsonEvent::Boolean:
                out += p.boolean() ? "true " : "false ";
                break;
            case JsonEvent::Null:
                out += "n ";
                break;
            case JsonEvent::End:
                return out;
            case JsonEvent::Error:
                return out + "error: " + p.error();
        }
    }
}

// The same line from nlohmann's SAX parser (strict, as the trace reader calls it), "error" for
// any text it refuses.
class Recorder : public nlohmann::json_sax<nlohmann::json> {
  public:
    std::string out;
    bool null() override { return out += "n ", true; }
    bool boolean(bool v) override { return out += v ? "true " : "false ", true; }
    bool number_integer(number_integer_t v) override {
        return out += "i:" + std::to_string(v) + " ", true;
    }
    bool number_unsigned(number_unsigned_t v) override {
        return out += "u:" + std::to_string(v) + " ", true;
    }
    bool number_float(number_float_t v, const string_t&) override {
        return out += "f:" + number_text(v) + " ", true;
    }
    bool string(string_t& v) override { return out += "s:" + v + " ", true; }
    bool binary(binary_t&) override { return false; }
    bool start_object(std::size_t) override { return out += "{ ", true; }
    bool end_object() override { return out += "} ", true; }
    bool start_array(std::size_t) override { return out += "[ ", true; }
    bool end_array() override { return out += "] ", true; }
    bool key(string_t& k) override { return out += "k:" + k + " ", true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
        failed = true;
        return false;
    }
    bool failed = false;
};

std::string sax(const std::string& text) {
    Recorder r;
    std::istringstream in(text);
    nlohmann::json::sax_parse(in, &r, nlohmann::json::input_format_t::json, true);
    return r.failed ? "error" : r.out;
}

// Both parsers agree on `text`: the same events when nlohmann accepts it, an error from both
// when it refuses it, whatever the chunks.
void agree(const std::string& text) {
    const std::string expected = sax(text);
    for (const std::size_t chunk : {1, 2, 3, 5, 8, 1 << 16}) {
        const std::string got = pull(text, chunk);
        const bool refused = got.find("error: ") != std::string::npos;
        INFO("text: " << text << " chunk " << chunk << " pull: " << got);
        if (expected == "error")
            CHECK(refused);
        else
            CHECK(got == expected);
    }
}

// Valid texts whose broken forms (cut short, one byte replaced) the differential test tries.
const std::vector<std::string>& seeds() {
    static const std::vector<std::string> texts = {
        R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k<8, \"a\">", "ts": 1360.048,
          "dur": 335, "args": {"External id": 3, "Input Dims": [[8, 2048], []]}}], "x": null})",
        R"([true, false, null, -0, 0, -1.5e-3, 2E+2, 18446744073709551615, -9223372036854775808])",
        R"({"s": "\u00e9\ud83d\ude00\n\t\\\/\b\f\r\"", "u": "é€😀", "": {}})",
        "\xEF\xBB\xBF[1]",
        "  {\"a\" : [ ] , \"b\" :{ } }  ",
    };
    return texts;
}

}  // namespace

TEST_CASE("json_pull: the events of a valid text") {
    CHECK(pull(R"({"a": [1, -2, 3.5, true, null, "x"]})") ==
          "{ k:a [ u:1 i:-2 f:3.5 true n s:x ] } ");
    // Escapes unescaped: \u00e9 is é (C3 A9 in UTF-8), the pair D83D DE00 is U+1F600 (F0 9F 98 80).
    CHECK(pull(R"(["\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t"])") ==
          "[ s:\xC3\xA9\xF0\x9F\x98\x80\"\\/\b\f\n\r\t ] ");
    // Whole numbers beyond 64 bits are floats: 2^64 = 18446744073709551616, -2^63 - 1.
    CHECK(pull("[18446744073709551615, 18446744073709551616]") ==
          "[ u:18446744073709551615 f:1.8446744073709552e+19 ] ");
    CHECK(pull("[-9223372036854775808, -9223372036854775809]") ==
          "[ i:-9223372036854775808 f:-9.2233720368547758e+18 ] ");
    // A double's underflow is no error (strtod gives 0), its overflow is.
    CHECK(pull("[1e-400]") == "[ f:0 ] ");
    // A byte order mark at the start; a NUL where the next token would start ends the text.
    CHECK(pull("\xEF\xBB\xBF{}") == "{ } ");
    CHECK(pull(std::string("{}\0garbage", 10)) == "{ } ");
    // A string across chunks, and one with an escape, are copied whole.
    CHECK(pull(R"(["abcdefgh", "a\nb"])", 3) == "[ s:abcdefgh s:a\nb ] ");
    CHECK(pull("[12345678]", 2) == "[ u:12345678 ] ");
}

TEST_CASE("json_pull: errors name the byte where the text stops being JSON") {
    // "byte N": the bytes consumed when the error is found. Between tokens the offending byte is
    // looked at, not consumed, so N is its index from 0.
    CHECK(pull("") == "error: byte 0: the text ends where a value should be");
    // "[1," then the end: byte 3 is where the value should be.
    CHECK(pull("[1,") == "[ u:1 error: byte 3: the text ends where a value should be");
    CHECK(pull("[1,]") == "[ u:1 error: byte 3: expected a value");
    CHECK(pull("{\"a\" 1}") == "{ k:a error: byte 5: expected ':' after a key");
    CHECK(pull("{\"a\":1,}") == "{ k:a u:1 error: byte 7: expected a key (a string)");
    CHECK(pull("[1 2]") == "[ u:1 error: byte 3: expected ',' or ']'");
    CHECK(pull("{} x") == "{ } error: byte 3: text after the top-level value");
    // Literals: "tru" then the end, and "nul" then "x" (bytes up to the difference consumed).
    CHECK(pull("[tru") == "[ error: byte 4: invalid literal");
    CHECK(pull("[nulx]") == "[ error: byte 5: invalid literal");
    // Numbers: a leading zero ends the number, so "01" is 0 then an unexpected 1.
    CHECK(pull("[01]") == "[ u:0 error: byte 2: expected ',' or ']'");
    CHECK(pull("[-]") == "[ error: byte 2: a number not as JSON writes one");
    CHECK(pull("[1.]") == "[ error: byte 3: a number not as JSON writes one");
    CHECK(pull("[1e+]") == "[ error: byte 4: a number not as JSON writes one");
    CHECK(pull("[.5]") == "[ error: byte 1: expected a value");
    CHECK(pull("[1e400]") == "[ error: byte 6: a number beyond a double's range");
    // Inside strings each byte is consumed as it is read, so N is one past the offending byte:
    // the control byte at index 3, the x at 3, the G at 6.
    CHECK(pull("[\"a\x01\"]") ==
          "[ error: byte 4: a control character in a string (it must be escaped)");
    CHECK(pull(R"(["\x"])") ==
          "[ error: byte 4: a character after a backslash that no escape starts with");
    CHECK(pull(R"(["\u12G4"])") == "[ error: byte 7: \\u not followed by 4 hex digits");
    CHECK(pull(R"(["\udc00"])") ==
          "[ error: byte 8: a low surrogate \\u escape without a high one before it");
    CHECK(pull(R"(["\ud800x"])") ==
          "[ error: byte 9: a high surrogate \\u escape without a low one after it");
    CHECK(pull(R"(["\ud800\u0041"])") ==
          "[ error: byte 14: a high surrogate \\u escape without a low one after it");
    // UTF-8: a lone continuation byte, an overlong C0 80, a surrogate ED A0 80, F5 and beyond.
    CHECK(pull("[\"\x80\"]") == "[ error: byte 3: an ill-formed UTF-8 byte in a string");
    CHECK(pull("[\"\xC0\x80\"]") == "[ error: byte 3: an ill-formed UTF-8 byte in a string");
    CHECK(pull("[\"\xED\xA0\x80\"]") == "[ error: byte 4: an ill-formed UTF-8 byte in a string");
    CHECK(pull("[\"\xF5\x80\x80\x80\"]") ==
          "[ error: byte 3: an ill-formed UTF-8 byte in a string");
    CHECK(pull("[\"abc") == "[ error: byte 5: the text ends inside a string");
    // A byte order mark only at the very start, and whole.
    CHECK(pull(" \xEF\xBB\xBF{}") == "error: byte 1: expected a value");
    CHECK(pull("\xEF\xBB{}") == "error: byte 3: a byte order mark other than EF BB BF");
    // A NUL where a value should be is the end of the text, too early.
    CHECK(pull(std::string("[\0]", 3)) == "[ error: byte 1: the text ends where a value should be");
}

TEST_CASE("json_pull: the same verdict and events as nlohmann's parser") {
    for (const auto& text : seeds())
        agree(text);
    // Texts known to sit at the edges of the grammar.
    for (const std::string& text :
         std::vector<std::string>{"",
                                  " ",
                                  "[",
                                  "]",
                                  "{",
                                  "[1,]",
                                  "{,}",
                                  "[1 2]",
                                  "[01]",
                                  "[-01]",
                                  "[-]",
                                  "[1.]",
                                  "[.1]",
                                  "[1e]",
                                  "[1E-]",
                                  "[+1]",
                                  "[0x1]",
                                  "[1e400]",
                                  "[-1e400]",
                                  "[1e-400]",
                                  "[Infinity]",
                                  "[NaN]",
                                  "[tru]",
                                  "[truex]",
                                  "[nul]",
                                  "\"a\"",
                                  "5",
                                  "  5  ",
                                  "[\"\\u0000\"]",
                                  "[\"\\uD800\\uDC00\"]",
                                  "[\"\\uDBFF\\uDFFF\"]",
                                  "[\"\\uD800\"]",
                                  "[\"\\uDC00\"]",
                                  "[\"\\ud800\\n\"]",
                                  "[\"a\tb\"]",
                                  "[\"\x7F\"]",
                                  "[\"\xC2\x80\"]",
                                  "[\"\xDF\xBF\"]",
                                  "[\"\xE0\x9F\xBF\"]",
                                  "[\"\xE0\xA0\x80\"]",
                                  "[\"\xEF\xBF\xBF\"]",
                                  "[\"\xF0\x8F\xBF\xBF\"]",
                                  "[\"\xF0\x90\x80\x80\"]",
                                  "[\"\xF4\x8F\xBF\xBF\"]",
                                  "[\"\xF4\x90\x80\x80\"]",
                                  "[\"\xC1\xBF\"]",
                                  "\xEF\xBB\xBF",
                                  "\xEF\xBB\xBF 1",
                                  "\xEF\xBB\xBE[]",
                                  "[]\xEF\xBB\xBF",
                                  "{\"a\":1}/*c*/",
                                  "{\"a\":1}//",
                                  "[1]\n\r\t ",
                                  "[1]\f",
                                  "[\v1]",
                                  std::string("[1]\0", 4),
                                  std::string("[1] \0 x", 7),
                                  std::string("\0", 1),
                                  std::string("[1,\0]", 5),
                                  std::string("[\"a\0\"]", 6),
                                  std::string(200, '[') + std::string(200, ']')})
        agree(text);
    // Every seed cut short at each byte, and each of its bytes replaced by a byte that breaks
    // or changes the grammar.
    const std::string bytes =
        std::string("\"\\{}[],:0-+.eE tu\x01\x7F\x80\xC3\xFF", 23) + std::string(1, '\0');
    for (const auto& text : seeds()) {
        for (std::size_t cut = 0; cut < text.size(); ++cut)
            agree(text.substr(0, cut));
        for (std::size_t at = 0; at < text.size(); ++at)
            for (const char b : bytes) {
                std::string changed = text;
                changed[at] = b;
                agree(changed);
            }
    }
}

#include "ingest/nccl_tests.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <utility>

#include "core/errors.hpp"
#include "core/input_file.hpp"
#include "ingest/nccl_format.hpp"

namespace cs::api {
namespace {

using network::CollectiveKind;

struct Token {
    std::string text;
    int column = 0;  // 1-based
};

std::vector<Token> tokens(const std::string& line, std::size_t from) {
    std::vector<Token> out;
    std::size_t i = from;
    while (i < line.size()) {
        while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i])))
            ++i;
        if (i >= line.size()) break;
        const std::size_t start = i;
        while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])))
            ++i;
        out.push_back({line.substr(start, i - start), static_cast<int>(start) + 1});
    }
    return out;
}

bool all_digits(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
    });
}

std::optional<double> number(const std::string& s) {
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
}

// mpirun's --tag-output prefix "[1,0]<stdout>:", which some logs carry on every line.
std::size_t prefix_end(const std::string& line) {
    if (line.empty() || line[0] != '[') return 0;
    const auto close = line.find("]<stdout>:");
    if (close == std::string::npos || close > 16) return 0;
    return close + 10;
}

}  // namespace

bool NcclTestsRow::wrong_elements() const {
    for (const auto& w : wrong) {
        if (w == "N/A") continue;
        const auto v = number(w);
        if (!v || *v != 0) return true;
    }
    return false;
}

std::optional<CollectiveKind> nccl_tests_kind(const std::string& name) {
    static const std::array<std::pair<const char*, CollectiveKind>, 12> kNames{{
        {"all_reduce_perf", CollectiveKind::AllReduce},
        {"all_gather_perf", CollectiveKind::AllGather},
        {"reduce_scatter_perf", CollectiveKind::ReduceScatter},
        {"alltoall_perf", CollectiveKind::AllToAll},
        {"sendrecv_perf", CollectiveKind::SendRecv},
        {"broadcast_perf", CollectiveKind::Broadcast},
        {"all_reduce", CollectiveKind::AllReduce},
        {"all_gather", CollectiveKind::AllGather},
        {"reduce_scatter", CollectiveKind::ReduceScatter},
        {"alltoall", CollectiveKind::AllToAll},
        {"sendrecv", CollectiveKind::SendRecv},
        {"broadcast", CollectiveKind::Broadcast},
    }};
    for (const auto& [n, k] : kNames)
        if (name == n) return k;
    if (name == "all_to_all") return CollectiveKind::AllToAll;
    return std::nullopt;
}

namespace {

// The reading of one nccl-tests output, line by line: what its comment lines said (the binary,
// the devices, the column header, the footer) and its result rows.
class NcclTestsReader {
  public:
    explicit NcclTestsReader(const std::string& path) { f_.path = path; }

    // One line of the file (its number `line_no`), without its line ending.
    void read_line(const std::string& line, int line_no) {
        line_no_ = line_no;
        const std::size_t start = prefix_end(line);
        const auto t = tokens(line, start);
        if (t.empty()) return;
        if (t[0].text[0] == '#') {
            read_comment(line, start, t);
        } else if (!all_digits(t[0].text) || header_line_ == 0) {
            ++noise_lines_;  // NCCL INFO lines, warnings, the launcher's own output
        } else {
            f_.rows.push_back(read_row(t));
        }
    }

    // The file read, its rank count and operation settled and its rows checked against them.
    NcclTestsFile finish(std::optional<CollectiveKind> given, std::optional<int> given_ranks) {
        check_table();
        settle_ranks(given_ranks);
        settle_kind(given);
        check_sizes();
        const auto& path = f_.path;
        if (!footer_)
            f_.warnings.push_back(path +
                                  ": no \"# Avg bus bandwidth\" footer: the run may have been "
                                  "cut short; read " +
                                  std::to_string(f_.rows.size()) + " rows");
        if (noise_lines_ > 0)
            f_.warnings.push_back(
                path + ": skipped " + std::to_string(noise_lines_) +
                " line(s) that are neither comments nor result rows (log output)");
        return std::move(f_);
    }

  private:
    [[noreturn]] void fail(int column, const std::string& message) const {
        throw ConfigError(SourceLocation{f_.path, line_no_, column}, message);
    }

    // Comment lines: the header, the device list, the column header and the footer.
    void read_comment(const std::string& line, std::size_t start, const std::vector<Token>& t) {
        std::vector<std::string> w;
        for (const auto& tok : t)
            w.push_back(tok.text);
        if (w[0] == "#")
            w.erase(w.begin());
        else
            w[0] = w[0].substr(1);
        if (w.size() >= 4 && w[0] == "Collective" && w[1] == "test" && w[2] == "starting:") {
            from_file_ = nccl_tests_kind(w[3]);
            if (!from_file_)
                fail(t.back().column, "unknown nccl-tests binary '" + w[3] +
                                          "'; clustersim reads all_reduce_perf, "
                                          "all_gather_perf, reduce_scatter_perf, "
                                          "alltoall_perf, sendrecv_perf, broadcast_perf");
            f_.binary = w[3];
            from_file_line_ = line_no_;
        } else if (w.size() >= 2 && w[0] == "Rank" && all_digits(w[1]) && w[1].size() <= 6) {
            const auto bracket = line.find(']', start);
            std::string device;
            if (bracket != std::string::npos) {
                device = line.substr(bracket + 1);
                device.erase(0, device.find_first_not_of(' '));
            }
            ranks_[std::stoi(w[1])] = device;
        } else if (w.size() >= 4 && w[0] == "Avg" && w[1] == "bus" && w[2] == "bandwidth") {
            const auto colon = std::find(w.begin(), w.end(), ":");
            if (colon != w.end() && colon + 1 != w.end()) f_.avg_busbw = number(*(colon + 1));
            footer_ = true;
        } else if (!w.empty() && w[0] == "size" &&
                   std::find(w.begin(), w.end(), "count") != w.end()) {
            leading_.clear();
            for (const auto& name : w) {
                if (name == "time" || name == "cputime") break;
                leading_.push_back(name);
            }
            if (leading_.size() < 3 || leading_[1] != "count" || leading_[2] != "type")
                fail(t[0].column,
                     "a column header that does not start with size, count, "
                     "type: not nccl-tests output");
            header_line_ = line_no_;
        }
    }

    // A result row's leading columns: the header's. Older alltoall_perf printed a redop header
    // but left the column blank in its rows (nccl-tests issue 78): one column short, the redop
    // one is taken as absent.
    std::vector<std::string> row_columns(const std::vector<Token>& t) const {
        std::vector<std::string> cols = leading_;
        const auto redop_at = std::find(cols.begin(), cols.end(), "redop");
        if (t.size() + 1 == cols.size() + 8 && redop_at != cols.end() &&
            number(t[static_cast<std::size_t>(redop_at - cols.begin())].text))
            cols.erase(redop_at);
        const std::size_t want = cols.size() + 8;
        if (t.size() != want)
            fail(t[std::min(t.size(), want) - 1].column,
                 "a result row with " + std::to_string(t.size()) + " columns; the column header " +
                     "(line " + std::to_string(header_line_) + ") has " + std::to_string(want) +
                     " (" + std::to_string(cols.size()) +
                     " leading, then time, algbw, busbw, #wrong out of place and in place): a "
                     "truncated or hand-edited row");
        return cols;
    }

    // A result row: the leading columns, then time algbw busbw #wrong twice.
    NcclTestsRow read_row(const std::vector<Token>& t) const {
        const std::vector<std::string> cols = row_columns(t);
        NcclTestsRow row;
        row.line = line_no_;
        for (std::size_t c = 0; c < cols.size(); ++c) {
            const auto& tok = t[c];
            if (cols[c] == "size" || cols[c] == "count") {
                if (!all_digits(tok.text) || tok.text.size() > 18)
                    fail(tok.column, "the " + cols[c] + " column must be a whole number, got '" +
                                         tok.text + "'");
                (cols[c] == "size" ? row.size : row.count) = std::stoll(tok.text);
            } else if (cols[c] == "type") {
                row.type = tok.text;
            } else if (cols[c] == "redop") {
                row.redop = tok.text;
            } else if (cols[c] == "root") {
                const auto v = number(tok.text);
                if (!v || std::abs(*v) > 1e9)
                    fail(tok.column,
                         "the root column must be a rank number, got '" + tok.text + "'");
                row.root = static_cast<int>(*v);
            }
        }
        for (int g = 0; g < 2; ++g) {
            const std::size_t base = cols.size() + 4 * static_cast<std::size_t>(g);
            const char* names[3] = {"time", "algbw", "busbw"};
            double* into[3] = {&row.time_us[g], &row.algbw[g], &row.busbw[g]};
            for (int k = 0; k < 3; ++k) {
                const auto& tok = t[base + static_cast<std::size_t>(k)];
                const auto v = number(tok.text);
                // 1e12 us is 11.6 days: no benchmark row takes that long.
                if (!v || *v < 0 || *v >= 1e12)
                    fail(tok.column, std::string("the ") + (g ? "in-place " : "out-of-place ") +
                                         names[k] + " must be a number from 0 to 1e12, got '" +
                                         tok.text + "'");
                // nccl-tests prints times in microseconds to two decimals: a time below 0.01
                // (which would print as 0.00) is not one of its rows.
                if (k == 0 && *v > 0 && *v < 0.01)
                    fail(tok.column, std::string("the ") + (g ? "in-place " : "out-of-place ") +
                                         "time is below 0.01 us, the smallest time nccl-tests "
                                         "prints, got '" +
                                         tok.text + "'");
                *into[k] = *v;
            }
            row.wrong[g] = t[base + 3].text;
        }
        if (!(row.time_us[0] > 0)) fail(t[cols.size()].column, "an out-of-place time of zero");
        return row;
    }

    // A column header and rows after it, or the whole file is refused.
    void check_table() const {
        const SourceLocation whole{f_.path, std::max(line_no_, 1), 1};
        if (header_line_ == 0)
            throw ConfigError(whole,
                              "no nccl-tests column header (\"#  size  count  type ...\"): not "
                              "nccl-tests output, or cut before its table");
        if (f_.rows.empty())
            throw ConfigError(whole, "no result rows after the column header (line " +
                                         std::to_string(header_line_) +
                                         "): the run failed or the "
                                         "file is truncated");
    }

    // The ranks: the device lines' count, or the one given (OP:RANKS=FILE), which must agree.
    void settle_ranks(std::optional<int> given_ranks) {
        const auto& path = f_.path;
        if (ranks_.empty() && !given_ranks)
            throw ConfigError(SourceLocation{path, 1, 1},
                              "no \"# Using devices\" rank lines (a table pasted without the "
                              "lines above it?): the number of ranks cannot be told; give it as "
                              "OP:RANKS=FILE, e.g. --nccl-tests all_reduce:16=" +
                                  path);
        if (!ranks_.empty() && given_ranks && *given_ranks != static_cast<int>(ranks_.size()))
            throw ConfigError(SourceLocation{path, 1, 1},
                              "given as " + std::to_string(*given_ranks) +
                                  " ranks, but the file's " + "device lines name " +
                                  std::to_string(ranks_.size()));
        f_.ranks = ranks_.empty() ? *given_ranks : static_cast<int>(ranks_.size());
        for (const auto& [r, d] : ranks_)
            f_.devices.push_back(d);
        if (!ranks_.empty() && ranks_.rbegin()->first != f_.ranks - 1)
            f_.warnings.push_back(path + ": the device lines name ranks up to " +
                                  std::to_string(ranks_.rbegin()->first) + " but only " +
                                  std::to_string(f_.ranks) +
                                  " distinct ones (an MPI launch without MPI support in "
                                  "nccl-tests prints rank 0 several times): taking " +
                                  std::to_string(f_.ranks) + " ranks");
    }

    // The operation: the file's header line, else the one given (OP=FILE), else the binary's
    // name in the file's name.
    void settle_kind(std::optional<CollectiveKind> given) {
        const auto& path = f_.path;
        std::optional<CollectiveKind> from_name;
        for (const char* b : {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf",
                              "alltoall_perf", "sendrecv_perf", "broadcast_perf"}) {
            const auto slash = path.find_last_of('/');
            const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
            if (base.find(b) != std::string::npos) from_name = nccl_tests_kind(b);
        }
        if (from_file_ && given && *from_file_ != *given)
            throw ConfigError(SourceLocation{path, from_file_line_, 1},
                              "the file is " + f_.binary + " output but was given as " +
                                  network::collective_name(*given));
        if (from_file_)
            f_.kind = *from_file_;
        else if (given)
            f_.kind = *given;
        else if (from_name)
            f_.kind = *from_name;
        else
            throw ConfigError(SourceLocation{path, 1, 1},
                              "cannot tell which operation this is (no \"# Collective test "
                              "starting\" line, no binary name in the file name): give it as "
                              "OP=FILE, e.g. --nccl-tests all_gather=" +
                                  path);
        if (f_.binary.empty()) f_.binary = nccl_binary(f_.kind);
    }

    // Each row's size and count must agree with the operation's buffer layout.
    void check_sizes() {
        const auto& path = f_.path;
        for (const auto& row : f_.rows) {
            const auto type = find_nccl_data_type(row.type);
            if (!type) {
                f_.warnings.push_back(path + ":" + std::to_string(row.line) + ": unknown type '" +
                                      row.type + "'; its size is not checked");
                continue;
            }
            const bool split = f_.kind == CollectiveKind::AllGather ||
                               f_.kind == CollectiveKind::ReduceScatter ||
                               f_.kind == CollectiveKind::AllToAll;
            // In double: a 18-digit count times the type size and the ranks may not fit 64 bits.
            const double expected_d =
                static_cast<double>(row.count) * type->bytes * (split ? f_.ranks : 1);
            const std::int64_t expected =
                expected_d < 9e18 ? row.count * type->bytes * (split ? f_.ranks : 1) : -1;
            if (expected != row.size)
                throw ConfigError(SourceLocation{path, row.line, 1},
                                  "size " + std::to_string(row.size) + " and count " +
                                      std::to_string(row.count) + " " + row.type + " do not fit " +
                                      f_.binary + " on " + std::to_string(f_.ranks) +
                                      " ranks (size = count x " + std::to_string(type->bytes) +
                                      (split ? " x ranks" : "") + " = " + std::to_string(expected) +
                                      "): the wrong operation, or device lines missing");
        }
    }

    NcclTestsFile f_;
    std::optional<CollectiveKind> from_file_;
    int from_file_line_ = 0;
    std::map<int, std::string> ranks_;  // rank -> device
    std::vector<std::string> leading_;  // the column names before the first "time"
    int header_line_ = 0;
    std::int64_t noise_lines_ = 0;
    bool footer_ = false;
    int line_no_ = 0;
};

}  // namespace

NcclTestsFile parse_nccl_tests(std::istream& in, const std::string& path,
                               std::optional<CollectiveKind> given,
                               std::optional<int> given_ranks) {
    NcclTestsReader reader(path);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        reader.read_line(line, line_no);
    }
    return reader.finish(given, given_ranks);
}

NcclTestsFile read_nccl_tests(const std::string& spec) {
    std::optional<CollectiveKind> given;
    std::optional<int> given_ranks;
    std::string path = spec;
    const auto eq = spec.find('=');
    if (eq != std::string::npos) {
        std::string op = spec.substr(0, eq);
        const auto colon = op.find(':');
        if (colon != std::string::npos) {
            const std::string n = op.substr(colon + 1);
            if (!all_digits(n) || n.size() > 6 || std::stoi(n) < 1)
                throw ConfigError(SourceLocation{"--nccl-tests " + spec},
                                  "the rank count after ':' must be a whole number from 1 to "
                                  "999999, got '" +
                                      n + "'");
            given_ranks = std::stoi(n);
            op = op.substr(0, colon);
        }
        given = nccl_tests_kind(op);
        if (!given)
            throw ConfigError(SourceLocation{"--nccl-tests " + spec},
                              "unknown operation '" + op +
                                  "'; expected all_reduce, all_gather, reduce_scatter, alltoall, "
                                  "sendrecv or broadcast (or their _perf names), optionally "
                                  "followed by :RANKS");
        path = spec.substr(eq + 1);
    }
    std::istringstream in(read_regular_file(path, path, "an nccl-tests output file"));
    return parse_nccl_tests(in, path, given, given_ranks);
}

}  // namespace cs::api

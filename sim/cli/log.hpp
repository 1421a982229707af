// The command line's messages on stderr: spdlog's log as text ("warning: ...") or, with
// --log-json, one JSON object per line ({"level": "warning", "message": "..."}; errors add
// "file", "line", "column" and "exit"), and progress on a terminal.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "core/errors.hpp"

namespace cs::cli {

// Makes the default logger: text records ("warning: ...") on stderr, each of which first erases a
// progress line drawn there (so that a message never shares a line with a Progress).
void install_logger();

// Switches the default logger to JSON lines (--log-json).
void use_json_log();
bool json_log();

// The message main() prints for an error that ends the command, as text or as JSON.
void print_error(const char* kind, const std::string& text, int exit_status,
                 const SourceLocation* where = nullptr);

// Progress of a long command, one line on stderr rewritten in place: only when stderr is a
// terminal, logs are text and not --quiet, so that piped output and logs stay clean. The first
// update and the last (done == total) are shown, others at most ten times a second; the line is
// erased when the Progress is destroyed, and before any log record (install_logger), the next
// update drawing it again.
class Progress {
  public:
    explicit Progress(std::string what);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    bool enabled() const { return enabled_; }
    void update(std::size_t done, std::size_t total, const std::string& detail = "");

  private:
    std::string what_;
    bool enabled_ = false;
    bool shown_ = false;
    std::chrono::steady_clock::time_point last_;
};

}  // namespace cs::cli

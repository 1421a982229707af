#include "cli/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

namespace cs::cli {

namespace {

// {"level": "...", "message": "..."} per record; no time stamp, so that logs of identical runs
// are identical.
class JsonFormatter final : public spdlog::formatter {
  public:
    void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
        const auto level = spdlog::level::to_string_view(msg.level);
        nlohmann::ordered_json j;
        j["level"] = std::string(level.data(), level.size());
        j["message"] = std::string(msg.payload.data(), msg.payload.size());
        const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        dest.append(line.data(), line.data() + line.size());
        dest.push_back('\n');
    }
    std::unique_ptr<spdlog::formatter> clone() const override {
        return std::make_unique<JsonFormatter>();
    }
};

bool json_enabled = false;  // set once by --log-json before the command runs

// Whether a progress line is drawn on stderr now (no newline after it): a log record first erases
// it, so that no message lands on the progress line; the next update draws it again.
std::mutex progress_mutex;
bool progress_on_screen = false;

// Erases the progress line if one is drawn. Called with progress_mutex held.
void erase_progress_line() {
    if (!progress_on_screen) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    progress_on_screen = false;
}

// stderr's sink, which erases a drawn progress line before each record.
class ProgressAwareSink final : public spdlog::sinks::sink {
  public:
    ProgressAwareSink() : inner_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}
    void log(const spdlog::details::log_msg& msg) override {
        std::lock_guard<std::mutex> lock(progress_mutex);
        erase_progress_line();
        inner_->log(msg);
    }
    void flush() override { inner_->flush(); }
    void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
    void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
        inner_->set_formatter(std::move(f));
    }

  private:
    std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

void install_logger() {
    auto logger =
        std::make_shared<spdlog::logger>("clustersim", std::make_shared<ProgressAwareSink>());
    logger->set_pattern("%^%l%$: %v");
    spdlog::set_default_logger(logger);
}

void use_json_log() {
    json_enabled = true;
    spdlog::default_logger()->set_formatter(std::make_unique<JsonFormatter>());
}

bool json_log() {
    return json_enabled;
}

void print_error(const char* kind, const std::string& text, int exit_status,
                 const SourceLocation* where) {
    if (!json_enabled) {
        std::cerr << kind << ": " << text << "\n";
        return;
    }
    nlohmann::ordered_json j;
    j["level"] = "error";
    j["kind"] = kind;
    j["message"] = text;
    if (where) {
        j["file"] = where->file;
        j["line"] = where->line;
        j["column"] = where->column;
    }
    j["exit"] = exit_status;
    std::cerr << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

Progress::Progress(std::string what)
    : what_(std::move(what)),
      enabled_(isatty(fileno(stderr)) != 0 && !json_enabled &&
               spdlog::default_logger()->should_log(spdlog::level::info)) {}

Progress::~Progress() {
    if (!shown_) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    erase_progress_line();
}

void Progress::update(std::size_t done, std::size_t total, const std::string& detail) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (shown_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    shown_ = true;
    const double pct =
        total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0;
    std::lock_guard<std::mutex> lock(progress_mutex);
    std::fprintf(stderr, "\r\033[K%s: %zu/%zu (%.0f%%)%s%s", what_.c_str(), done, total, pct,
                 detail.empty() ? "" : " ", detail.c_str());
    std::fflush(stderr);
    progress_on_screen = true;
}

}  // namespace cs::cli

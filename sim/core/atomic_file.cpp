#include "core/atomic_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/errors.hpp"

namespace cs {

namespace fs = std::filesystem;

namespace {

ConfigError output_error(const std::string& label, const std::string& message) {
    return ConfigError(SourceLocation{label}, message);
}

// What stands at a resolved output path.
enum class Kind { Missing, Regular, Folder, Other };

Kind kind_of(const fs::path& p) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (ec || st.type() == fs::file_type::not_found) return Kind::Missing;
    if (st.type() == fs::file_type::regular) return Kind::Regular;
    if (st.type() == fs::file_type::directory) return Kind::Folder;
    return Kind::Other;
}

// Checks that `resolved` can be written; returns its kind.
Kind check_writable(const fs::path& resolved, const std::string& label) {
    const Kind kind = kind_of(resolved);
    if (kind == Kind::Folder) throw output_error(label, "cannot write: is a folder");
    if (kind == Kind::Other) {
        if (::access(resolved.c_str(), W_OK) != 0)
            throw output_error(label, std::string("cannot write: ") + std::strerror(errno));
        return kind;
    }
    auto folder = resolved.parent_path();
    if (folder.empty()) folder = ".";
    std::error_code ec;
    if (!fs::is_directory(folder, ec))
        throw output_error(label, "cannot write: folder '" + folder.string() + "' does not exist");
    // The temporary is created in the folder and renamed over the file: both need the folder to
    // be writable; an existing read-only file is refused rather than silently replaced.
    if (::access(folder.c_str(), W_OK) != 0)
        throw output_error(
            label, "cannot write in folder '" + folder.string() + "': " + std::strerror(errno));
    if (kind == Kind::Regular && ::access(resolved.c_str(), W_OK) != 0)
        throw output_error(label, std::string("cannot write: ") + std::strerror(errno));
    return kind;
}

}  // namespace

fs::path resolve_output_path(const fs::path& path) {
    fs::path p = path;
    // Linux's own limit on links followed in one lookup.
    for (int hops = 0; hops < 40; ++hops) {
        std::error_code ec;
        if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
        const fs::path next = fs::read_symlink(p, ec);
        if (ec) return p;
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
    throw output_error(path.string(), "cannot write: too many levels of symbolic links");
}

OutputSet::~OutputSet() {
    if (committed_) return;
    for (const auto& s : staged_) {
        std::error_code ec;
        fs::remove(s.tmp, ec);
    }
}

void OutputSet::declare(const std::string& option, const fs::path& path) {
    if (path.empty()) return;
    const std::string label = option + " " + path.string();
    const fs::path resolved = resolve_output_path(path);
    check_writable(resolved, label);
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(resolved, ec), ec);
    for (const auto& d : declared_) {
        std::error_code eq_ec;
        const bool same = (fs::exists(d.resolved, eq_ec) && fs::exists(resolved, eq_ec) &&
                           fs::equivalent(d.resolved, resolved, eq_ec)) ||
                          d.resolved == canonical;
        if (same)
            throw output_error(label, "is the same file as " + d.option + " " + d.path.string() +
                                          ": give each output its own file");
    }
    declared_.push_back({option, path, canonical.empty() ? resolved : canonical});
}

void OutputSet::guard_input(const std::string& what, const fs::path& path) const {
    if (path.empty()) return;
    std::error_code ec;
    if (!fs::exists(path, ec)) return;
    for (const auto& d : declared_) {
        std::error_code eq_ec;
        if (fs::exists(d.resolved, eq_ec) && fs::equivalent(d.resolved, path, eq_ec))
            throw output_error(d.option + " " + d.path.string(),
                               "is " + what + " " + path.string() +
                                   ", an input of this command: writing it would replace the "
                                   "input; give the output its own file");
    }
}

std::string OutputSet::label(const fs::path& path) const {
    for (const auto& d : declared_)
        if (d.path == path) return d.option + " " + d.path.string();
    return path.string();
}

void OutputSet::commit() {
    for (const auto& s : staged_) {
        std::error_code ec;
        fs::rename(s.tmp, s.target, ec);
        if (ec) throw output_error(s.label, "cannot replace file: " + ec.message());
    }
    committed_ = true;
}

AtomicFile::AtomicFile(fs::path target, OutputSet* outputs)
    : target_(resolve_output_path(target)),
      label_(outputs ? outputs->label(target) : target.string()),
      outputs_(outputs) {
    if (check_writable(target_, label_) == Kind::Other) {
        out_ = std::make_unique<std::ofstream>(target_, std::ios::binary);
    } else {
        tmp_ = target_;
        tmp_ += ".tmp-" + std::to_string(::getpid());
        out_ = std::make_unique<std::ofstream>(tmp_, std::ios::binary | std::ios::trunc);
        std::error_code ec;
        // A replaced file keeps its permissions.
        if (*out_ && kind_of(target_) == Kind::Regular)
            fs::permissions(tmp_, fs::status(target_, ec).permissions(), ec);
    }
    if (!*out_)
        throw output_error(label_, std::string("cannot open for writing: ") + std::strerror(errno));
    // A failed write (full disk) sets errno while the writer streams: commit() reports it.
    errno = 0;
}

AtomicFile::~AtomicFile() {
    if (committed_) return;
    out_.reset();
    if (tmp_.empty()) return;
    // unlink, not fs::remove: this runs while an exception unwinds, out of memory among them,
    // where fs::remove's allocations would end the process (noexcept) with the file left.
    ::unlink(tmp_.c_str());
}

std::ostream& AtomicFile::stream() {
    return *out_;
}

void AtomicFile::commit() {
    out_->flush();
    const bool written = static_cast<bool>(*out_);
    out_->close();
    if (!written || out_->fail())
        throw output_error(label_, std::string("write failed: ") +
                                       (errno != 0 ? std::strerror(errno) : "unknown error"));
    if (tmp_.empty()) {
        committed_ = true;
        return;
    }
    if (outputs_) {
        // The set renames it, or removes it if the command fails before that.
        outputs_->staged_.push_back({tmp_, target_, label_});
        committed_ = true;
        return;
    }
    std::error_code ec;
    fs::rename(tmp_, target_, ec);
    if (ec) throw output_error(label_, "cannot replace file: " + ec.message());
    committed_ = true;
}

void write_file_atomically(const fs::path& target, const std::function<void(std::ostream&)>& write,
                           OutputSet* outputs) {
    AtomicFile file(target, outputs);
    write(file.stream());
    file.commit();
}

}  // namespace cs

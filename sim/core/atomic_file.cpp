#include "core/atomic_file.hpp"

#include <unistd.h>

#include "core/errors.hpp"

namespace cs {

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
    const std::string shown = target_.string();
    auto folder = target_.parent_path();
    if (folder.empty()) folder = ".";
    std::error_code ec;
    if (!std::filesystem::is_directory(folder, ec))
        throw ConfigError(SourceLocation{shown},
                          "cannot write: folder '" + folder.string() + "' does not exist");
    if (std::filesystem::is_directory(target_, ec))
        throw ConfigError(SourceLocation{shown}, "cannot write: is a directory");
    tmp_ = target_;
    tmp_ += ".tmp-" + std::to_string(::getpid());
    out_ = std::make_unique<std::ofstream>(tmp_, std::ios::binary | std::ios::trunc);
    if (!*out_) throw ConfigError(SourceLocation{shown}, "cannot open for writing");
}

AtomicFile::~AtomicFile() {
    if (committed_) return;
    out_.reset();
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
}

std::ostream& AtomicFile::stream() {
    return *out_;
}

void AtomicFile::commit() {
    const std::string shown = target_.string();
    out_->flush();
    if (!*out_) throw ConfigError(SourceLocation{shown}, "write failed (disk full?)");
    out_->close();
    std::error_code ec;
    std::filesystem::rename(tmp_, target_, ec);
    if (ec) throw ConfigError(SourceLocation{shown}, "cannot replace file: " + ec.message());
    committed_ = true;
}

void write_file_atomically(const std::filesystem::path& target,
                           const std::function<void(std::ostream&)>& write) {
    AtomicFile file(target);
    write(file.stream());
    file.commit();
}

}  // namespace cs

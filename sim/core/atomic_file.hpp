// Output files are written whole or not at all: the content goes to a temporary file beside the
// target, which is renamed over the target only after the writer returned without throwing.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>

namespace cs {

// Throws ConfigError if the folder does not exist or the file cannot be written; on any exception
// from `write`, the temporary file is removed and the target left untouched.
void write_file_atomically(const std::filesystem::path& target,
                           const std::function<void(std::ostream&)>& write);

// For writers that stream while a simulation runs: the stream goes to a temporary file that
// commit() renames over the target; destroying an uncommitted AtomicFile removes the temporary.
class AtomicFile {
  public:
    explicit AtomicFile(std::filesystem::path target);  // throws ConfigError like above
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();
    std::ostream& stream();
    void commit();

  private:
    std::filesystem::path target_, tmp_;
    std::unique_ptr<std::ofstream> out_;
    bool committed_ = false;
};

}  // namespace cs

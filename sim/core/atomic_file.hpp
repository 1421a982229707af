// Output files are written whole or not at all, and only where the user pointed.
//
// - A regular file (or a new path) is replaced atomically: the content goes to a temporary file
//   beside it, renamed over it only once everything was written, flushed and closed without error.
// - A symbolic link is followed: its final target is replaced atomically, the link stays a link.
// - Anything else that is not a folder (a device such as /dev/null or /dev/full, a FIFO) is written
//   directly, since it cannot be replaced; a write error there is reported all the same.
// - Errors (missing folder, a folder given as a file, no permission, a failed write or close, a
//   full disk) are ConfigErrors located at "OPTION PATH" (e.g. "--json out.json") when the file
//   was declared in an OutputSet, else at the path; the temporary is removed and the target left
//   untouched.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace cs {

// The outputs of one command. Each output is declared before anything runs, which checks that it
// can be written and that no two outputs are the same file (after following symbolic links; hard
// links included). Files written through the set are staged, and commit() renames them all, so
// that when one output fails none of the others is left behind. Destroying the set without
// commit() removes every staged temporary.
class OutputSet {
  public:
    OutputSet() = default;
    OutputSet(const OutputSet&) = delete;
    OutputSet& operator=(const OutputSet&) = delete;
    ~OutputSet();

    // `option` names the output for messages ("--json"). An empty path is ignored. Throws
    // ConfigError for a path that cannot be written or that an earlier output already names.
    void declare(const std::string& option, const std::filesystem::path& path);
    // Refuses (ConfigError at the output's "OPTION PATH") a declared output that is the same file
    // as `path`, an input of the command (after following symbolic links; hard links
    // included), so that `--json experiment.yaml` cannot replace what it read. `what` names the
    // input in the message ("the experiment", "--topology"). A missing or empty path is no
    // conflict.
    void guard_input(const std::string& what, const std::filesystem::path& path) const;
    // "OPTION PATH" for a declared path, else the path itself.
    std::string label(const std::filesystem::path& path) const;
    // Renames every staged file over its target, in the order they were staged.
    void commit();

  private:
    friend class AtomicFile;
    struct Declared {
        std::string option;
        std::filesystem::path path, resolved;
    };
    struct Staged {
        std::filesystem::path tmp, target;
        std::string label;
    };
    std::vector<Declared> declared_;
    std::vector<Staged> staged_;
    bool committed_ = false;
};

// Throws ConfigError as described above; on any exception from `write` the target is untouched.
// With `outputs`, the file is staged in that set (renamed by OutputSet::commit()).
void write_file_atomically(const std::filesystem::path& target,
                           const std::function<void(std::ostream&)>& write,
                           OutputSet* outputs = nullptr);

// The final target of `path` after following symbolic links (relative links resolve against
// the folder of the link). Throws ConfigError for a cycle of links.
std::filesystem::path resolve_output_path(const std::filesystem::path& path);

// For writers that stream while a simulation runs: the stream goes to a temporary file that
// commit() renames over the target (or stages in `outputs`); destroying an uncommitted
// AtomicFile removes the temporary.
class AtomicFile {
  public:
    explicit AtomicFile(std::filesystem::path target, OutputSet* outputs = nullptr);
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();
    std::ostream& stream();
    void commit();

  private:
    std::filesystem::path target_, tmp_;  // tmp_ empty: written directly (device, FIFO)
    std::string label_;
    OutputSet* outputs_ = nullptr;
    std::unique_ptr<std::ofstream> out_;
    bool committed_ = false;
};

}  // namespace cs

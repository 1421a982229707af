#include "core/input_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/errors.hpp"

namespace cs {
namespace {

// Closes the descriptor on every path out.
struct Descriptor {
    int fd = -1;
    ~Descriptor() {
        if (fd >= 0) ::close(fd);
    }
};

// The status of an input, or a ConfigError for a missing path, an unreadable one or a folder.
struct stat stat_input(const std::filesystem::path& path, const SourceLocation& where,
                       const std::string& what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) throw ConfigError(where, "no such file");
        throw ConfigError(where, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) throw ConfigError(where, "is a directory, expected " + what);
    return st;
}

// Waits up to `idle_ms` for `fd` to have input (or its writer to close it): false on a timeout.
// Sets errno to EAGAIN when it returns false, as the read that came before it did.
bool wait_readable(int fd, int idle_ms) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
        const int ready = ::poll(&p, 1, idle_ms);
        if (ready > 0) return true;
        if (ready < 0 && errno == EINTR) continue;
        errno = EAGAIN;
        return false;
    }
}

// "5 s", or milliseconds below a second.
std::string seconds_text(int ms) {
    return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

}  // namespace

std::string size_text(std::int64_t bytes) {
    if (bytes % (1 << 20) != 0) return std::to_string(bytes) + " bytes";
    if (bytes % (std::int64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
    return std::to_string(bytes >> 20) + " MiB";
}

std::int64_t require_regular_file(const std::filesystem::path& path, const std::string& shown,
                                  const std::string& what, std::int64_t max_bytes) {
    const SourceLocation where{shown, 0, 0};
    const struct stat st = stat_input(path, where, what);
    if (!S_ISREG(st.st_mode))
        throw ConfigError(where, std::string("is not a regular file (") +
                                     (S_ISFIFO(st.st_mode)  ? "a FIFO"
                                      : S_ISCHR(st.st_mode) ? "a character device"
                                      : S_ISBLK(st.st_mode) ? "a block device"
                                                            : "a socket") +
                                     "): " + what + " is read to its end, so it must be a " +
                                     "regular file of at most " + size_text(max_bytes));
    if (st.st_size > max_bytes)
        throw ConfigError(where, "is " + std::to_string(st.st_size) + " bytes, more than the " +
                                     size_text(max_bytes) + " " + what + " may hold");
    return static_cast<std::int64_t>(st.st_size);
}

std::string read_regular_file(const std::filesystem::path& path, const std::string& shown,
                              const std::string& what, std::int64_t max_bytes) {
    require_regular_file(path, shown, what, max_bytes);
    return read_input_file(path, shown, what, max_bytes);
}

std::string read_input_file(const std::filesystem::path& path, const std::string& shown,
                            const std::string& what, std::int64_t max_bytes, int idle_ms,
                            int total_ms) {
    const SourceLocation where{shown, 0, 0};
    const struct stat st = stat_input(path, where, what);
    if (S_ISREG(st.st_mode) && st.st_size > max_bytes)
        throw ConfigError(where, "is " + std::to_string(st.st_size) + " bytes, more than the " +
                                     size_text(max_bytes) + " an input file may hold");
    // O_NONBLOCK so that opening a FIFO without a writer does not wait for one (it then reads as
    // empty), and kept so that a writer that holds a FIFO open without writing or closing it is
    // waited for at most `idle_ms`, not for ever.
    Descriptor d;
    d.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (d.fd < 0) throw ConfigError(where, std::string("cannot be read: ") + std::strerror(errno));
    std::string text;
    char buffer[1 << 16];
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        const ssize_t n = ::read(d.fd, buffer, sizeof buffer);
        if (n == 0) break;
        if (n < 0) {
            const int error = errno;
            if (error == EINTR) continue;
            if (error != EAGAIN)
                throw ConfigError(where, std::string("cannot be read: ") + std::strerror(error));
            // Only a stream waits (a read of a regular file never says EAGAIN): for the next
            // bytes at most idle_ms, and in all until total_ms have passed since the first read.
            const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count();
            const int left = static_cast<int>(std::max<std::int64_t>(0, total_ms - spent));
            if (left > 0 && wait_readable(d.fd, std::min(idle_ms, left))) continue;
            if (left < idle_ms)
                throw ConfigError(where, "did not end within " + seconds_text(total_ms) +
                                             " (a stream that trickles, a byte now and then?); "
                                             "give a regular file");
            throw ConfigError(where, "sent nothing for " + seconds_text(idle_ms) +
                                         " and did not end (a FIFO whose writer neither "
                                         "writes nor closes it?); give a regular file");
        }
        if (static_cast<std::int64_t>(text.size()) + n > max_bytes)
            throw ConfigError(where, "holds more than the " + size_text(max_bytes) +
                                         " an input file may hold (a stream that never ends, "
                                         "such as /dev/zero?); give a regular file");
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
}

}  // namespace cs

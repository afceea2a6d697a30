// A private temporary directory for a test's scripts, logs and marker files, removed with the
// object, and the reading and writing of such files.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dlock::test {

class temp_dir {
public:
    /// Creates $TMPDIR/<stem>.XXXXXX (mkdtemp). Throws std::runtime_error if it cannot.
    explicit temp_dir(std::string_view stem = "dlock-test");
    ~temp_dir();  ///< removes the directory and everything in it; never throws
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    const std::string& path() const noexcept { return path_; }
    /// The path of `file` inside the directory.
    std::string operator/(std::string_view file) const;
    /// Writes `text` to `file` and returns its path. Throws std::runtime_error if it cannot.
    std::string write(std::string_view file, std::string_view text) const;

private:
    std::string path_;
};

/// Writes `text` to `path` as a whole: into `path`.tmp first, then renamed, so a reader polling
/// for `path` never sees it half written. Throws std::runtime_error if it cannot.
void write_atomically(const std::string& path, std::string_view text);

/// The content of `path` (marker files written by commands, server logs, /proc files), or "" if
/// it cannot be opened; a read error ends it early and never throws.
std::string read_text(const std::string& path);

/// The last `bytes` bytes of `path` (all of it when shorter), or "": a log's tail for a failure
/// message.
std::string read_tail(const std::string& path, std::size_t bytes);

}  // namespace dlock::test

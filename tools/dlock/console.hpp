// Everything `dlock` writes to stderr goes through one `console`: one-line messages, and while
// waiting on a terminal a single status line that is redrawn in place and erased when done.
// Thread-safe: the client's observer and error handler print from its background thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace dlock::cli {

class console {
public:
    /// `quiet` drops notes and the status line (errors and warnings are still printed);
    /// `verbose` lets verbose() lines through. The status line is shown only when stderr is a
    /// terminal.
    console(bool quiet, bool verbose);
    ~console();  ///< erases the status line
    console(const console&) = delete;
    console& operator=(const console&) = delete;

    /// "dlock: <text>" — errors and warnings; always printed.
    void error(std::string_view text);
    /// "dlock: <text>" — a warning that may come in bursts (a renewal retried every few
    /// milliseconds while a server is down). Of a run of identical texts only the first is
    /// printed; the others are counted and reported as "dlock: <text> (repeated N more times)"
    /// before the next different warning, error or note, at least every repeat_summary_every, and
    /// by the destructor. Always printed, like error().
    void warning(std::string_view text);
    static constexpr std::chrono::seconds repeat_summary_every{10};
    /// "dlock: <text>" — informational; not with --quiet.
    void note(std::string_view text);
    /// "dlock: <text>" — only with --verbose (and not with --quiet).
    void verbose(std::string_view text);
    bool verbose_enabled() const noexcept { return verbose_; }

    /// Whether set_status() draws anything (stderr is a terminal and not --quiet).
    bool status_enabled() const noexcept { return status_enabled_; }
    /// Replaces the status line (no-op unless status_enabled()).
    void set_status(std::string_view text);
    /// Erases the status line.
    void clear_status();

private:
    void write_line(std::string_view text);  // caller holds mutex_
    void flush_repeats();                    // caller holds mutex_
    void erase_status();                     // caller holds mutex_
    void draw_status();                      // caller holds mutex_

    std::mutex mutex_;  // guards status_, status_shown_ and the order of writes to stderr
    const bool quiet_;
    const bool verbose_;
    const bool status_enabled_;
    const bool ansi_;  // the terminal understands "\033[K" (erase to end of line)
    std::string status_;
    bool status_shown_ = false;
    std::string last_warning_;  // the warning printed last, and how often it came again since
    std::size_t repeats_ = 0;
    std::chrono::steady_clock::time_point last_warning_at_{};  // when it (or its count) was printed
};

}  // namespace dlock::cli

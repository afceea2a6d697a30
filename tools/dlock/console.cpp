#include "console.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "process.hpp"

namespace dlock::cli {
namespace {

// write(2) directly: stdio buffering would interleave badly with the \r redraws, and a signal
// may interrupt us (EINTR) while the child runs.
void write_all(std::string_view text) {
    while (!text.empty()) {
        const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // stderr closed or broken: nothing better to do
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

bool terminal_is_ansi() {
    const std::string term = env_value("TERM");
    return !term.empty() && term != "dumb";
}

}  // namespace

console::console(bool quiet, bool verbose)
    : quiet_(quiet),
      verbose_(verbose && !quiet),
      status_enabled_(!quiet && ::isatty(STDERR_FILENO) == 1),
      ansi_(terminal_is_ansi()) {}

console::~console() {
    clear_status();
    std::lock_guard lock(mutex_);
    flush_repeats();
}

void console::error(std::string_view text) {
    std::lock_guard lock(mutex_);
    flush_repeats();
    write_line(text);
}

void console::warning(std::string_view text) {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (text == last_warning_) {
        ++repeats_;
        if (now - last_warning_at_ >= repeat_summary_every) {
            flush_repeats();
            last_warning_at_ = now;
        }
        return;
    }
    flush_repeats();
    write_line(text);
    last_warning_ = text;
    last_warning_at_ = now;
}

void console::flush_repeats() {
    if (repeats_ == 0) return;
    write_line(fmt::format("{} (repeated {} more time{})", last_warning_, repeats_,
                           repeats_ == 1 ? "" : "s"));
    repeats_ = 0;
}

void console::note(std::string_view text) {
    if (quiet_) return;
    std::lock_guard lock(mutex_);
    flush_repeats();
    write_line(text);
}

void console::verbose(std::string_view text) {
    if (!verbose_) return;
    std::lock_guard lock(mutex_);
    write_line(text);
}

void console::set_status(std::string_view text) {
    if (!status_enabled_) return;
    std::lock_guard lock(mutex_);
    erase_status();
    status_ = text;
    draw_status();
}

void console::clear_status() {
    std::lock_guard lock(mutex_);
    erase_status();
    status_.clear();
}

void console::write_line(std::string_view text) {
    const bool had_status = status_shown_;
    erase_status();
    std::string line = "dlock: ";
    line += text;
    line += '\n';
    write_all(line);
    if (had_status) draw_status();
}

void console::erase_status() {
    if (!status_shown_) return;
    if (ansi_) {
        write_all("\r\033[K");
    } else {
        // Built in place rather than as "\r" + std::string(...) + "\r": that prepend makes
        // GCC 12 at -O3 report a false -Wrestrict overlap inside std::string::insert.
        std::string blank(status_.size() + 2, ' ');
        blank.front() = '\r';
        blank.back() = '\r';
        write_all(blank);
    }
    status_shown_ = false;
}

void console::draw_status() {
    if (status_.empty()) return;
    // A line wider than the terminal wraps, and "\r" would then erase only its last row.
    winsize ws{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 &&
        status_.size() >= ws.ws_col) {
        status_.resize(ws.ws_col - 1u);
    }
    write_all(status_);
    status_shown_ = true;
}

}  // namespace dlock::cli

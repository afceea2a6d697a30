// An interactive bash on a pseudo-terminal, driven the way a person at a terminal drives it: the
// test types lines and control keys (Ctrl-C is "\x03", Ctrl-Z "\x1a") and reads what appears on
// the screen. bash runs with job control (each command line a job with its own process group, the
// foreground one owning the terminal), without rc files, history or line editing, and with the
// terminal's echo turned off, so the screen shows only what programs print (and the prompt).
// Use one object from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::test {

class pty_shell {
public:
    /// Starts `bash --norc --noprofile --noediting -i` as the session leader of a new
    /// pseudo-terminal, with the test's environment plus `env` ("NAME=value"), and waits until it
    /// prompts. Throws std::runtime_error if it does not start.
    explicit pty_shell(const std::vector<std::string>& env = {});
    /// SIGKILL to every process of the shell's session (its jobs included), then reaps the shell.
    /// Never throws.
    ~pty_shell();
    pty_shell(const pty_shell&) = delete;
    pty_shell& operator=(const pty_shell&) = delete;

    pid_t pid() const noexcept { return pid_; }
    /// Writes `keys` to the terminal as if typed.
    void type(std::string_view keys);
    /// Everything shown on the terminal so far.
    const std::string& screen();
    /// Waits up to scaled(timeout) until `text` appears on the screen at or after offset `from`.
    bool wait_for(std::string_view text, std::chrono::milliseconds timeout, std::size_t from = 0);

private:
    void drain();

    pid_t pid_ = -1;
    int master_ = -1;
    std::string screen_;
};

/// True while process `pid` exists and is not a zombie.
bool process_alive(pid_t pid);
/// The state letter of process `pid` in /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), or 0 if gone.
char process_state(pid_t pid);

}  // namespace dlock::test

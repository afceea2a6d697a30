#include "pty_shell.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cli_process.hpp"
#include "test_env.hpp"

extern char** environ;  // NOLINT: POSIX global

namespace dlock::test {
namespace {

constexpr std::string_view prompt = "pty$ ";

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

/// Fields 3 (state) and 6 (session) of /proc/<pid>/stat; false if the process is gone.
bool read_stat(pid_t pid, char& state, long& session) {
    const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
    const auto paren = stat.rfind(')');  // the command name may contain spaces and ')'
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    state = stat[paren + 2];
    long ppid = 0, pgrp = 0;
    return std::sscanf(stat.c_str() + paren + 3, "%ld %ld %ld", &ppid, &pgrp, &session) == 3;
}

}  // namespace

char process_state(pid_t pid) {
    char state = 0;
    long session = 0;
    return read_stat(pid, state, session) ? state : 0;
}

bool process_alive(pid_t pid) {
    const char state = process_state(pid);
    return state != 0 && state != 'Z' && state != 'X';
}

pty_shell::pty_shell(const std::vector<std::string>& env) {
    std::vector<std::string> entries;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry(*e);
        bool replaced = false;
        for (const auto& extra : env) replaced = replaced || name_of(extra) == name_of(entry);
        const auto name = name_of(entry);
        if (!replaced && name != "PS1" && name != "PROMPT_COMMAND" && name != "DLOCK_URL")
            entries.push_back(entry);
    }
    entries.insert(entries.end(), env.begin(), env.end());
    entries.push_back("PS1=" + std::string(prompt));
    entries.emplace_back("TERM=dumb");
    entries.emplace_back("HISTFILE=/dev/null");
    std::vector<std::string> argv = {"bash", "--norc", "--noprofile", "--noediting", "-i"};
    std::vector<char*> c_argv, c_env;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    for (auto& e : entries) c_env.push_back(e.data());
    c_env.push_back(nullptr);

    winsize size{};
    size.ws_row = 40;
    size.ws_col = 200;
    // Prepared above: between fork and exec only async-signal-safe calls.
    const pid_t pid = ::forkpty(&master_, nullptr, nullptr, &size);
    if (pid < 0) throw std::runtime_error("forkpty failed");
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread
        ::execve("/bin/bash", c_argv.data(), c_env.data());
        ::_exit(127);
    }
    pid_ = pid;
    ::fcntl(master_, F_SETFD, FD_CLOEXEC);
    ::fcntl(master_, F_SETFL, O_NONBLOCK);
    if (!wait_for(prompt, std::chrono::seconds(10))) {
        throw std::runtime_error("bash did not prompt on the pseudo-terminal: " + screen_);
    }
    const auto mark = screen_.size();
    type("stty -echo\n");
    if (!wait_for(prompt, std::chrono::seconds(10), mark)) {
        throw std::runtime_error("stty -echo did not finish: " + screen_);
    }
}

pty_shell::~pty_shell() {
    if (pid_ > 0) {
        // The shell's jobs are in process groups of their own but in its session.
        if (DIR* proc = ::opendir("/proc")) {
            while (const dirent* entry = ::readdir(proc)) {
                const pid_t other = static_cast<pid_t>(std::atol(entry->d_name));
                char state = 0;
                long session = 0;
                if (other > 0 && other != pid_ && read_stat(other, state, session) &&
                    session == pid_) {
                    ::kill(other, SIGKILL);
                }
            }
            ::closedir(proc);
        }
        ::kill(pid_, SIGKILL);
        int raw = 0;
        while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
        }
    }
    if (master_ >= 0) ::close(master_);
}

void pty_shell::type(std::string_view keys) {
    while (!keys.empty()) {
        const ssize_t n = ::write(master_, keys.data(), keys.size());
        if (n > 0) {
            keys.remove_prefix(static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            throw std::runtime_error("pty write failed");
    }
}

void pty_shell::drain() {
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(master_, buf, sizeof buf);
        if (n > 0) {
            screen_.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return;  // EAGAIN: nothing more for now; EIO: the shell is gone
    }
}

const std::string& pty_shell::screen() {
    drain();
    return screen_;
}

bool pty_shell::wait_for(std::string_view text, std::chrono::milliseconds timeout,
                         std::size_t from) {
    return eventually(
        [&] {
            drain();
            return screen_.size() >= from && screen_.find(text, from) != std::string::npos;
        },
        timeout);
}

}  // namespace dlock::test

// A private Debian `redis-server` for tests (hiredis's test.sh pattern): started as a child of the
// test process on a free 127.0.0.1 port in its own temp dir, and always torn down. Fault tests use
// stop/kill9/start/pause/resume on it. Use one object from one thread at a time; command() may be
// called from any thread (each call opens its own connection).
//
// The child is started with PR_SET_PDEATHSIG=SIGKILL, so it dies with the test process even on
// abort or SIGKILL. Linux ties that signal to the *thread* that forked, so it is only set when the
// server is (re)started from the main thread; a server (re)started from another thread is still
// killed by the destructor, but not if the test process dies abnormally.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dlock::test {

struct redis_server_options {
    /// Appended to the redis-server command line (so they override the defaults), e.g.
    /// {"--requirepass", "s3cret"}.
    std::vector<std::string>
        extra_args{};  // `{}` keeps g++ 12's -Wmissing-field-initializers quiet
    /// `--appendonly yes --appendfsync always` instead of `--appendonly no`.
    bool appendonly = false;
    /// A tls_certs directory: the server also serves TLS on a second free port (tls_port(),
    /// tls_url()) with <dir>/server.pem and server.key, clients checked against <dir>/ca.pem
    /// (--tls-auth-clients optional; CONFIG SET changes any of it). The plain port stays for
    /// command() and the readiness check.
    std::string tls_dir{};
    /// Not empty: a sentinel (`redis-server <dir>/sentinel.conf --sentinel`) with this text as its
    /// configuration file (the sentinel rewrites it, so it lives in the server's dir).
    std::string sentinel_config{};
};

class redis_server {
public:
    /// Picks a free port, makes a temp dir (/tmp/dlock-redis.XXXXXX) and starts
    /// `redis-server --port P --bind 127.0.0.1 --dir D --save '' --appendonly no
    /// --enable-debug-command local --protected-mode no --logfile D/redis.log <extra_args>`.
    /// Returns once the server answers PING (deadline scaled(10s)). If the port was taken in the
    /// meantime, retries on other ports a few times. Throws std::runtime_error with the tail of
    /// the server log if it never answers. The binary is $DLOCK_REDIS_SERVER or `redis-server`
    /// from PATH.
    explicit redis_server(redis_server_options options = {});
    /// SIGKILL if still running, waitpid, remove the temp dir. Never throws.
    ~redis_server();
    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    std::uint16_t port() const;
    /// "redis://127.0.0.1:<port>"
    std::string url() const;
    /// The TLS port (0 without tls_dir) and "rediss://127.0.0.1:<tls port>".
    std::uint16_t tls_port() const;
    std::string tls_url() const;
    /// The temp dir: AOF files and redis.log live here.
    const std::string& dir() const;
    /// The server's pid, or -1 when it is not running.
    pid_t pid() const;
    bool running() const;

    /// SIGTERM (plus SIGCONT in case it is paused) and waitpid; SIGKILL if it has not exited
    /// after scaled(10s). No-op when not running.
    void stop();
    /// SIGKILL and waitpid. No-op when not running.
    void kill9();
    /// Starts the server again on the same port and dir (after stop() or kill9()) and waits until
    /// PING answers (deadline scaled(10s)); with appendonly, the AOF is loaded first. No-op when
    /// running. Throws std::runtime_error (with the log tail) if it does not come up, e.g.
    /// because another process took the port.
    void start();
    /// SIGSTOP: the server keeps its sockets but answers nothing (a GC or VM pause).
    void pause();
    /// SIGCONT.
    void resume();

    /// Runs one command over a fresh connection (connect and reply timeout scaled(1s); AUTH first
    /// if --requirepass is among extra_args) and returns the reply as text: strings and status
    /// as is, integers in decimal, nil as "(nil)", errors as their text ("ERR ...",
    /// "NOAUTH ..."), arrays as their elements joined by "\n" (nested arrays flattened).
    /// Throws std::runtime_error if it cannot connect or the reply does not arrive in time.
    std::string command(const std::vector<std::string>& args) const;
    /// The same with an explicit (unscaled) connect and reply timeout.
    std::string command(const std::vector<std::string>& args,
                        std::chrono::milliseconds timeout) const;
    /// The calls per command since the start or the last CONFIG RESETSTAT (INFO commandstats:
    /// commands run by scripts are counted too), without the INFO and CONFIG calls of this
    /// fixture. Throws as command() does.
    std::map<std::string, long> command_calls() const;
    /// The last 4000 bytes of the server's stdout and log, for failure messages.
    std::string log_tail() const;

private:
    void spawn();                       // fork + exec on port_, sets pid_
    bool wait_ready(std::string& why);  // true once PING answers from *our* pid
    void kill_and_reap();               // SIGKILL + waitpid (no-op when not running)

    redis_server_options options_;
    std::string dir_;
    std::string password_;
    std::uint16_t port_ = 0;
    std::uint16_t tls_port_ = 0;
    pid_t pid_ = -1;
    bool paused_ = false;
};

}  // namespace dlock::test

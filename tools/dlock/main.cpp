// `dlock`: run a command under a distributed lock, inspect a lock, or see what a lock prevents.
// The command line (CLI11) and the mapping of every failure to one line on stderr and a
// documented exit status (docs/cli.md). The commands themselves live in run.cpp, status.cpp and
// demo.cpp.
#include <dlock/dlock.hpp>
#include <dlock/options.hpp>
#include <dlock/version.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "backend.hpp"
#include "cli.hpp"
#include "describe.hpp"
#include "duration.hpp"
#include "process.hpp"

namespace {

using namespace dlock::cli;

/// The CLI's version: that of the library headers it was built with.
constexpr std::string_view version = DLOCK_VERSION_STRING;

/// `dlock --version`: the CLI's version, and the version and backends of the library it runs
/// with (a shared libdlock can be newer than the CLI).
std::string version_line() {
    std::string backends;
    for (const std::string_view backend : dlock::compiled_backends()) {
        if (!backends.empty()) backends += ", ";
        backends += backend;
    }
    return fmt::format("dlock {} (library {}; backends: {})", version, dlock::version(),
                       backends.empty() ? "none" : backends);
}

const char* const main_footer = R"(Examples:
  dlock demo                               see what a lock prevents (on its own redis-server)
  dlock run nightly-report -- ./report.sh  run the command while holding the lock "nightly-report"
  dlock run --no-wait backup -- ./backup   skip it (status 75) if another host holds "backup"
  dlock status nightly-report --json       held? lease left, fencing counter, waiters

The lock service is --url, else $DLOCK_URL, else redis://127.0.0.1:6379:
  redis://[user:password@]host[:port][/db]    one Redis server
  rediss://[user:password@]host[:port][/db]   one Redis server over TLS (--tls-ca ...)
  unix://[user:password@]/path/to.sock        one Redis server on a Unix socket
  redlock://[user:password@]h1:p1,h2:p2,h3:p3  Redlock: a majority of independent Redis servers
  redis-sentinel://[user:password@]s1:p1,s2:p2/MASTER[/db]
                                              the master of a Sentinel set, followed across
                                              failovers (?wait_replicas=K&wait_timeout=D)
  rediss-sentinel://...                       the same over TLS (--tls-ca ...)
  zk://h1:p1,h2:p2,h3:p3[/base]               a ZooKeeper ensemble
  etcd://[user:password@]h1:p1,h2:p2[/prefix] an etcd cluster (etcdctl lock's keys)
  etcds://[user:password@]h1:p1,h2:p2[/prefix] the same over TLS (--tls-ca ...)
Redis URLs also take ?db=N&user=NAME&password=SECRET; prefer --password-file or
$DLOCK_PASSWORD to a password in the URL (every user can read command lines).)";

/// The exit statuses, for --help and the manual page's EXIT STATUS (cli.hpp's exit_status).
const char* const exit_statuses =
    R"(Exit statuses (`dlock run` otherwise exits with the command's own status, or ends
by the signal that killed the command):
    0  dlock status: the lock is held (and every command: success)
    3  dlock status: the lock is not held (free)
   64  bad command line or option value (unknown option, bad duration, bad URL)
   69  not available in this build or on this backend (--fair, --shared, --write,
       --permits, set-permits on redlock://; --lease, --key-prefix on zk:// and
       etcd://; dlock demo on zk:// and etcd://), or redis-server not installed for
       `dlock demo`
   70  internal error in dlock
   71  operating-system error (signalfd, spawn; the watchdog process died)
   74  lock server unreachable or not answering in time (Redlock: no quorum)
   75  lock held by someone else when --wait / --no-wait ran out (see --conflict-exit-code)
   76  the lock server answered with an error, or is not a Redis server
   77  the lock server refused the credentials (wrong or missing password), or
       the ACL user lacks a permission dlock needs
   79  the lock was lost while the command ran; the command was stopped
  124  --max-hold was reached; the command was stopped
  126  the command could not be executed          127  the command was not found
    1  dlock demo: the locked run did not sell exactly the stock)";

const char* const run_footer = R"(Examples:
  dlock run deploy -- ./deploy.sh --env prod   wait as long as it takes, then deploy
  dlock run --wait 10s report -- make report   give up after 10 s with status 75
  dlock run -q --no-wait --conflict-exit-code 0 cron/backup -- ./backup.sh
                                               skip silently (status 0) if it is already running
  dlock run --max-hold 1h job -- ./job         stop the job if it holds the lock for an hour
  dlock run job -- sh -c 'echo "token $DLOCK_FENCING_TOKEN"'

dlock's options come before NAME; every word after NAME is the command, as typed (its own
options and its own "--" too). A "--" right before NAME ends dlock's options (a NAME may then
start with '-'); one right after NAME is dropped.

The command gets DLOCK_NAME and DLOCK_FENCING_TOKEN (a number larger than every earlier holder's:
pass it to the resource you protect so it can reject stale writers), on etcd:// also etcdctl
lock's ETCD_LOCK_KEY and ETCD_LOCK_REV, and no credentials. It runs in a process group of its
own, which gets the terminal while dlock has it; SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTSTP sent to dlock are passed to that group (signals
dlock was started with ignored stay ignored). If the lock is lost, or dlock is killed, the group
is stopped: SIGTERM, then SIGKILL after --grace (SIGKILL at once if dlock was killed). A helper,
"dlock-watchdog", also kills the group before the lease ends if dlock stops renewing it
(stopped, starved). A command stopped by its pid (kill -STOP) keeps the lock while stopped. The
lock is released once the whole group has ended; killed by a signal, the command makes dlock
end by it.
Durations: 500ms, 10s, 1.5s, 2m, 1h30m; a plain number is seconds.
Exit status: the command's; 75 if the lock was not had in time; 79 if it was lost and 124 if
--max-hold was reached while the command ran (it was stopped); others: dlock --help.)";

const char* const status_footer = R"(Examples:
  dlock status nightly-report
  dlock status nightly-report --json | jq .lease_remaining_ms
  dlock status --watch nightly-report      a live view, redrawn on each change (Ctrl-C ends)

Every lock kind (mutex, fair, shared, semaphore, recursive) and every backend. "waiters" counts
waiters queued on the server (fair and write locks, and mutex waiters on one Redis server, every
waiter on ZooKeeper);
"subscribed clients" counts client connections subscribed to the lock's release channel: each
waiting process counts once, however many of its threads wait.
Exit status: 0 if the lock is held, 3 if it is not (free); others: dlock --help.)";

const char* const set_permits_footer = R"(Examples:
  dlock set-permits api-slots 5            let 5 holders of "api-slots" in at once

The semaphore's number is recorded on the server by its first user (dlock run --permits N);
later users with another number wait as the recorded semaphore, and dlock run says so. Holders
keep their permits when the number shrinks below them: no new permit is granted until fewer are
held than the new number. Growing it wakes the waiters at once. Not on redlock://.)";

const char* const completion_footer = R"(Examples:
  source <(dlock completion bash)                  in ~/.bashrc
  dlock completion zsh > "${fpath[1]}/_dlock"      then restart zsh)";

const char* const demo_footer = R"(Examples:
  dlock demo                               on a private redis-server (redis-server from PATH)
  dlock demo --workers 8 --stock 200
  dlock demo --backend redlock             on three private servers, locking with Redlock
  dlock demo --url redis://127.0.0.1:6379  on your server (its demo keys are removed afterwards)

Exit status: 0 when the locked run sold exactly the stock; 1 if not, or if a worker failed.)";

/// CLI11's help with a usage line of our own: CLI11 2.1 derives it from the options, and cannot
/// show `dlock run`'s "-- COMMAND [ARGS...]", which is split off before CLI11 parses.
class usage_formatter : public CLI::Formatter {
public:
    explicit usage_formatter(std::string usage) : usage_(std::move(usage)) {
        column_width(30);
        label("Subcommands", "Commands");
    }
    std::string make_usage(const CLI::App*, std::string) const override {
        return "Usage: " + usage_ + "\n";
    }

private:
    std::string usage_;
};

void set_usage(CLI::App* cmd, std::string usage) {
    cmd->formatter(std::make_shared<usage_formatter>(std::move(usage)));
}

/// --url, --password-file and --key-prefix of the commands that talk to a lock server, as text
/// until resolve() validates them.
struct server_args {
    std::string url;
    std::string password_file;
    std::string key_prefix = "dlock";
    std::string connect_timeout;
    std::string command_timeout;
    std::string node_timeout;
    std::string tls_ca;
    std::string tls_cert;
    std::string tls_key;
    bool tls_insecure = false;

    void add_to(CLI::App* cmd) {
        cmd->add_option("--url", url,
                        "redis://[user:password@]host[:port][/db],\n"
                        "rediss://... (TLS), "
                        "unix://[user:password@]/path/to.sock,\n"
                        "redlock://[user:password@]host:port,host:port,host:port\n"
                        "redis-sentinel://[user:password@]host:port,host:port/master\n"
                        "rediss-sentinel://... (TLS),\n"
                        "or zk://host:port,host:port[/base]\n"
                        "(default: $DLOCK_URL, else redis://127.0.0.1:6379)")
            ->type_name("URL");
        cmd->add_option("--password-file", password_file,
                        "Read the server's password from FILE (first line), so it\n"
                        "is not in the process list (also: $DLOCK_PASSWORD); an ACL\n"
                        "user goes in the URL: redis://user:@host, etcd://user:@host")
            ->type_name("FILE");
        cmd->add_option("--key-prefix", key_prefix,
                        "Prefix of the lock's Redis keys (refused on zk://, whose\n"
                        "URL names a base path instead)")
            ->type_name("TEXT")
            ->default_str("dlock");
        cmd->add_option("--connect-timeout", connect_timeout,
                        "Bound on connecting to a server (Redis, Redlock: 1s;\nZooKeeper: 2s)")
            ->type_name("DURATION");
        cmd->add_option("--command-timeout", command_timeout,
                        "Bound on one request to a Redis server (default 1s;\nnot for zk://)")
            ->type_name("DURATION");
        cmd->add_option("--node-timeout", node_timeout,
                        "redlock:// only: how long each server has to answer one\n"
                        "vote (default: the lease / 200, 5ms to 50ms)")
            ->type_name("DURATION");
        cmd->add_option("--tls-ca", tls_ca,
                        "rediss://, etcds://: trust this CA file (rediss:// also a\n"
                        "directory of hashed certificates) instead of the system's\n"
                        "trust store")
            ->type_name("PATH");
        cmd->add_option("--tls-cert", tls_cert,
                        "rediss://, etcds://: client certificate (PEM) for mutual\n"
                        "TLS; needs --tls-key")
            ->type_name("FILE");
        cmd->add_option("--tls-key", tls_key,
                        "rediss://, etcds://: the client certificate's key (PEM)")
            ->type_name("FILE");
        cmd->add_flag("--tls-insecure", tls_insecure,
                      "rediss://, etcds://: DO NOT verify the server's certificate\n"
                      "(anyone on the path can read and change the traffic)");
    }
    server_options resolve(const CLI::App* cmd) const;
};

/// `dlock run [OPTIONS] [--] NAME [--] COMMAND...` taken apart: dlock's options (for CLI11),
/// the lock's NAME and the command, verbatim. The first word that is neither an option nor an
/// option's value is NAME, and every word after it is the command, whatever it looks like
/// (`echo a -- b`, `grep -c -- x f`, `ssh host -- cmd`). A `--` right before NAME ends dlock's
/// options, so a NAME may start with '-' (as with flock(1)); a `--` right after NAME is dropped.
struct run_words {
    std::vector<std::string> options;  ///< dlock's options, for CLI11
    std::optional<std::string> name;   ///< nullopt: no NAME given
    std::vector<std::string> command;
};
run_words split_run_command(const CLI::App& run, const std::vector<std::string>& args) {
    run_words out;
    std::size_t i = 0;
    for (; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() < 2 || a.front() != '-') break;
        out.options.push_back(a);
        if (a.find('=') != std::string::npos) continue;  // --opt=value
        const CLI::Option* opt = run.get_option_no_throw(a);
        if (opt != nullptr && opt->get_items_expected_max() > 0 && i + 1 < args.size()) {
            out.options.push_back(args[++i]);  // the option's value, whatever it looks like
        }
    }
    if (i >= args.size()) return out;
    out.name = args[i++];
    if (i < args.size() && args[i] == "--") ++i;
    out.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
    return out;
}

/// With allow_extras(), CLI11 leaves what it did not recognise here; report the first of it.
void reject_extras(const CLI::App* cmd) {
    const auto extras = cmd->remaining();
    if (extras.empty()) return;
    const std::string& first = extras.front();
    const std::string what = first.size() > 1 && first.front() == '-'
                                 ? fmt::format("unknown option {}", first)
                                 : fmt::format("unexpected argument \"{}\"", first);
    if (cmd->get_parent() == nullptr) {
        throw cli_error(exit_status::usage, fmt::format("{} (see dlock --help)", what));
    }
    throw cli_error(exit_status::usage, fmt::format("{}: {} (see dlock {} --help)", cmd->get_name(),
                                                    what, cmd->get_name()));
}

void require_name(const CLI::App* cmd, const std::string& name) {
    if (name.empty()) {
        throw cli_error(exit_status::usage,
                        fmt::format("{}: missing the lock NAME (see dlock {} --help)",
                                    cmd->get_name(), cmd->get_name()));
    }
}

/// The first line of a password file. Its content never appears in a message.
std::string read_password_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        throw cli_error(exit_status::usage, fmt::format("--password-file {}: cannot read it: {}",
                                                        path, errno_text(errno)));
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
        std::fprintf(stderr,
                     "dlock: warning: --password-file %s can be read by other users (chmod 600 "
                     "it)\n",
                     path.c_str());
    }
    std::string text;
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 65536) {
        text.append(buf, static_cast<std::size_t>(n));
    }
    const int read_errno = errno;
    ::close(fd);
    if (n < 0) {
        throw cli_error(exit_status::usage, fmt::format("--password-file {}: cannot read it: {}",
                                                        path, errno_text(read_errno)));
    }
    text = text.substr(0, text.find('\n'));
    if (!text.empty() && text.back() == '\r') text.pop_back();
    remember_secret(text);
    if (text.empty()) {
        throw cli_error(exit_status::usage,
                        fmt::format("--password-file {}: the first line is empty", path));
    }
    return text;
}

/// --url as given, else the default; an explicitly empty --url is an error, not the default.
/// With --password-file (else $DLOCK_PASSWORD, if set and not empty) the password goes into it.
server_options server_args::resolve(const CLI::App* cmd) const {
    std::string full;
    if (cmd->get_option("--url")->count() == 0) {
        full = default_url();
    } else {
        if (url.empty()) throw cli_error(exit_status::usage, "--url \"\": empty URL");
        full = url;
    }
    if (cmd->get_option("--password-file")->count() > 0) {
        full = with_password(full, read_password_file(password_file));
    } else if (const std::string password = env_value("DLOCK_PASSWORD"); !password.empty()) {
        full = with_password(full, password);
    }
    if (cmd->get_option("--key-prefix")->count() > 0 && parse_service_url(full).zk) {
        // Not ignored silently: ZooKeeper locks live under the URL's base path.
        throw cli_error(exit_status::unavailable,
                        "--key-prefix does not apply to zk://: a ZooKeeper lock lives under the "
                        "URL's base path (zk://host:port/base)");
    }
    if (cmd->get_option("--key-prefix")->count() > 0 && parse_service_url(full).etcd) {
        // Not ignored silently: etcd locks live under the URL's key prefix.
        throw cli_error(exit_status::unavailable,
                        "--key-prefix does not apply to etcd://: an etcd lock's keys start with "
                        "the URL's prefix (etcd://host:port/prefix)");
    }
    server_options out{full, key_prefix};
    if (cmd->get_option("--connect-timeout")->count() > 0) {
        out.connect_timeout =
            parse_duration("--connect-timeout", connect_timeout, {.allow_zero = false});
    }
    if (cmd->get_option("--command-timeout")->count() > 0) {
        out.command_timeout =
            parse_duration("--command-timeout", command_timeout, {.allow_zero = false});
    }
    if (cmd->get_option("--node-timeout")->count() > 0) {
        out.node_timeout = parse_duration("--node-timeout", node_timeout, {.allow_zero = false});
    }
    if (!tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() || tls_insecure) {
        if (tls_cert.empty() != tls_key.empty()) {
            throw cli_error(exit_status::usage,
                            "--tls-cert and --tls-key go together (a client certificate and its "
                            "key)");
        }
        dlock::tls_options tls{
            .cert_file = tls_cert, .key_file = tls_key, .insecure_skip_verify = tls_insecure};
        std::error_code ec;
        (std::filesystem::is_directory(tls_ca, ec) ? tls.ca_dir : tls.ca_file) = tls_ca;
        out.tls = std::move(tls);
    }
    return out;
}

/// Prints fault_tolerance_warning(url), if any: once, right before the command starts (after
/// every usage error could have been reported alone).
void warn_about(const std::string& url) {
    if (const auto warning = fault_tolerance_warning(url); !warning.empty()) {
        std::fprintf(stderr, "dlock: %s\n", warning.c_str());
    }
}

/// Overwrites passwords in dlock's own arguments (argv[1..count]) with '*', so that
/// /proc/<pid>/cmdline (the process list, readable by every user) stops showing them. Until this
/// runs, right after the command line is parsed, they are visible.
void hide_passwords(char** argv, std::size_t count) {
    for (std::size_t i = 1; i <= count && argv[i] != nullptr; ++i) {
        for (const auto& [offset, length] : secret_spans(argv[i])) {
            std::memset(argv[i] + offset, '*', length);
        }
    }
}

/// `dlock run`: its options, bound on the subcommand, and their validation into run_options.
class run_subcommand {
public:
    explicit run_subcommand(CLI::App& app)
        : cmd_(app.add_subcommand("run", "Run a command while holding a lock")) {
        cmd_->allow_extras();
        cmd_->footer(run_footer);
        set_usage(cmd_, "dlock run [OPTIONS] [--] NAME [--] COMMAND [ARGS...]");
        cmd_->add_option("NAME", name_, "The lock's name")->type_name("");
        // Shown in --help only: the command is split off before parsing (split_run_command).
        cmd_->add_option("COMMAND", shown_only_, "The command to run, and its arguments")
            ->type_name("");
        server_.add_to(cmd_);
        cmd_->add_option("--lease", lease_,
                         "Lease, renewed in the background; if dlock dies, the lock\n"
                         "is free this long after its last renewal (Redis, Redlock;\n"
                         "refused on zk://, where the session timeout decides)")
            ->type_name("DURATION")
            ->default_str("30s");
        cmd_->add_option("--wait", wait_, "Give up (status 75) if not had within DURATION")
            ->type_name("DURATION")
            ->default_str("forever");
        cmd_->add_flag("--no-wait", no_wait_, "Give up at once if the lock is held (status 75)");
        cmd_->add_option("--conflict-exit-code", conflict_exit_code_,
                         "Exit status when the lock is not had in time (0-255)")
            ->type_name("N")
            ->default_str("75");
        cmd_->add_option("--max-hold", max_hold_,
                         "Stop the command, as if the lock were lost, after\nholding it this long")
            ->type_name("DURATION")
            ->default_str("forever");
        cmd_->add_option("--grace", grace_,
                         "When the lock is lost: SIGTERM, then SIGKILL after this")
            ->type_name("DURATION")
            ->default_str("5s");
        cmd_->add_flag("--foreground", foreground_,
                       "Accepted for compatibility: the command always gets the\n"
                       "terminal while dlock has it");
        cmd_->add_flag("-q,--quiet", quiet_, "No progress line or notes");
        cmd_->add_flag("-v,--verbose", verbose_,
                       "Print lock events (acquired, renewed, lost...); name the server and cause "
                       "in the degraded-Redlock warning");
        const char* kind = "Lock kind (default: exclusive)";
        cmd_->add_flag("--fair", fair_,
                       "First come, first served: waiters queue and the lock is\n"
                       "handed to the longest-waiting one (dlock::fair_mutex)")
            ->group(kind);
        cmd_->add_flag("--shared", shared_,
                       "The read side of a reader-writer lock: many --shared\n"
                       "holders at once, none while a --write holder holds or\n"
                       "waits (dlock::shared_mutex)")
            ->group(kind);
        cmd_->add_flag("--write", write_,
                       "The write side of the reader-writer lock that --shared\n"
                       "holders share: alone, and served before later readers.\n"
                       "(A plain `dlock run` is a different lock kind: one name\n"
                       "is used by one kind only.)")
            ->group(kind);
        cmd_->add_option("--permits", permits_,
                         "A counting semaphore: up to N holders at once, each\n"
                         "holding one permit (N is set on first use)")
            ->type_name("N")
            ->group(kind);
    }

    /// `args` (all of dlock's arguments) with NAME and the command after it taken out and kept,
    /// so that neither reaches CLI11: what is left ("run" and dlock's options) is a prefix of
    /// dlock's argv, the only words whose passwords are hidden.
    std::vector<std::string> split(std::vector<std::string> args) {
        if (args.empty() || args.front() != "run") return args;
        auto words = split_run_command(*cmd_, {args.begin() + 1, args.end()});
        if (words.name) name_ = std::move(*words.name);
        command_ = std::move(words.command);
        words.options.insert(words.options.begin(), "run");
        return std::move(words.options);
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        require_name(cmd_, name_);
        const run_options o = options();
        warn_about(o.server.url);
        return run_command(o);
    }

private:
    run_options options() {
        const auto given = [this](const char* option) {
            return cmd_->get_option(option)->count() > 0;
        };
        if (int(shared_) + int(write_) + int(fair_) + int(given("--permits")) > 1) {
            throw cli_error(exit_status::usage,
                            "run: --shared, --write, --fair and --permits choose the lock kind: "
                            "give one");
        }
        if (given("--wait") && no_wait_) {
            throw cli_error(exit_status::usage, "run: --wait and --no-wait cannot be combined");
        }
        if (quiet_ && verbose_) {
            throw cli_error(exit_status::usage, "run: --quiet and --verbose cannot be combined");
        }
        run_options o;
        o.server = server_.resolve(cmd_);
        o.name = name_;
        if (fair_) o.request.kind = dlock::lock_kind::fair;
        if (shared_) o.request.kind = dlock::lock_kind::read;
        if (write_) o.request.kind = dlock::lock_kind::write;
        if (given("--permits")) {
            o.request = {.kind = dlock::lock_kind::permits,
                         .count = 1,
                         .limit = static_cast<std::uint32_t>(
                             parse_count("--permits", permits_, 1, 1'000'000))};
        }
        o.command = std::move(command_);
        if (o.command.empty()) {
            throw cli_error(
                exit_status::usage,
                "run: missing the COMMAND: dlock run [OPTIONS] NAME -- COMMAND [ARGS...]");
        }
        if (o.command.front().starts_with("-")) {
            // No program is named like an option: most likely a dlock option given after NAME.
            throw cli_error(exit_status::usage,
                            fmt::format("run: the COMMAND \"{}\" starts with '-': dlock's options "
                                        "go before NAME (dlock run [OPTIONS] NAME [--] COMMAND)",
                                        o.command.front().substr(0, o.command.front().find('='))));
        }
        o.lease = parse_duration("--lease", lease_, {.allow_zero = false});
        if (o.lease < dlock::min_lease || o.lease > dlock::max_lease) {
            throw cli_error(
                exit_status::usage,
                fmt::format("--lease \"{}\": must be between {} and {}", lease_,
                            format_duration(dlock::min_lease), format_duration(dlock::max_lease)));
        }
        if (given("--lease") && parse_service_url(o.server.url).zk) {
            // Not ignored silently: on ZooKeeper the session, not a lease, bounds a lock.
            throw cli_error(exit_status::unavailable,
                            "run: --lease does not apply to zk://: a ZooKeeper lock lasts as long "
                            "as the client's session, which dlock keeps alive, and is lost within "
                            "the session timeout (the server clamps it to 2-20 x its tickTime) "
                            "after dlock dies; leave --lease out");
        }
        if (given("--lease") && parse_service_url(o.server.url).etcd) {
            // Not ignored silently: on etcd the client's etcd lease bounds a lock.
            throw cli_error(exit_status::unavailable,
                            "run: --lease does not apply to etcd://: an etcd lock lives by the "
                            "client's etcd lease (TTL 10 s, kept alive by dlock), and is lost "
                            "within that TTL after dlock dies; leave --lease out");
        }
        o.wait = no_wait_           ? std::chrono::milliseconds::zero()
                 : !given("--wait") ? dlock::forever
                                    : parse_duration("--wait", wait_, {.allow_forever = true});
        o.max_hold = !given("--max-hold")
                         ? dlock::forever
                         : parse_duration("--max-hold", max_hold_,
                                          {.allow_forever = true, .allow_zero = false});
        o.grace = parse_duration("--grace", grace_);
        o.retry_unreachable = given("--wait") && o.wait > std::chrono::milliseconds::zero();
        o.conflict_exit_code =
            given("--conflict-exit-code")
                ? parse_count("--conflict-exit-code", conflict_exit_code_, 0, 255)
                : exit_status::conflict;
        o.foreground = foreground_;
        o.quiet = quiet_;
        o.verbose = verbose_;
        return o;
    }

    CLI::App* cmd_;
    server_args server_;
    std::string name_;
    std::vector<std::string> shown_only_;
    std::vector<std::string> command_;
    std::string lease_ = "30s";
    std::string wait_;
    bool no_wait_ = false;
    std::string max_hold_;
    std::string grace_ = "5s";
    std::string conflict_exit_code_;
    bool foreground_ = false;
    bool quiet_ = false;
    bool verbose_ = false;
    bool fair_ = false;
    bool shared_ = false;
    bool write_ = false;
    std::string permits_;
};

/// `dlock status`.
class status_subcommand {
public:
    explicit status_subcommand(CLI::App& app)
        : cmd_(
              app.add_subcommand("status", "Show whether a lock is held, by whom, and who waits")) {
        cmd_->allow_extras();
        cmd_->footer(status_footer);
        set_usage(cmd_, "dlock status [OPTIONS] NAME");
        cmd_->add_option("NAME", name_, "The lock's name")->type_name("");
        server_.add_to(cmd_);
        cmd_->add_flag("--json", json_, "Print JSON");
        cmd_->add_flag("--watch", watch_,
                       "Stay and show each change as the server reports it (a live view on a\n"
                       "terminal, else one line per change); Ctrl-C ends it");
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        require_name(cmd_, name_);
        const status_options o{
            .server = server_.resolve(cmd_), .name = name_, .json = json_, .watch = watch_};
        warn_about(o.server.url);
        return status_command(o);
    }

private:
    CLI::App* cmd_;
    server_args server_;
    std::string name_;
    bool json_ = false;
    bool watch_ = false;
};

/// `dlock set-permits`.
class set_permits_subcommand {
public:
    explicit set_permits_subcommand(CLI::App& app)
        : cmd_(app.add_subcommand("set-permits", "Change the number of permits of a semaphore")) {
        cmd_->allow_extras();
        cmd_->footer(set_permits_footer);
        set_usage(cmd_, "dlock set-permits [OPTIONS] NAME N");
        cmd_->add_option("NAME", name_, "The semaphore's name")->type_name("");
        cmd_->add_option("N", permits_, "Its new number of permits (1-1000000)")->type_name("");
        server_.add_to(cmd_);
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        require_name(cmd_, name_);
        if (cmd_->get_option("N")->count() == 0) {
            throw cli_error(exit_status::usage,
                            "set-permits: missing the number of permits N (see dlock set-permits "
                            "--help)");
        }
        const int permits = parse_count("set-permits N", permits_, 1, 1'000'000);
        return set_permits_command({.server = server_.resolve(cmd_),
                                    .name = name_,
                                    .permits = static_cast<std::uint32_t>(permits)});
    }

private:
    CLI::App* cmd_;
    server_args server_;
    std::string name_;
    std::string permits_;
};

/// `dlock demo`.
class demo_subcommand {
public:
    explicit demo_subcommand(CLI::App& app)
        : cmd_(app.add_subcommand(
              "demo", "See what a lock prevents: processes oversell a stock without one")) {
        set_usage(cmd_, "dlock demo [OPTIONS]");
        cmd_->allow_extras();
        cmd_->footer(demo_footer);
        cmd_->add_option("--url", url_, "Use this Redis server instead of starting one")
            ->type_name("URL")
            ->default_str("a private redis-server");
        cmd_->add_option("--workers", workers_, "Worker processes")
            ->type_name("N")
            ->default_str("4");
        cmd_->add_option("--stock", stock_, "Items in stock")->type_name("N")->default_str("50");
        cmd_->add_option("--backend", backend_,
                         "Without --url: redis (one private server) or redlock (three)")
            ->type_name("NAME")
            ->default_str("redis");
        cmd_->add_option("--node-timeout", node_timeout_,
                         "Redlock only: how long each server has to answer one\n"
                         "vote (default: the lease / 200, 5ms to 50ms)")
            ->type_name("DURATION");
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        if (backend_ != "redis" && backend_ != "redlock") {
            if (backend_ == "zk") {
                // The true reason, whatever this build has: the demo's stock is a Redis key.
                throw cli_error(exit_status::unavailable,
                                "demo: --backend zk: the demo keeps its stock in Redis and starts "
                                "only redis-server; use --backend redis or redlock (ZooKeeper "
                                "locks: dlock run --url zk://HOST:PORT NAME -- COMMAND)");
            }
            if (backend_ == "etcd") {
                throw cli_error(exit_status::unavailable,
                                "demo: --backend etcd: this build of dlock has no etcd backend; "
                                "use --backend redis or redlock");
            }
            throw cli_error(exit_status::usage,
                            fmt::format("demo: --backend \"{}\": unknown (expected redis or "
                                        "redlock)",
                                        backend_));
        }
        demo_options o;
        if (cmd_->get_option("--workers")->count() > 0)
            o.workers = parse_count("--workers", workers_, 1, 64);
        if (cmd_->get_option("--stock")->count() > 0)
            o.stock = parse_count("--stock", stock_, 1, 100'000);
        o.redlock = backend_ == "redlock";
        if (cmd_->get_option("--url")->count() > 0) {
            if (url_.empty()) throw cli_error(exit_status::usage, "--url \"\": empty URL");
            // The URL names the backend; --backend only chooses what to start without one.
            const bool redlock_url = parse_service_url(url_).redlock;
            if (cmd_->get_option("--backend")->count() > 0 && redlock_url != o.redlock) {
                throw cli_error(exit_status::usage,
                                fmt::format("demo: --backend {} does not match --url {}", backend_,
                                            redact_url(url_)));
            }
            o.url = url_;
            warn_about(url_);
        }
        if (cmd_->get_option("--node-timeout")->count() > 0) {
            o.node_timeout = parse_duration("--node-timeout", node_timeout_, {.allow_zero = false});
        }
        return demo_command(o);
    }

private:
    CLI::App* cmd_;
    std::string url_;
    std::string workers_;
    std::string stock_;
    std::string backend_ = "redis";
    std::string node_timeout_;
};

/// `dlock completion bash|zsh`.
class completion_subcommand {
public:
    explicit completion_subcommand(CLI::App& app)
        : cmd_(app.add_subcommand("completion", "Print a shell completion script: bash or zsh")) {
        cmd_->footer(completion_footer);
        set_usage(cmd_, "dlock completion bash|zsh");
        cmd_->add_option("SHELL", shell_, "bash or zsh")
            ->required()
            ->type_name("")
            ->check(CLI::IsMember({"bash", "zsh"}));
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute(const CLI::App& app) const {
        reject_extras(cmd_);
        std::fputs((shell_ == "bash" ? bash_completion(app) : zsh_completion(app)).c_str(), stdout);
        return exit_status::ok;
    }

private:
    CLI::App* cmd_;
    std::string shell_;
};

/// One worker process of `dlock demo` (hidden: an empty group name keeps it out of --help).
class demo_worker_subcommand {
public:
    explicit demo_worker_subcommand(CLI::App& app)
        : cmd_(app.add_subcommand("__demo-worker", "")->group("")) {
        cmd_->add_option("--url", o_.url)->required();
        cmd_->add_option("--run", o_.run_id)->required();
        cmd_->add_option("--mode", o_.mode)
            ->required()
            ->check(CLI::IsMember({"unlocked", "locked"}));
        cmd_->add_option("--index", o_.index);
        cmd_->add_option("--node-timeout-ms", node_timeout_ms_);
    }

    bool parsed() const { return cmd_->parsed(); }
    int execute() {
        if (node_timeout_ms_ > 0) o_.node_timeout = std::chrono::milliseconds(node_timeout_ms_);
        return demo_worker_command(o_);
    }

private:
    CLI::App* cmd_;
    demo_worker_options o_;
    long long node_timeout_ms_ = 0;
};

int dispatch(int argc, char** argv) {
    CLI::App app{
        "dlock: run commands under distributed locks, inspect locks, see what they prevent.",
        "dlock"};
    app.set_version_flag("--version", std::string(version));
    app.footer(std::string(main_footer) + "\n\n" + exit_statuses + "\nMore: man dlock.");
    set_usage(&app, "dlock [--help | --version] COMMAND [OPTIONS] ...");
    app.allow_extras();
    // Each binds its own options; none may move once made. The order is --help's.
    run_subcommand run(app);
    status_subcommand status(app);
    set_permits_subcommand set_permits(app);
    demo_subcommand demo(app);
    completion_subcommand completion(app);
    // The manual page, generated from these definitions at build time (hidden).
    CLI::App* man = app.add_subcommand("__man", "")->group("");
    demo_worker_subcommand worker(app);

    std::vector<std::string> args(argv + 1, argv + argc);
    const auto is_command = [&](const std::string& word) {
        for (const CLI::App* sub : app.get_subcommands({})) {
            if (sub->get_name() == word) return true;
        }
        return false;
    };
    if (!args.empty() && !args.front().starts_with("-") && !is_command(args.front())) {
        throw cli_error(
            exit_status::usage,
            fmt::format("unknown command \"{}\" (expected run, status, set-permits, demo or "
                        "completion; see dlock --help)",
                        args.front()));
    }
    args = run.split(std::move(args));
    try {
        std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
        app.parse(reversed);
        hide_passwords(argv, args.size());  // dlock's own options: NAME and the command follow
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion&) {
        std::printf("%s\n", version_line().c_str());
        return exit_status::ok;
    } catch (const CLI::ParseError& e) {
        const auto selected = app.get_subcommands();
        const std::string sub = selected.empty() ? "" : selected.front()->get_name();
        throw cli_error(exit_status::usage,
                        fmt::format("{}{}{} (see dlock {}--help)", sub, sub.empty() ? "" : ": ",
                                    e.what(), sub.empty() ? "" : sub + " "));
    }
    reject_extras(&app);
    if (run.parsed()) return run.execute();
    if (status.parsed()) return status.execute();
    if (set_permits.parsed()) return set_permits.execute();
    if (demo.parsed()) return demo.execute();
    if (completion.parsed()) return completion.execute(app);
    if (man->parsed()) {
        std::fputs(man_page(app, version, main_footer, exit_statuses).c_str(), stdout);
        return exit_status::ok;
    }
    if (worker.parsed()) return worker.execute();
    throw cli_error(exit_status::usage,
                    "missing command: dlock run|status|demo ... (see dlock --help)");
}

}  // namespace

int main(int argc, char** argv) {
    record_inherited(argc, argv);  // before anything is opened or any disposition is changed
    // A closed stderr or stdout pipe must not kill dlock while it holds a lock; commands it
    // starts get SIGPIPE back (process.cpp).
    ::signal(SIGPIPE, SIG_IGN);
    // Whatever a message below quotes (CLI11's own, the library's), no secret of the command
    // line or the environment reaches stderr.
    for (int i = 1; i < argc; ++i) remember_secrets_of(argv[i]);
    remember_secrets_of(env_value("DLOCK_URL"));
    remember_secret(env_value("DLOCK_PASSWORD"));
    const auto print = [](const std::string& what) {
        std::fprintf(stderr, "dlock: %s\n", safe_message(what).c_str());
    };
    try {
        return dispatch(argc, argv);
    } catch (const cli_error& e) {
        if (*e.what() != '\0') print(e.what());  // "": said already
        return e.status();
    } catch (const dlock::error& e) {
        const auto err = to_cli_error(e, "");
        print(err.what());
        return err.status();
    } catch (const std::exception& e) {
        print(std::string("internal error: ") + e.what());
        return exit_status::internal;
    }
}

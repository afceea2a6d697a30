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
  redis://[user:password@]host[:port][/db]    one Redis server (also unix:///path/to.sock)
  redlock://[user:password@]h1:p1,h2:p2,h3:p3  Redlock: a majority of independent Redis servers
  zk://h1:p1,h2:p2,h3:p3[/base]               a ZooKeeper ensemble

Exit statuses (besides these, `dlock run` exits with the command's own status, or ends by the
signal that killed the command):
   64  bad command line or option value (unknown option, bad duration, bad URL)
   69  not available in this build or on this backend (rediss://, etcd://; --fair,
       --shared, --write, --permits on redlock://),
       or redis-server not installed for `dlock demo`
   70  internal error in dlock          71  operating-system error (signalfd, spawn)
   74  lock server unreachable or not answering in time (Redlock: no quorum)
   75  lock held by someone else when --wait / --no-wait ran out (see --conflict-exit-code)
   76  the lock server answered with an error, or is not a Redis server
   77  the lock server refused the credentials (wrong or missing password)
   79  the lock was lost while the command ran; the command was stopped
  126  the command could not be executed          127  the command was not found
    1  dlock demo: the locked run did not sell exactly the stock
More: docs/cli.md.)";

const char* const run_footer = R"(Examples:
  dlock run deploy -- ./deploy.sh --env prod   wait as long as it takes, then deploy
  dlock run --wait 10s report -- make report   give up after 10 s with status 75
  dlock run -q --no-wait --conflict-exit-code 0 cron/backup -- ./backup.sh
                                               skip silently (status 0) if it is already running
  dlock run --max-hold 1h job -- ./job         stop the job if it holds the lock for an hour
  dlock run job -- sh -c 'echo "token $DLOCK_FENCING_TOKEN"'

The command gets DLOCK_NAME and DLOCK_FENCING_TOKEN (a number larger than every earlier holder's:
pass it to the resource you protect so it can reject stale writers), and no credentials. It runs
in a process group of its own, which gets the terminal while dlock has it; SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTSTP sent to dlock are passed to that group (signals
dlock was started with ignored stay ignored). If the lock is lost, or dlock is killed, the group
is stopped: SIGTERM, then SIGKILL after --grace (SIGKILL at once if dlock was killed). The lock is
released once the whole group has ended; killed by a signal, the command makes dlock end by it.
Durations: 500ms, 10s, 1.5s, 2m, 1h30m; a plain number is seconds.
Exit status: the command's; 75 if the lock was not had in time; others: dlock --help.)";

const char* const status_footer = R"(Examples:
  dlock status nightly-report
  dlock status nightly-report --json | jq .lease_remaining_ms
  dlock status --watch nightly-report      a live view, redrawn on each change (Ctrl-C ends)

Every lock kind (mutex, fair, shared, semaphore, recursive) and every backend. "waiters" counts
waiters queued on the server (fair and write locks, and mutex waiters on one Redis server, every
waiter on ZooKeeper);
"subscribed clients" counts client connections subscribed to the lock's release channel: each
waiting process counts once, however many of its threads wait.)";

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

    void add_to(CLI::App* cmd) {
        cmd->add_option("--url", url,
                        "redis://[user:password@]host[:port][/db], unix:///path/to.sock,\n"
                        "redlock://host:port,host:port,host:port\n"
                        "or zk://host:port,host:port[/base]\n"
                        "(default: $DLOCK_URL, else redis://127.0.0.1:6379)")
            ->type_name("URL");
        cmd->add_option("--password-file", password_file,
                        "Read the server's password from FILE (first line), so it\n"
                        "is not in the process list (also: $DLOCK_PASSWORD)")
            ->type_name("FILE");
        cmd->add_option("--key-prefix", key_prefix, "Prefix of the lock's Redis keys")
            ->type_name("TEXT")
            ->default_str("dlock");
    }
    server_options resolve(const CLI::App* cmd) const;
};

/// Splits `dlock run [OPTIONS] NAME [--] COMMAND...` into what CLI11 parses (up to NAME) and the
/// command, so the command's own options never reach dlock's parser. Without "--", the first
/// word that is neither an option nor an option's value is NAME and the rest is the command.
std::vector<std::string> split_run_command(CLI::App& run, const std::vector<std::string>& args,
                                           std::vector<std::string>& command) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--") {
            command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
            return {args.begin(), args.begin() + static_cast<std::ptrdiff_t>(i)};
        }
    }
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.size() > 1 && a.front() == '-') {
            if (a.find('=') != std::string::npos) continue;  // --opt=value
            const CLI::Option* opt = run.get_option_no_throw(a);
            if (opt != nullptr && opt->get_type_size() != 0) ++i;  // takes the next word
            continue;
        }
        command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
        return {args.begin(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1};
    }
    return args;
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

void check_range(std::string_view option, int value, int low, int high) {
    if (value < low || value > high) {
        throw cli_error(exit_status::usage,
                        fmt::format("{} {}: must be between {} and {}", option, value, low, high));
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
    return {full, key_prefix};
}

/// Overwrites passwords in dlock's own arguments (argv[1..count]) with '*', so that
/// /proc/<pid>/cmdline (the process list, readable by every user) stops showing them. Until this
/// runs, right after the command line is parsed, they are visible.
void hide_passwords(char** argv, std::size_t count) {
    for (std::size_t i = 1; i <= count && argv[i] != nullptr; ++i) {
        const std::string_view arg(argv[i]);
        if (const auto span = password_span(arg)) {
            std::memset(argv[i] + span->first, '*', span->second);
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
        set_usage(cmd_, "dlock run [OPTIONS] NAME [--] COMMAND [ARGS...]");
        cmd_->add_option("NAME", name_, "The lock's name")->type_name("");
        // Shown in --help only: the command is split off before parsing (split_run_command).
        cmd_->add_option("COMMAND", shown_only_, "The command to run, and its arguments")
            ->type_name("");
        server_.add_to(cmd_);
        cmd_->add_option("--lease", lease_,
                         "Lease, renewed in the background; if dlock dies, the lock\n"
                         "is free this long after its last renewal")
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

    /// `args` (all of dlock's arguments) with the command after NAME taken out and kept, so the
    /// command's own options never reach CLI11.
    std::vector<std::string> split(std::vector<std::string> args) {
        if (args.empty() || args.front() != "run") return args;
        std::vector<std::string> rest(args.begin() + 1, args.end());
        auto head = split_run_command(*cmd_, rest, command_);
        head.insert(head.begin(), "run");
        return head;
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        require_name(cmd_, name_);
        return run_command(options());
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
        check_range("--conflict-exit-code", conflict_exit_code_, 0, 255);
        run_options o;
        o.server = server_.resolve(cmd_);
        o.name = name_;
        if (fair_) o.request.kind = dlock::lock_kind::fair;
        if (shared_) o.request.kind = dlock::lock_kind::read;
        if (write_) o.request.kind = dlock::lock_kind::write;
        if (given("--permits")) {
            check_range("--permits", permits_, 1, 1'000'000);
            o.request = {.kind = dlock::lock_kind::permits,
                         .count = 1,
                         .limit = static_cast<std::uint32_t>(permits_)};
        }
        o.command = std::move(command_);
        if (o.command.empty()) {
            throw cli_error(
                exit_status::usage,
                "run: missing the COMMAND: dlock run [OPTIONS] NAME -- COMMAND [ARGS...]");
        }
        o.lease = parse_duration("--lease", lease_, {.allow_zero = false});
        if (o.lease < dlock::min_lease || o.lease > dlock::max_lease) {
            throw cli_error(
                exit_status::usage,
                fmt::format("--lease \"{}\": must be between {} and {}", lease_,
                            format_duration(dlock::min_lease), format_duration(dlock::max_lease)));
        }
        o.wait = no_wait_           ? std::chrono::milliseconds::zero()
                 : !given("--wait") ? dlock::forever
                                    : parse_duration("--wait", wait_, {.allow_forever = true});
        o.max_hold = !given("--max-hold")
                         ? dlock::forever
                         : parse_duration("--max-hold", max_hold_,
                                          {.allow_forever = true, .allow_zero = false});
        o.grace = parse_duration("--grace", grace_);
        o.conflict_exit_code = conflict_exit_code_;
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
    int conflict_exit_code_ = exit_status::conflict;
    bool foreground_ = false;
    bool quiet_ = false;
    bool verbose_ = false;
    bool fair_ = false;
    bool shared_ = false;
    bool write_ = false;
    int permits_ = 0;
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
        return status_command(
            {.server = server_.resolve(cmd_), .name = name_, .json = json_, .watch = watch_});
    }

private:
    CLI::App* cmd_;
    server_args server_;
    std::string name_;
    bool json_ = false;
    bool watch_ = false;
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
    }

    bool parsed() const { return cmd_->parsed(); }

    int execute() {
        reject_extras(cmd_);
        if (backend_ != "redis" && backend_ != "redlock") {
            if (backend_ == "zk" || backend_ == "etcd") {
                throw cli_error(exit_status::unavailable,
                                fmt::format("demo: --backend {} is not available in this build "
                                            "yet; use --backend redis",
                                            backend_));
            }
            throw cli_error(exit_status::usage,
                            fmt::format("demo: --backend \"{}\": unknown (expected redis or "
                                        "redlock)",
                                        backend_));
        }
        check_range("--workers", workers_, 1, 64);
        check_range("--stock", stock_, 1, 100'000);
        demo_options o;
        o.workers = workers_;
        o.stock = stock_;
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
        }
        return demo_command(o);
    }

private:
    CLI::App* cmd_;
    std::string url_;
    int workers_ = 4;
    int stock_ = 50;
    std::string backend_ = "redis";
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
    }

    bool parsed() const { return cmd_->parsed(); }
    int execute() const { return demo_worker_command(o_); }

private:
    CLI::App* cmd_;
    demo_worker_options o_;
};

int dispatch(int argc, char** argv) {
    CLI::App app{
        "dlock: run commands under distributed locks, inspect locks, see what they prevent.",
        "dlock"};
    app.set_version_flag("--version", std::string(version));
    app.footer(main_footer);
    set_usage(&app, "dlock [--help | --version] COMMAND [OPTIONS] ...");
    app.allow_extras();
    // Each binds its own options; none may move once made. The order is --help's.
    run_subcommand run(app);
    status_subcommand status(app);
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
            fmt::format("unknown command \"{}\" (expected run, status, demo or completion; see "
                        "dlock --help)",
                        args.front()));
    }
    args = run.split(std::move(args));
    try {
        std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
        app.parse(reversed);
        hide_passwords(argv, args.size());  // dlock's own arguments: the command's come after
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
    if (demo.parsed()) return demo.execute();
    if (completion.parsed()) return completion.execute(app);
    if (man->parsed()) {
        std::fputs(man_page(app, version).c_str(), stdout);
        return exit_status::ok;
    }
    if (worker.parsed()) return worker.execute();
    throw cli_error(exit_status::usage,
                    "missing command: dlock run|status|demo ... (see dlock --help)");
}

}  // namespace

int main(int argc, char** argv) {
    record_inherited();  // before anything is opened or any disposition is changed
    // A closed stderr or stdout pipe must not kill dlock while it holds a lock; commands it
    // starts get SIGPIPE back (process.cpp).
    ::signal(SIGPIPE, SIG_IGN);
    try {
        return dispatch(argc, argv);
    } catch (const cli_error& e) {
        if (*e.what() != '\0') std::fprintf(stderr, "dlock: %s\n", e.what());  // "": said already
        return e.status();
    } catch (const dlock::error& e) {
        const auto err = to_cli_error(e, "");
        std::fprintf(stderr, "dlock: %s\n", err.what());
        return err.status();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dlock: internal error: %s\n", e.what());
        return exit_status::internal;
    }
}

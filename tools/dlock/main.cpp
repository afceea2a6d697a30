// `dlock`: run a command under a distributed lock, inspect a lock, or see what a lock prevents.
// The command line (CLI11) and the mapping of every failure to one line on stderr and a
// documented exit status (docs/cli.md). The commands themselves live in run.cpp, status.cpp and
// demo.cpp.
#include <dlock/dlock.hpp>
#include <dlock/options.hpp>

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

constexpr std::string_view version = "0.1.0";

const char* const main_footer = R"(Examples:
  dlock demo                               see what a lock prevents (on its own redis-server)
  dlock run nightly-report -- ./report.sh  run the command while holding the lock "nightly-report"
  dlock run --no-wait backup -- ./backup   skip it (status 75) if another host holds "backup"
  dlock status nightly-report --json       held? lease left, fencing counter, waiters

The lock service is --url, else $DLOCK_URL, else redis://127.0.0.1:6379:
  redis://[user:password@]host[:port][/db]    one Redis server (also unix:///path/to.sock)
  redlock://[user:password@]h1:p1,h2:p2,h3:p3  Redlock: a majority of independent Redis servers
  zk://h1:p1,h2:p2,h3:p3[/base]               a ZooKeeper ensemble (no `dlock status` yet)

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

/// The options `dlock run` etc. bind to, as text until validated.
struct raw_options {
    std::string url;
    std::string password_file;
    std::string key_prefix = "dlock";
    std::string name;
    std::string lease = "30s";
    std::string wait;
    bool no_wait = false;
    std::string max_hold;
    std::string grace = "5s";
    int conflict_exit_code = exit_status::conflict;
    bool foreground = false;
    bool quiet = false;
    bool verbose = false;
    bool shared = false;
    bool write = false;
    bool fair = false;
    int permits = 0;
    bool json = false;
    std::string demo_url;
    int workers = 4;
    int stock = 50;
    std::string backend = "redis";
    std::string run_id, mode;
    int index = 0;
};

void add_server_options(CLI::App* cmd, raw_options& raw) {
    cmd->add_option("--url", raw.url,
                    "redis://[user:password@]host[:port][/db], unix:///path/to.sock\n"
                    "or redlock://host:port,host:port,host:port\n"
                    "(default: $DLOCK_URL, else redis://127.0.0.1:6379)")
        ->type_name("URL");
    cmd->add_option("--password-file", raw.password_file,
                    "Read the server's password from FILE (first line), so it\n"
                    "is not in the process list (also: $DLOCK_PASSWORD)")
        ->type_name("FILE");
    cmd->add_option("--key-prefix", raw.key_prefix, "Prefix of the lock's Redis keys")
        ->type_name("TEXT")
        ->default_str("dlock");
}

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

/// --url as given, else the default; an explicitly empty --url is an error, not the default.
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
std::string server_url(const CLI::App* cmd, const raw_options& raw) {
    std::string url;
    if (cmd->get_option("--url")->count() == 0) {
        url = default_url();
    } else {
        if (raw.url.empty()) throw cli_error(exit_status::usage, "--url \"\": empty URL");
        url = raw.url;
    }
    if (cmd->get_option("--password-file")->count() > 0) {
        return with_password(url, read_password_file(raw.password_file));
    }
    if (const std::string password = env_value("DLOCK_PASSWORD"); !password.empty()) {
        return with_password(url, password);
    }
    return url;
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

run_options make_run_options(const CLI::App* run, const raw_options& raw,
                             std::vector<std::string> command) {
    const auto given = [run](const char* option) { return run->get_option(option)->count() > 0; };
    if (int(raw.shared) + int(raw.write) + int(raw.fair) + int(given("--permits")) > 1) {
        throw cli_error(exit_status::usage,
                        "run: --shared, --write, --fair and --permits choose the lock kind: give "
                        "one");
    }
    if (given("--wait") && raw.no_wait) {
        throw cli_error(exit_status::usage, "run: --wait and --no-wait cannot be combined");
    }
    if (raw.quiet && raw.verbose) {
        throw cli_error(exit_status::usage, "run: --quiet and --verbose cannot be combined");
    }
    check_range("--conflict-exit-code", raw.conflict_exit_code, 0, 255);
    run_options o;
    o.server = {server_url(run, raw), raw.key_prefix};
    o.name = raw.name;
    if (raw.fair) o.request.kind = dlock::lock_kind::fair;
    if (raw.shared) o.request.kind = dlock::lock_kind::read;
    if (raw.write) o.request.kind = dlock::lock_kind::write;
    if (given("--permits")) {
        check_range("--permits", raw.permits, 1, 1'000'000);
        o.request = {.kind = dlock::lock_kind::permits,
                     .count = 1,
                     .limit = static_cast<std::uint32_t>(raw.permits)};
    }
    o.command = std::move(command);
    if (o.command.empty()) {
        throw cli_error(exit_status::usage,
                        "run: missing the COMMAND: dlock run [OPTIONS] NAME -- COMMAND [ARGS...]");
    }
    o.lease = parse_duration("--lease", raw.lease, {.allow_zero = false});
    if (o.lease < dlock::min_lease || o.lease > dlock::max_lease) {
        throw cli_error(
            exit_status::usage,
            fmt::format("--lease \"{}\": must be between {} and {}", raw.lease,
                        format_duration(dlock::min_lease), format_duration(dlock::max_lease)));
    }
    o.wait = raw.no_wait        ? std::chrono::milliseconds::zero()
             : !given("--wait") ? dlock::forever
                                : parse_duration("--wait", raw.wait, {.allow_forever = true});
    o.max_hold = !given("--max-hold")
                     ? dlock::forever
                     : parse_duration("--max-hold", raw.max_hold,
                                      {.allow_forever = true, .allow_zero = false});
    o.grace = parse_duration("--grace", raw.grace);
    o.conflict_exit_code = raw.conflict_exit_code;
    o.foreground = raw.foreground;
    o.quiet = raw.quiet;
    o.verbose = raw.verbose;
    return o;
}

int dispatch(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);

    CLI::App app{
        "dlock: run commands under distributed locks, inspect locks, see what they prevent.",
        "dlock"};
    app.set_version_flag("--version", std::string(version));
    app.footer(main_footer);
    set_usage(&app, "dlock [--help | --version] COMMAND [OPTIONS] ...");
    app.allow_extras();
    raw_options raw;

    CLI::App* run = app.add_subcommand("run", "Run a command while holding a lock");
    run->allow_extras();
    run->footer(run_footer);
    set_usage(run, "dlock run [OPTIONS] NAME [--] COMMAND [ARGS...]");
    run->add_option("NAME", raw.name, "The lock's name")->type_name("");
    std::vector<std::string> shown_only;  // the command is split off before parsing (see above)
    run->add_option("COMMAND", shown_only, "The command to run, and its arguments")->type_name("");
    add_server_options(run, raw);
    run->add_option("--lease", raw.lease,
                    "Lease, renewed in the background; if dlock dies, the lock\n"
                    "is free this long after its last renewal")
        ->type_name("DURATION")
        ->default_str("30s");
    run->add_option("--wait", raw.wait, "Give up (status 75) if not had within DURATION")
        ->type_name("DURATION")
        ->default_str("forever");
    run->add_flag("--no-wait", raw.no_wait, "Give up at once if the lock is held (status 75)");
    run->add_option("--conflict-exit-code", raw.conflict_exit_code,
                    "Exit status when the lock is not had in time (0-255)")
        ->type_name("N")
        ->default_str("75");
    run->add_option("--max-hold", raw.max_hold,
                    "Stop the command, as if the lock were lost, after\nholding it this long")
        ->type_name("DURATION")
        ->default_str("forever");
    run->add_option("--grace", raw.grace, "When the lock is lost: SIGTERM, then SIGKILL after this")
        ->type_name("DURATION")
        ->default_str("5s");
    run->add_flag("--foreground", raw.foreground,
                  "Accepted for compatibility: the command always gets the\n"
                  "terminal while dlock has it");
    run->add_flag("-q,--quiet", raw.quiet, "No progress line or notes");
    run->add_flag("-v,--verbose", raw.verbose, "Print lock events (acquired, renewed, lost...)");
    run->add_flag("--fair", raw.fair,
                  "First come, first served: waiters queue and the lock is\n"
                  "handed to the longest-waiting one (dlock::fair_mutex)")
        ->group("Lock kind (default: exclusive)");
    run->add_flag("--shared", raw.shared,
                  "The read side of a reader-writer lock: many --shared\n"
                  "holders at once, none while a --write holder holds or\n"
                  "waits (dlock::shared_mutex)")
        ->group("Lock kind (default: exclusive)");
    run->add_flag("--write", raw.write,
                  "The write side of the reader-writer lock that --shared\n"
                  "holders share: alone, and served before later readers.\n"
                  "(A plain `dlock run` is a different lock kind: one name\n"
                  "is used by one kind only.)")
        ->group("Lock kind (default: exclusive)");
    run->add_option("--permits", raw.permits,
                    "A counting semaphore: up to N holders at once, each\n"
                    "holding one permit (N is set on first use)")
        ->type_name("N")
        ->group("Lock kind (default: exclusive)");

    CLI::App* status = app.add_subcommand("status", "Show whether a lock is held, and by how much");
    status->allow_extras();
    status->footer(status_footer);
    set_usage(status, "dlock status [OPTIONS] NAME");
    status->add_option("NAME", raw.name, "The lock's name")->type_name("");
    add_server_options(status, raw);
    status->add_flag("--json", raw.json, "Print JSON");

    CLI::App* demo = app.add_subcommand(
        "demo", "See what a lock prevents: processes oversell a stock without one");
    set_usage(demo, "dlock demo [OPTIONS]");
    demo->allow_extras();
    demo->footer(demo_footer);
    demo->add_option("--url", raw.demo_url, "Use this Redis server instead of starting one")
        ->type_name("URL")
        ->default_str("a private redis-server");
    demo->add_option("--workers", raw.workers, "Worker processes")
        ->type_name("N")
        ->default_str("4");
    demo->add_option("--stock", raw.stock, "Items in stock")->type_name("N")->default_str("50");
    demo->add_option("--backend", raw.backend,
                     "Without --url: redis (one private server) or redlock (three)")
        ->type_name("NAME")
        ->default_str("redis");

    std::string shell;
    CLI::App* completion =
        app.add_subcommand("completion", "Print a shell completion script: bash or zsh");
    completion->footer(completion_footer);
    set_usage(completion, "dlock completion bash|zsh");
    completion->add_option("SHELL", shell, "bash or zsh")
        ->required()
        ->type_name("")
        ->check(CLI::IsMember({"bash", "zsh"}));
    // The manual page, generated from these definitions at build time (hidden).
    CLI::App* man = app.add_subcommand("__man", "")->group("");

    // One worker process of `dlock demo` (hidden: an empty group name keeps it out of --help).
    CLI::App* worker = app.add_subcommand("__demo-worker", "")->group("");
    worker->add_option("--url", raw.demo_url)->required();
    worker->add_option("--run", raw.run_id)->required();
    worker->add_option("--mode", raw.mode)
        ->required()
        ->check(CLI::IsMember({"unlocked", "locked"}));
    worker->add_option("--index", raw.index);

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

    std::vector<std::string> command;
    if (!args.empty() && args.front() == "run") {
        std::vector<std::string> rest(args.begin() + 1, args.end());
        auto head = split_run_command(*run, rest, command);
        head.insert(head.begin(), "run");
        args = std::move(head);
    }
    try {
        std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
        app.parse(reversed);
        hide_passwords(argv, args.size());  // dlock's own arguments: the command's come after
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion&) {
        std::printf("dlock %s\n", std::string(version).c_str());
        return exit_status::ok;
    } catch (const CLI::ParseError& e) {
        const auto selected = app.get_subcommands();
        const std::string sub = selected.empty() ? "" : selected.front()->get_name();
        throw cli_error(exit_status::usage,
                        fmt::format("{}{}{} (see dlock {}--help)", sub, sub.empty() ? "" : ": ",
                                    e.what(), sub.empty() ? "" : sub + " "));
    }
    reject_extras(&app);
    if (run->parsed()) {
        reject_extras(run);
        require_name(run, raw.name);
        return run_command(make_run_options(run, raw, std::move(command)));
    }
    if (status->parsed()) {
        reject_extras(status);
        require_name(status, raw.name);
        return status_command({.server = {server_url(status, raw), raw.key_prefix},
                               .name = raw.name,
                               .json = raw.json});
    }
    if (demo->parsed()) {
        reject_extras(demo);
        if (raw.backend != "redis" && raw.backend != "redlock") {
            if (raw.backend == "zk" || raw.backend == "etcd") {
                throw cli_error(exit_status::unavailable,
                                fmt::format("demo: --backend {} is not available in this build "
                                            "yet; use --backend redis",
                                            raw.backend));
            }
            throw cli_error(exit_status::usage,
                            fmt::format("demo: --backend \"{}\": unknown (expected redis or "
                                        "redlock)",
                                        raw.backend));
        }
        check_range("--workers", raw.workers, 1, 64);
        check_range("--stock", raw.stock, 1, 100'000);
        demo_options o;
        o.workers = raw.workers;
        o.stock = raw.stock;
        o.redlock = raw.backend == "redlock";
        if (demo->get_option("--url")->count() > 0) {
            if (raw.demo_url.empty()) throw cli_error(exit_status::usage, "--url \"\": empty URL");
            // The URL names the backend; --backend only chooses what to start without one.
            const bool redlock_url = parse_service_url(raw.demo_url).redlock;
            if (demo->get_option("--backend")->count() > 0 && redlock_url != o.redlock) {
                throw cli_error(exit_status::usage,
                                fmt::format("demo: --backend {} does not match --url {}",
                                            raw.backend, redact_url(raw.demo_url)));
            }
            o.url = raw.demo_url;
        }
        return demo_command(o);
    }
    if (completion->parsed()) {
        reject_extras(completion);
        std::fputs((shell == "bash" ? bash_completion(app) : zsh_completion(app)).c_str(), stdout);
        return exit_status::ok;
    }
    if (man->parsed()) {
        std::fputs(man_page(app, version).c_str(), stdout);
        return exit_status::ok;
    }
    if (worker->parsed()) {
        return demo_worker_command(
            {.url = raw.demo_url, .run_id = raw.run_id, .mode = raw.mode, .index = raw.index});
    }
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

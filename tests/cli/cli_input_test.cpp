// The `dlock` command line against bad and hostile input, run as a process: a small fuzz over the
// argument space (every command x every URL scheme x valid, unreachable and malformed URLs), and
// the input rules of docs/cli.md one by one: exit statuses, one line per error, credentials that
// never appear in any output, control characters that are never printed raw.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <mutex>
#include <shared_mutex>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <deque>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.hpp"
#include "fake_server.hpp"
#include "redis_fleet.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using dlock::test::cli_options;
using dlock::test::cli_process;
using dlock::test::cli_result;
using dlock::test::run_cli;
using dlock::test::shared_redis;
using dlock::test::vote_bound;

using namespace dlock::test::exit_status;  // the documented exit statuses

/// The password every hostile URL carries somewhere; no output may contain it.
constexpr const char* secret = "Pw0rdZ9q";

std::string joined(const std::vector<std::string>& args) {
    std::string out = "dlock";
    for (const auto& a : args) out += " '" + (a.size() > 120 ? a.substr(0, 120) + "..." : a) + "'";
    return out;
}

std::string lowercase(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
}

std::size_t line_count(const std::string& text) {
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

/// Every bad input gets exactly one line on stderr, and never an exception dump.
void expect_one_line(const cli_result& r, const std::string& what) {
    EXPECT_EQ(line_count(r.err), 1u) << what << "\n" << r.err;
    EXPECT_TRUE(r.err.starts_with("dlock: ")) << what << "\n" << r.err;
}

void expect_no_secret(const cli_result& r, const std::string& what, const std::string& pw) {
    EXPECT_EQ(r.err.find(pw), std::string::npos) << what << ": password on stderr: " << r.err;
    EXPECT_EQ(r.out.find(pw), std::string::npos) << what << ": password on stdout: " << r.out;
}

/// Runs every command line at once, a few at a time, and returns their results in order.
std::vector<cli_result> run_all(const std::vector<std::vector<std::string>>& commands,
                                std::size_t parallel = 6) {
    std::vector<cli_result> results(commands.size());
    std::deque<std::pair<std::size_t, std::unique_ptr<cli_process>>> running;
    std::size_t next = 0;
    while (next < commands.size() || !running.empty()) {
        while (next < commands.size() && running.size() < parallel) {
            running.emplace_back(next, std::make_unique<cli_process>(commands[next]));
            ++next;
        }
        auto [i, p] = std::move(running.front());
        running.pop_front();
        results[i] = p->wait(60s);
    }
    return results;
}

// --- the fuzz: every command x every scheme x valid / unreachable / malformed -----------------

/// One URL and what each command should make of it.
struct url_case {
    std::string url;
    std::set<int> run;     ///< exit statuses allowed for `run ... -- true` and `status`
    std::set<int> demo{};  ///< for `demo --url`; empty: as run
};

std::vector<url_case> url_cases(const std::string& redis_hostport, const std::string& redlock,
                                const std::string& zk_valid) {
    const std::string pw = secret;
    const std::string dead = "127.0.0.1:" + std::to_string(dlock::test::free_port());
    const std::set<int> bad = {usage, unavailable};
    const std::set<int> down = {unreachable};
    const std::set<int> fine = {ok};
    std::vector<url_case> cases = {
        // redis://
        {"redis://" + redis_hostport, fine},
        {"REDIS://" + redis_hostport, fine},
        {"Redis://" + redis_hostport + "?db=1", fine},
        {"redis://:" + pw + "@" + dead, down},
        {"redis://u:" + pw + "@" + dead + "/0", down},
        {"redis://" + dead + "/0?password=" + pw, down},
        {"redis://" + dead + "?db=0&password=" + pw, down},
        {"redis://" + dead + "/0?db=0&password=" + pw, bad},  // the database twice
        {"redis://" + dead + "/0?PASSWORD=" + pw + "&user=u", down},
        {"redis://:" + pw + "@", bad},
        {"redis://:" + pw + "@:6379", bad},
        {"redis://:" + pw + "@127.0.0.1:", bad},
        {"redis://:" + pw + "@127.0.0.1:abc", bad},
        {"redis://:" + pw + "@127.0.0.1:99999", bad},
        {"redis://:" + pw + "@127.0.0.1:0", bad},
        {"redis://:" + pw + "@127.0.0.1:-1", bad},
        {"redis://:" + pw + "@[::1", bad},
        {"redis://u:" + pw + "@@" + dead, down},  // the password is "Pw0rdZ9q@"
        {"redis://@" + pw + "@" + dead, down},
        {"redis://:" + pw + "%zz@" + dead, bad},
        {"redis://" + dead + "/0?password=" + pw + "%zz", bad},
        {"redis://" + dead + "/0?token=" + pw + "&bogus=1", bad},
        {"redis://" + dead + "/0?" + pw, bad},
        {"redis://" + dead + "/99999999999999999999?password=" + pw, bad},
        {"redis://" + dead + "/x?password=" + pw, bad},
        {"redis://" + dead + "/0?password=" + pw + "#frag", bad},
        {"redis://:" + pw + "@" + std::string(5000, 'h') + ":1", {unreachable, usage}},
        {"redis://:" + pw + "@" + dead + "/\x01\n\x1b[31m", bad},
        {"redis://:" + pw + "@127.0.0.1\n:1", bad},
        {"redis:" + pw + "@" + dead, bad},
        {"redis://" + dead + "/0?password=" + std::string(3000, 'x') + pw, down},
        // rediss:// (TLS: the same server, unreachable)
        {"rediss://:" + pw + "@" + dead, down},
        {"REDISS://" + dead + "/0?password=" + pw, down},
        {"rediss://:" + pw + "@", bad},
        // unix://
        {"unix:///nonexistent/dlock-fuzz.sock", down},
        {"unix://:" + pw + "@/nonexistent/dlock-fuzz.sock", down},
        {"unix://u:" + pw + "@/nonexistent/dlock-fuzz.sock?db=0", down},
        {"unix:///nonexistent/dlock-fuzz.sock?db=0&password=" + pw, down},
        {"UNIX:///nonexistent/dlock-fuzz.sock?password=" + pw, down},
        {"unix://", bad},
        {"unix://:" + pw + "@", bad},
        {"unix://:" + pw + "@relative.sock", bad},
        {"unix:///tmp/x.sock?db=x&password=" + pw, bad},
        {"unix:///tmp/x.sock?pass=" + pw + "&db=0", bad},
        {"unix:///tmp/x.sock?password=" + pw + "%zz", bad},
        // redlock://
        {"redlock://" + redlock, fine},
        {"Redlock://" + redlock, fine},
        {"redlock://:" + pw + "@" + dead + ",127.0.0.1:2,127.0.0.1:3", down},
        {"redlock://" + dead + ",127.0.0.1:2,127.0.0.1:3/0?password=" + pw, down},
        {"redlock://:" + pw + "@", bad},
        {"redlock://:" + pw + "@" + dead + ",,127.0.0.1:2", bad},
        {"redlock://:" + pw + "@" + dead + "," + dead, bad},
        {"redlock://:" + pw + "@" + dead + ",127.0.0.1:99999,127.0.0.1:3", bad},
        {"redlock://:" + pw + "@" + dead + ",unix:///tmp/x.sock,127.0.0.1:3", bad},
        {"redlock://" + dead + ",127.0.0.1:2,127.0.0.1:3?password=" + pw + "%zz", bad},
        {"redlock://u:" + pw + "@@" + dead + ",127.0.0.1:2,127.0.0.1:3", down},
        // zk://
        {"zk://u:" + pw + "@" + dead, bad, bad},
        {"zk://" + dead + "/x?password=" + pw, bad, bad},
        {"zk://" + dead + "/x?digest=u:" + pw, bad, bad},
        {"zk://", bad, bad},
        {"zk://127.0.0.1:99999", bad, bad},
        {"zk://" + dead + "/x\x01y", bad, bad},
    // etcd:// and unknown schemes
#if DLOCK_HAS_ETCD
        // run and status: unreachable (also with etcd's user and password); demo: not on etcd (69)
        {"etcd://" + dead, {unreachable, unavailable}},
        {"etcd://u:" + pw + "@" + dead, {unreachable, unavailable}},
        {"ETCD://" + dead + "?password=" + pw, bad},
#else
        {"etcd://" + dead, {unavailable}},
        {"etcd://u:" + pw + "@" + dead, {unavailable}},
        {"ETCD://" + dead + "?password=" + pw, {unavailable}},
#endif
        {"foo://u:" + pw + "@" + dead, bad},
        {"memcached://" + dead + "/?password=" + pw, bad},
        {"u:" + pw + "@" + dead, bad},
        {dead, bad},
        {"", bad},
        {"://x", bad},
        {"\x1b]0;title\x07://x", bad},
    };
#if DLOCK_HAS_ZOOKEEPER
    cases.push_back({zk_valid, fine, {unavailable}});
    cases.push_back({"ZK" + zk_valid.substr(2), fine, {unavailable}});
    cases.push_back({"zk://" + dead, down, {unavailable}});
#else
    (void)zk_valid;
#endif
    return cases;
}

TEST(CliFuzz, EveryCommandTimesEveryUrl) {
    dlock::test::redis_fleet fleet(3);
    std::string redlock;
    for (std::size_t i = 0; i < fleet.size(); ++i) {
        redlock +=
            (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(fleet[i].port());
    }
    std::string zk;
#if DLOCK_HAS_ZOOKEEPER
    zk = dlock::test::shared_zk().url("/dlock-fuzz");
#endif
    const std::string redis_hostport = "127.0.0.1:" + std::to_string(shared_redis().port());
    const auto cases = url_cases(redis_hostport, redlock, zk);

    struct planned {
        std::vector<std::string> args;
        std::set<int> allowed;
    };
    std::vector<planned> plan;
    // A live Redlock URL's votes get the scaled time to answer (vote_bound).
    const std::string node_timeout = vote_bound();
    for (const auto& c : cases) {
        const auto name = dlock::test::unique_name("fuzz");
        const bool live_redlock =
            c.run == std::set<int>{ok} && lowercase(c.url).starts_with("redlock://");
        const auto with_url = [&](std::vector<std::string> args) {
            const auto at = std::find(args.begin(), args.end(), "--url") + 2;
            if (live_redlock) args.insert(at, {"--node-timeout", node_timeout});
            return args;
        };
        // One attempt: within a --wait, an unreachable server is retried (its own tests).
        plan.push_back({with_url({"run", "--url", c.url, "--no-wait", name, "--", "true"}), c.run});
        std::set<int> status = c.run;
        if (status.contains(ok)) status.insert(not_held);  // 3: free; 0: `run` holds it now
        plan.push_back({with_url({"status", "--url", c.url, name}), status});
        std::set<int> demo = c.demo.empty() ? c.run : c.demo;
        if (demo.contains(ok)) demo.insert(demo_failed);  // a worker may fail: not this test's
        plan.push_back(
            {with_url({"demo", "--url", c.url, "--workers", "2", "--stock", "3"}), demo});
        std::set<int> resize = c.run;
        resize.insert(unavailable);  // a backend without semaphore resizing says so
        plan.push_back(
            {with_url({"set-permits", "--url", c.url, dlock::test::unique_name("fuzz-sem"), "2"}),
             resize});
        plan.push_back({{"completion", "bash", "--url", c.url}, {usage}});
        plan.push_back({{"completion", c.url}, {usage}});
        plan.push_back({{"--url", c.url}, {usage}});
        plan.push_back({{c.url}, {usage}});
        plan.push_back({{"bogus", "--url", c.url}, {usage}});
        plan.push_back({{"run", "--url", c.url}, {usage}});
        plan.push_back({{"status", "--url", c.url, "n", "--bogus", c.url}, {usage}});
        plan.push_back({{"demo", "--workers", c.url}, {usage}});
    }
    std::vector<std::vector<std::string>> commands;
    for (const auto& p : plan) commands.push_back(p.args);
    const auto results = run_all(commands);

    const std::set<int> documented = {ok,       demo_failed,  not_held,
                                      usage,    unavailable,  unreachable,
                                      conflict, server_error, auth_failed};
    for (std::size_t i = 0; i < plan.size(); ++i) {
        const auto& r = results[i];
        const std::string what = joined(plan[i].args);
        EXPECT_LT(r.status, 128) << what << ": ended by a signal\n" << r.err;
        EXPECT_TRUE(documented.contains(r.status))
            << what << ": undocumented status " << r.status << "\n"
            << r.err;
        EXPECT_TRUE(plan[i].allowed.contains(r.status)) << what << ": status " << r.status << "\n"
                                                        << r.err;
        if (r.status == usage || r.status == unavailable || r.status == unreachable) {
            expect_one_line(r, what);
        }
        expect_no_secret(r, what, secret);
        // No raw control character of the input is echoed (an ESC would reach the terminal).
        EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << what << ": " << r.err;
        EXPECT_EQ(r.err.find('\x01'), std::string::npos) << what << ": " << r.err;
    }
}

// --- a zk:// URL where the demo needs Redis --------------------------------------------------

TEST(CliDemo, ZooKeeperUrlIsRefusedNotACrash) {
    // The demo keeps its stock in Redis: zk:// has no Redis server to put it on.
    const std::string zk = "zk://127.0.0.1:" + std::to_string(dlock::test::free_port()) + "/x";
    const auto r = run_cli({"demo", "--url", zk});
    EXPECT_EQ(r.status, unavailable) << r.err;
    EXPECT_NE(r.err.find("keeps its stock in Redis"), std::string::npos) << r.err;
    expect_one_line(r, "demo --url zk://");
    // --backend zk says the true reason, in a build with or without ZooKeeper.
    const auto b = run_cli({"demo", "--backend", "zk"});
    EXPECT_EQ(b.status, unavailable) << b.err;
    EXPECT_EQ(b.err.find("not available in this build"), std::string::npos) << b.err;
    EXPECT_NE(b.err.find("keeps its stock in Redis"), std::string::npos) << b.err;
    expect_one_line(b, "demo --backend zk");
}

// --- credentials in the query string -----------------------------------------------------------

TEST(CliSecrets, QueryPasswordsAreUsedAndNeverShown) {
    const std::string pw = "Qs7ecretXw";
    dlock::test::redis_server server({.extra_args = {"--requirepass", pw}});
    const std::string at = "127.0.0.1:" + std::to_string(server.port());
    const std::string dead = "127.0.0.1:" + std::to_string(dlock::test::free_port());
    // The redis-py spelling works, and the command sees no password (DLOCK_URL is dropped).
    for (const std::string& u :
         {"redis://" + at + "/0?password=" + pw, "redis://" + at + "?db=1&password=" + pw,
          "redis://" + at + "/0?user=default&password=" + pw}) {
        const auto r =
            run_cli({"run", "-v", "--url", u, dlock::test::unique_name("q"), "--", "env"},
                    {.env = {"DLOCK_URL=" + u}});
        EXPECT_EQ(r.status, ok) << u << "\n" << r.err;
        expect_no_secret(r, u, pw);
        const auto s = run_cli({"status", "--json", "--url", u, "n"});
        EXPECT_EQ(s.status, not_held) << u << "\n" << s.err;
        expect_no_secret(s, u, pw);
    }
    // Refused, unreachable or malformed: the message quotes the URL with the value as ***.
    const std::vector<std::pair<std::string, int>> failing = {
        {"redis://" + at + "/0?password=Wr0ng" + pw, auth_failed},
        {"unix:///nonexistent/dlock.sock?db=0&password=" + pw, unreachable},
        {"redlock://" + dead + ",127.0.0.1:2,127.0.0.1:3/0?password=" + pw, unreachable},
        {"zk://" + dead + "/x?password=" + pw, usage},
        {"redis://" + at + "/0?passwd=" + pw, usage},
        {"redis://" + at + "/0?" + pw, usage},
    };
    for (const auto& [u, status] : failing) {
        for (const auto& args : std::vector<std::vector<std::string>>{
                 {"run", "--url", u, "n", "--", "true"}, {"status", "--url", u, "n"}}) {
            const auto r = run_cli(args);
            EXPECT_EQ(r.status, status) << joined(args) << "\n" << r.err;
            expect_no_secret(r, joined(args), pw);
            expect_one_line(r, joined(args));
        }
    }
}

// --- numbers on the command line ---------------------------------------------------------------

TEST(CliNumbers, EveryNumericOptionRefusesOddNumbersWithUsage) {
    const std::string huge(400, '9');
    std::vector<std::vector<std::string>> cases;
    for (const char* option : {"--lease", "--wait", "--max-hold", "--grace"}) {
        for (const std::string& value : std::vector<std::string>{
                 huge, huge + "ms", "1" + huge + ".5s", huge + "h" + huge + "m", "1e3", "0x10",
                 "nan", "-0", "+5", "1.5.5s", "5 s", "\xd9\xa1"}) {
            cases.push_back({"run", option, value, "n", "--", "true"});
        }
    }
    for (const char* option : {"--permits", "--conflict-exit-code"}) {
        for (const std::string& value : std::vector<std::string>{
                 huge, "99999999999", "0x10", "-1", "1e3", "+5", " 5", "5 ", "nan", ""}) {
            cases.push_back({"run", option, value, "n", "--", "true"});
        }
    }
    for (const char* option : {"--workers", "--stock"}) {
        for (const std::string& value :
             std::vector<std::string>{huge, "4294967297", "0x10", "-1", "1e3", "+5", ""}) {
            cases.push_back({"demo", option, value});
        }
    }
    const auto results = run_all(cases);
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& r = results[i];
        const std::string what = joined(cases[i]);
        EXPECT_EQ(r.status, usage) << what << "\n" << r.err;
        EXPECT_EQ(r.err.find("internal error"), std::string::npos) << what << "\n" << r.err;
        EXPECT_NE(r.err.find(cases[i][1]), std::string::npos) << what << ": " << r.err;
        expect_one_line(r, what);
    }
    // Leading zeros are still decimal: 010 is ten, not eight.
    const auto r =
        run_cli({"run", "--url", "redis://127.0.0.1:" + std::to_string(shared_redis().port()),
                 "--conflict-exit-code", "010", "--no-wait", "n", "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
}

// --- URL schemes --------------------------------------------------------------------------------

TEST(CliUrls, SchemesAreCaseInsensitive) {
    const std::string at = "127.0.0.1:" + std::to_string(shared_redis().port());
    for (const std::string& u : {"REDIS://" + at, "Redis://" + at + "/0"}) {
        const auto r = run_cli({"run", "--url", u, dlock::test::unique_name("case"), "--", "true"});
        EXPECT_EQ(r.status, ok) << u << "\n" << r.err;
        EXPECT_EQ(run_cli({"status", "--url", u, "n"}).status, not_held) << u;
    }
    dlock::test::redis_fleet fleet(3);
    std::string hosts;
    for (std::size_t i = 0; i < 3; ++i)
        hosts += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(fleet[i].port());
    const auto r = run_cli(
        {"run", "--node-timeout", vote_bound(), "--url", "Redlock://" + hosts, "n", "--", "true"});
    EXPECT_EQ(r.status, ok) << r.err;
    EXPECT_EQ(r.err, "");  // three servers: no warning
}

TEST(CliUrls, RedlockWithOneOrTwoServersWarnsOnce) {
    dlock::test::redis_fleet fleet(2);
    const std::string one = "redlock://127.0.0.1:" + std::to_string(fleet[0].port());
    const std::string two = one + ",127.0.0.1:" + std::to_string(fleet[1].port());
    for (const auto& [u, count] : {std::pair{one, "1 server:"}, std::pair{two, "2 servers:"}}) {
        for (const auto& args : std::vector<std::vector<std::string>>{
                 {"run", "--node-timeout", vote_bound(), "--url", u,
                  dlock::test::unique_name("few"), "--", "true"},
                 {"status", "--node-timeout", vote_bound(), "--url", u, "n"}}) {
            const auto r = run_cli(args);
            EXPECT_EQ(r.status, args[0] == "status" ? not_held : ok) << joined(args) << "\n"
                                                                     << r.err;
            EXPECT_EQ(line_count(r.err), 1u) << joined(args) << "\n" << r.err;
            EXPECT_NE(r.err.find(std::string("dlock: warning: redlock:// with ") + count),
                      std::string::npos)
                << r.err;
            EXPECT_NE(r.err.find("no fault tolerance"), std::string::npos) << r.err;
        }
    }
}

// --- dlock status and control characters ---------------------------------------------------------

TEST(CliStatus, EscapesControlCharactersInNames) {
    const std::string u = "redis://127.0.0.1:" + std::to_string(shared_redis().port());
    const std::string name = "evil\n\x1b[31mred\x07\xc2\x9b" + dlock::test::unique_name("cc");
    auto r = run_cli({"status", "--url", u, name});
    EXPECT_EQ(r.status, not_held) << r.err;
    for (const char raw : {'\x1b', '\x07'}) EXPECT_EQ(r.out.find(raw), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("lock \"evil\\n\\x1b[31mred\\x07\\u009b"), std::string::npos) << r.out;
    // Held, so the state line is there too; every line starts as the view lays it out.
    dlock::redis::client holder({.url = u});
    auto held = holder.acquire(name, {.wait = 10s});
    r = run_cli({"status", "--url", u, name});
    EXPECT_EQ(r.status, ok) << r.err;
    for (std::size_t start = 0; start < r.out.size();) {
        const auto end = r.out.find('\n', start);
        const auto line = r.out.substr(start, end - start);
        EXPECT_TRUE(line.starts_with("lock \"") || line.starts_with("  ")) << line;
        start = end == std::string::npos ? r.out.size() : end + 1;
    }
    // JSON escapes them itself; a name that is not UTF-8 is still printed, not an error.
    r = run_cli({"status", "--json", "--url", u, name});
    EXPECT_EQ(r.status, ok) << r.err;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
    r = run_cli({"status", "--json", "--url", u, "bad\xff" + dlock::test::unique_name("utf")});
    EXPECT_EQ(r.status, not_held) << r.err;
}

// --- messages that name the right cause ----------------------------------------------------------

TEST(CliMessages, NameTheRightCause) {
    // An HTTP server on the port: not a Redis server.
    dlock::test::fake_server http(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>no</html>");
    const std::string web = http.url();
    auto r = run_cli({"run", "--url", web, "n", "--", "true"});
    EXPECT_EQ(r.status, server_error) << r.err;
    EXPECT_NE(r.err.find("not a Redis server (the reply looks like HTTP"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("reply type byte"), std::string::npos) << r.err;
    expect_one_line(r, "http");

    // A read-only replica: says so, not "WRONGTYPE fence counter".
    dlock::test::redis_server primary;
    dlock::test::redis_server replica(
        {.extra_args = {"--replicaof", "127.0.0.1", std::to_string(primary.port())}});
    r = run_cli({"run", "--url", replica.url(), dlock::test::unique_name("ro"), "--", "true"});
    EXPECT_EQ(r.status, server_error) << r.err;
    EXPECT_NE(r.err.find("is a read-only replica"), std::string::npos) << r.err;
    // The library's own message names it too (not only the CLI's wording around it).
    EXPECT_NE(r.err.find("this server is a read-only replica (locks need the primary)"),
              std::string::npos)
        << r.err;
    expect_one_line(r, "replica");

    // An ACL user that may not run EVALSHA: the permission, not the password.
    dlock::test::redis_server server;
    EXPECT_EQ(server.command({"ACL", "SETUSER", "limited", "on", ">L1mitedPw", "~*", "&*", "+@all",
                              "-evalsha", "-eval"}),
              "OK");
    r = run_cli({"run", "--url",
                 "redis://limited:L1mitedPw@127.0.0.1:" + std::to_string(server.port()), "n", "--",
                 "true"});
    EXPECT_EQ(r.status, auth_failed) << r.err;
    EXPECT_NE(r.err.find("lacks a permission dlock needs"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("give the password"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("L1mitedPw"), std::string::npos) << r.err;
    expect_one_line(r, "noperm");

    // A Redlock list with a unix:// server in it: named as such.
    r = run_cli({"run", "--url", "redlock://127.0.0.1:1,unix:///tmp/r.sock,127.0.0.1:3", "n", "--",
                 "true"});
    EXPECT_EQ(r.status, usage) << r.err;
    EXPECT_NE(r.err.find("each server is host:port"), std::string::npos) << r.err;
    expect_one_line(r, "redlock unix");
}

// --- credentials on every Redis scheme, and the minimal ACL
// ----------------------------------------

/// The minimal ACL of docs/cli.md ("Redis ACL"), for the key prefix "dlock".
const std::vector<std::string> minimal_acl = {"resetkeys",
                                              "~dlock:*",
                                              "resetchannels",
                                              "&dlock:*",
                                              "&__redis__:invalidate",
                                              "-@all",
                                              "+ping",
                                              "+select",
                                              "+auth",
                                              "+hello",
                                              "+client|setname",
                                              "+client|id",
                                              "+client|tracking",
                                              "+info",
                                              "+time",
                                              "+fcall",
                                              "+function|load",
                                              "+eval",
                                              "+evalsha",
                                              "+script|load",
                                              "+subscribe",
                                              "+unsubscribe",
                                              "+publish",
                                              "+pubsub|numsub",
                                              "+get",
                                              "+set",
                                              "+del",
                                              "+exists",
                                              "+type",
                                              "+incr",
                                              "+pttl",
                                              "+pexpire",
                                              "+pexpireat",
                                              "+hget",
                                              "+hset",
                                              "+hdel",
                                              "+hexists",
                                              "+hgetall",
                                              "+hincrby",
                                              "+hvals",
                                              "+zadd",
                                              "+zrem",
                                              "+zcard",
                                              "+zcount",
                                              "+zrank",
                                              "+zscore",
                                              "+zrange",
                                              "+zrangebyscore",
                                              "+zremrangebyscore"};

void add_locker(const dlock::test::redis_server& server, const std::string& password) {
    std::vector<std::string> args = {"ACL", "SETUSER", "locker", "on", ">" + password};
    args.insert(args.end(), minimal_acl.begin(), minimal_acl.end());
    ASSERT_EQ(server.command(args), "OK");
}

class temp_file {
public:
    explicit temp_file(const std::string& text) {
        std::string templ = "/tmp/dlock-cli-input.XXXXXX";
        const int fd = ::mkstemp(templ.data());
        if (fd < 0) throw std::runtime_error("mkstemp failed");
        (void)::write(fd, text.data(), text.size());
        ::fchmod(fd, 0600);
        ::close(fd);
        path_ = templ;
    }
    ~temp_file() { ::unlink(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(CliAcl, AMinimalAclUserRunsEveryKindOnEveryRedisScheme) {
    const std::string pw = "Acl5ecretPw";
    const std::string sock = "/tmp/dlock-acl-" + std::to_string(::getpid()) + ".sock";
    dlock::test::redis_server server(
        {.extra_args = {"--unixsocket", sock, "--unixsocketperm", "700"}});
    add_locker(server, pw);
    temp_file password_file(pw + "\n");
    const std::string at = "127.0.0.1:" + std::to_string(server.port());
    struct way {
        std::string url;
        std::vector<std::string> extra;  // options after --url
        std::vector<std::string> env;
    };
    const std::vector<way> ways = {
        {"redis://locker:" + pw + "@" + at, {}, {}},
        {"redis://" + at + "/0?user=locker&password=" + pw, {}, {}},
        {"redis://locker:@" + at, {"--password-file", password_file.path()}, {}},
        {"unix://locker:" + pw + "@" + sock, {}, {}},
        {"unix://" + sock + "?user=locker", {}, {"DLOCK_PASSWORD=" + pw}},
        {"unix://locker:@" + sock + "?db=0", {"--password-file", password_file.path()}, {}},
    };
    for (const auto& w : ways) {
        for (const std::vector<std::string>& kind : std::vector<std::vector<std::string>>{
                 {}, {"--fair"}, {"--shared"}, {"--write"}, {"--permits", "2"}}) {
            std::vector<std::string> args = {"run", "--url", w.url};
            args.insert(args.end(), w.extra.begin(), w.extra.end());
            args.insert(args.end(), kind.begin(), kind.end());
            const auto name = dlock::test::unique_name("acl");
            args.insert(args.end(), {"-v", name, "--", "true"});
            const auto r = run_cli(args, {.env = w.env});
            EXPECT_EQ(r.status, ok) << joined(args) << "\n" << r.err;
            expect_no_secret(r, joined(args), pw);
            std::vector<std::string> st = {"status", "--url", w.url};
            st.insert(st.end(), w.extra.begin(), w.extra.end());
            st.push_back(name);
            const auto s = run_cli(st, {.env = w.env});
            EXPECT_EQ(s.status, not_held) << joined(st) << "\n" << s.err;
            expect_no_secret(s, joined(st), pw);
        }
    }
    // A key outside the prefix is refused to that user: the ACL is really in force.
    auto r = run_cli({"run", "--key-prefix", "other", "--url", "redis://locker:" + pw + "@" + at,
                      "n", "--", "true"});
    EXPECT_EQ(r.status, auth_failed) << r.err;
    EXPECT_NE(r.err.find("NOPERM"), std::string::npos) << r.err;
    // Redlock: the same user on three servers.
    dlock::test::redis_fleet fleet(3);
    std::string hosts;
    for (std::size_t i = 0; i < 3; ++i) {
        add_locker(fleet[i], pw);
        hosts += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(fleet[i].port());
    }
    for (const std::string& u : {"redlock://locker:" + pw + "@" + hosts,
                                 "redlock://" + hosts + "?user=locker&password=" + pw}) {
        r = run_cli({"run", "--url", u, dlock::test::unique_name("acl-rl"), "--", "true"});
        EXPECT_EQ(r.status, ok) << u << "\n" << r.err;
        expect_no_secret(r, "redlock", pw);
        const auto s = run_cli({"status", "--url", u, "n"});
        EXPECT_EQ(s.status, not_held) << s.err;
        expect_no_secret(s, "redlock status", pw);
    }
}

TEST(CliAcl, EveryLockTypeOfTheLibraryRunsAsTheMinimalUser) {
    const std::string pw = "Acl5ecretPw";
    dlock::test::redis_server server;
    add_locker(server, pw);
    dlock::redis::client client(
        {.url = "redis://locker:" + pw + "@127.0.0.1:" + std::to_string(server.port())});
    const auto name = [](const char* kind) { return dlock::test::unique_name(kind); };
    {
        dlock::mutex m(client, name("m"));
        std::unique_lock lock(m);
        EXPECT_GT(m.fencing_token(), 0u);
    }
    {
        dlock::fair_mutex m(client, name("f"));
        std::unique_lock lock(m);
    }
    {
        dlock::recursive_mutex m(client, name("r"));
        std::unique_lock outer(m);
        std::unique_lock inner(m);
    }
    {
        dlock::shared_mutex m(client, name("s"));
        { std::shared_lock reader(m); }
        std::unique_lock writer(m);
    }
    {
        dlock::counting_semaphore sem(client, name("sem"), 2);
        sem.acquire();
        EXPECT_TRUE(sem.try_acquire());
        sem.release();
        sem.release();
    }
    // Waiting and being woken (SUBSCRIBE, PUBLISH from the release script) as that user too.
    // (The delay only makes the waiter likely to wait; the check holds either way.)
    const auto shared = name("wait");
    auto held = client.acquire(shared, {.wait = 10s});
    std::jthread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        held.release();
    });
    dlock::mutex second(client, shared);
    EXPECT_TRUE(second.try_lock_for(20s));
    second.unlock();
}

TEST(CliAcl, StatusWatchRunsAsTheMinimalUser) {
    const std::string pw = "Acl5ecretPw";
    dlock::test::redis_server server;
    add_locker(server, pw);
    const std::string u = "redis://locker:" + pw + "@127.0.0.1:" + std::to_string(server.port());
    cli_process watch({"status", "--watch", "--url", u, "w"});
    ASSERT_TRUE(
        dlock::test::eventually([&] { return watch.out().find("free") != std::string::npos; }, 20s))
        << watch.err();
    EXPECT_TRUE(watch.running()) << watch.err();
    watch.send(SIGINT);
    const auto r = watch.wait(20s);
    EXPECT_EQ(r.err.find("NOPERM"), std::string::npos) << r.err;
    expect_no_secret(r, "watch", pw);
}

// --- --lease on ZooKeeper
// -------------------------------------------------------------------------

TEST(CliZk, LeaseIsRefusedNotIgnored) {
    const std::string zk = "zk://127.0.0.1:" + std::to_string(dlock::test::free_port()) + "/x";
    const auto r = run_cli({"run", "--lease", "5s", "--url", zk, "n", "--", "true"});
#if DLOCK_HAS_ZOOKEEPER
    EXPECT_EQ(r.status, unavailable) << r.err;
    EXPECT_NE(r.err.find("--lease does not apply to zk://"), std::string::npos) << r.err;
#else
    EXPECT_EQ(r.status, unavailable) << r.err;
#endif
    expect_one_line(r, "zk --lease");
    const auto help = run_cli({"run", "--help"});
    EXPECT_NE(help.out.find("refused on zk://, where the session timeout decides"),
              std::string::npos)
        << help.out;
#if DLOCK_HAS_ZOOKEEPER
    // --key-prefix, the other Redis-only option, is refused too rather than ignored.
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"run", "--key-prefix", "p", "--url", zk, "n", "--", "true"},
             {"status", "--key-prefix", "p", "--url", zk, "n"}}) {
        const auto k = run_cli(args);
        EXPECT_EQ(k.status, unavailable) << k.err;
        EXPECT_NE(k.err.find("--key-prefix does not apply to zk://"), std::string::npos) << k.err;
        expect_one_line(k, joined(args));
    }
#endif
}

}  // namespace

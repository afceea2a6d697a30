// `dlock status --watch`: the live view as a person uses it, in a real terminal (tmux: keys sent
// with send-keys, the screen read with capture-pane), and the one-line-per-change form a script
// reads when stdout is not a terminal. Every wait is on what the screen or the output shows, with
// a deadline.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>
#endif

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "redis_fleet.hpp"
#include "redis_server.hpp"
#include "test_env.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif
#if DLOCK_HAS_ETCD
#include "etcd_server.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using dlock::test::cli_binary;
using dlock::test::cli_process;
using dlock::test::eventually;
using dlock::test::run_cli;
using dlock::test::vote_bound;

/// Single quotes for sh.
std::string sh_quoted(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') {
            out += "'\\''";
        } else {
            out += c;
        }
    }
    return out + "'";
}

/// The output of an sh command line (stderr included); "" if it could not run.
std::string shell(const std::string& command) {
    std::string out;
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (p == nullptr) return out;
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    ::pclose(p);
    return out;
}

/// A tmux server of its own (its own socket: nothing a person runs is touched), with one session
/// of windows running an interactive bash each.
class tmux {
public:
    tmux() : socket_("dlock-watch-" + std::to_string(::getpid())) {
        run("new-session -d -s w -x 200 -y 40 " + sh_quoted(bash_));
    }
    ~tmux() { shell("tmux -L " + socket_ + " kill-server"); }
    tmux(const tmux&) = delete;
    tmux& operator=(const tmux&) = delete;

    std::string run(const std::string& args) const {
        return shell("tmux -L " + socket_ + " -f /dev/null " + args);
    }
    /// Opens window `index` with a shell.
    void new_window(int index) const {
        run("new-window -d -t w:" + std::to_string(index) + " " + sh_quoted(bash_));
    }
    /// Types `text` into window `index` and presses Enter.
    void type(int index, const std::string& text) const {
        run("send-keys -t w:" + std::to_string(index) + " -l " + sh_quoted(text));
        run("send-keys -t w:" + std::to_string(index) + " Enter");
    }
    /// Presses a key ("C-c", "C-d") in window `index`.
    void key(int index, const std::string& key) const {
        run("send-keys -t w:" + std::to_string(index) + " " + key);
    }
    /// What window `index` shows now.
    std::string screen(int index) const {
        return run("capture-pane -p -t w:" + std::to_string(index));
    }
    /// Waits until window `index` shows a match of `pattern`; false at the deadline.
    bool shows(int index, const std::string& pattern, std::chrono::milliseconds timeout = 10s) {
        const std::regex re(pattern);
        return eventually([&] { return std::regex_search(last_ = screen(index), re); }, timeout);
    }
    /// The screen read by the last shows().
    const std::string& last() const { return last_; }

private:
    std::string socket_;
    std::string bash_ = "env PS1='watch-test$ ' TERM=xterm bash --norc --noprofile -i";
    std::string last_;
};

bool have_tmux() { return shell("command -v tmux").find("tmux") != std::string::npos; }

TEST(StatusWatch, LiveViewInATerminalFollowsAcquireQueueHandOffAndEndsOnCtrlC) {
    if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup.sh installs it)";
    dlock::test::redis_server server;
    const std::string url = server.url();
    const std::string name = "report";
    const std::string dlock = sh_quoted(cli_binary());
    tmux t;
    ASSERT_TRUE(t.shows(0, "watch-test\\$")) << t.last();
    t.type(0, dlock + " status --watch " + name + " --url " + url);
    ASSERT_TRUE(t.shows(0, "state: +free")) << t.last();
    EXPECT_TRUE(t.shows(0, "fencing counter: +none")) << t.last();
    EXPECT_TRUE(t.shows(0, "Ctrl-C ends")) << t.last();
    // The cursor is hidden while the view is drawn.
    EXPECT_EQ(t.run("display -p -t w:0 '#{cursor_flag}'"), "0\n");
    // A counter above the server's clock in microseconds (the year 2128): grants count from it
    // one by one (a token is max(counter + 1, the clock), docs/redis-lock.md).
    {
        dlock::redis::client redis({.url = url});
        redis.command({"SET", redis.fence_key(name), "5000000000000000"});
    }
    EXPECT_TRUE(t.shows(0, "fencing counter: +5000000000000000 ")) << t.last();

    // Another terminal takes the (fair) lock and keeps it while `cat` runs.
    t.new_window(1);
    ASSERT_TRUE(t.shows(1, "watch-test\\$")) << t.last();
    t.type(1, dlock + " run --fair --url " + url + " " + name + " -- cat");
    ASSERT_TRUE(t.shows(0, "state: +held, lease (2[0-9]|30)s left")) << t.last();
    EXPECT_TRUE(t.shows(0, "fencing counter: +5000000000000001 ")) << t.last();
    EXPECT_TRUE(t.shows(0, "waiters: +0 queued")) << t.last();
    // The lease left counts down between changes (drawn locally, from the last read).
    const auto lease_shown = [&] {
        std::smatch m;
        const std::string screen = t.screen(0);
        return std::regex_search(screen, m, std::regex("lease ([0-9]+)s left")) ? std::stoi(m[1])
                                                                                : -1;
    };
    const int first = lease_shown();
    EXPECT_TRUE(eventually([&] { return lease_shown() == first - 1; }, 10s)) << first;

    // A third queues behind it.
    t.new_window(2);
    ASSERT_TRUE(t.shows(2, "watch-test\\$")) << t.last();
    t.type(2, dlock + " run --fair --url " + url + " " + name + " -- cat");
    ASSERT_TRUE(t.shows(0, "waiters: +1 queued")) << t.last();
    EXPECT_TRUE(t.shows(0, "fencing counter: +5000000000000001 ")) << t.last();

    // The holder ends (Ctrl-D ends its cat): the lock is handed to the waiter, the next token.
    t.key(1, "C-d");
    ASSERT_TRUE(t.shows(0, "fencing counter: +5000000000000002 ")) << t.last();
    EXPECT_TRUE(t.shows(0, "waiters: +0 queued")) << t.last();
    EXPECT_TRUE(t.shows(0, "state: +held")) << t.last();

    // The waiter-turned-holder ends: free, the counter stays.
    t.key(2, "C-d");
    ASSERT_TRUE(t.shows(0, "state: +free")) << t.last();
    EXPECT_TRUE(t.shows(0, "fencing counter: +5000000000000002 ")) << t.last();

    // Ctrl-C ends the watch: exit status 0, the prompt back, the cursor shown again.
    t.key(0, "C-c");
    ASSERT_TRUE(t.shows(0, "Ctrl-C ends(.|\\n)*\\nwatch-test\\$ *(\\n|$)")) << t.last();
    t.type(0, "echo \"exit=$?\"");
    EXPECT_TRUE(t.shows(0, "\\nexit=0")) << t.last();
    EXPECT_EQ(t.run("display -p -t w:0 '#{cursor_flag}'"), "1\n");
}

/// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

/// Waits until `p` has written `n` lines; false at the deadline.
bool has_lines(const cli_process& p, std::size_t n) {
    return eventually([&] { return lines_of(p.out()).size() >= n; }, 10s);
}

/// Waits until the last line `p` has written contains `text`; false at the deadline.
bool last_line_has(const cli_process& p, const std::string& text) {
    return eventually(
        [&] {
            const auto lines = lines_of(p.out());
            return !lines.empty() && lines.back().find(text) != std::string::npos;
        },
        10s);
}

TEST(StatusWatch, WithoutATerminalPrintsOneLinePerChange) {
    dlock::test::redis_server server;
    const std::string name = "job";
    cli_process watch({"status", "--watch", name, "--url", server.url()});
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out();

    dlock::redis::client client({.url = server.url()});
    std::string token;  // the grant's fencing token, as the view shows the counter
    {
        auto held = client.acquire(name);
        token = std::to_string(held.fencing_token());
        ASSERT_TRUE(has_lines(watch, 2)) << watch.out();
    }
    ASSERT_TRUE(has_lines(watch, 3)) << watch.out();
    // A lease that runs out: nothing is published when a key expires; the watch reads the lock
    // again when the lease it showed is due.
    server.command({"SET", client.lock_key(name), "someone", "PX", "300"});
    ASSERT_TRUE(has_lines(watch, 5)) << watch.out();

    watch.send(SIGINT);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 5u) << r.out;
    const std::regex time("^[0-9]{2}:[0-9]{2}:[0-9]{2} job: ");
    for (const auto& line : lines) EXPECT_TRUE(std::regex_search(line, time)) << line;
    EXPECT_NE(lines[0].find("job: free; fencing counter none; waiters 0"), std::string::npos)
        << lines[0];
    EXPECT_NE(lines[1].find("job: held, lease "), std::string::npos) << lines[1];
    EXPECT_NE(lines[1].find("; fencing counter " + token + "; waiters 0"), std::string::npos)
        << lines[1];
    EXPECT_NE(lines[2].find("job: free; fencing counter " + token + ";"), std::string::npos)
        << lines[2];
    EXPECT_NE(lines[3].find("job: held, lease "), std::string::npos) << lines[3];
    EXPECT_NE(lines[4].find("job: free; fencing counter " + token + ";"), std::string::npos)
        << lines[4];
}

TEST(StatusWatch, WithoutClientTrackingFallsBackToTheReleaseChannelAndSeesAcquires) {
    dlock::test::redis_server server;
    // An ACL that allows everything but CLIENT TRACKING.
    server.command(
        {"ACL", "SETUSER", "default", "on", "nopass", "~*", "&*", "+@all", "-client|tracking"});
    cli_process watch({"status", "--watch", "fb", "--url", server.url()});
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out() << watch.err();
    dlock::redis::client client({.url = server.url()});
    std::string token;
    {
        auto held = client.acquire("fb");
        token = std::to_string(held.fencing_token());
        EXPECT_TRUE(last_line_has(watch, "fb: held, lease ")) << watch.out() << watch.err();
    }
    EXPECT_TRUE(last_line_has(watch, "fb: free; fencing counter " + token + ";")) << watch.out();
    watch.send(SIGINT);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(lines_of(r.out).size(), 3u) << r.out;
}

TEST(StatusWatch, JsonWithoutATerminalIsOneObjectPerLine) {
    dlock::test::redis_server server;
    cli_process watch({"status", "--watch", "--json", "j", "--url", server.url()});
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out();
    dlock::redis::client client({.url = server.url()});
    auto held = client.acquire("j");
    const auto token = std::to_string(held.fencing_token());
    ASSERT_TRUE(has_lines(watch, 2)) << watch.out();
    watch.send(SIGTERM);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 2u) << r.out;
    EXPECT_NE(lines[0].find("\"held\":false"), std::string::npos) << lines[0];
    EXPECT_NE(lines[1].find("\"held\":true"), std::string::npos) << lines[1];
    EXPECT_NE(lines[1].find("\"fencing_counter\":" + token), std::string::npos) << lines[1];
}

TEST(StatusWatch, RedlockWatchSeesEveryServer) {
    dlock::test::redis_fleet fleet(3);
    std::string url = "redlock://";
    for (const auto& u : fleet.urls()) {
        url += (url.back() == '/' ? "" : ",") + u.substr(std::string("redis://").size());
    }
    cli_process watch({"status", "--watch", "rl", "--url", url});
    std::string token;  // the holder's fencing token, written back to every server
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out() << watch.err();
    EXPECT_NE(watch.out().find("rl: free (held on 0 of 3 servers; quorum 2); fencing counter none"),
              std::string::npos)
        << watch.out();
    // The servers change one after another; the view follows each: wait for where it ends.
    {
        cli_process holder({"run", "--node-timeout", vote_bound(), "--url", url, "rl", "--", "sh",
                            "-c", "echo $DLOCK_FENCING_TOKEN; sleep 60"});
        EXPECT_TRUE(last_line_has(watch, "rl: held on 3 of 3 servers (quorum 2)")) << watch.out();
        EXPECT_TRUE(eventually([&] { return holder.out().ends_with("\n"); }, 10s));
        token = holder.out().substr(0, holder.out().size() - 1);
        holder.send(SIGTERM);
        holder.wait(10s);
    }
    EXPECT_TRUE(last_line_has(
        watch, "rl: free (held on 0 of 3 servers; quorum 2); fencing counter " + token))
        << watch.out();
    watch.send(SIGINT);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
}

TEST(StatusWatch, BadInputIsAClearErrorNotAWatch) {
    dlock::test::redis_server server;
    auto r = run_cli({"status", "--watch", "", "--url", server.url()});
    EXPECT_EQ(r.status, 64) << r.err;
    EXPECT_NE(r.err.find("dlock"), std::string::npos) << r.err;
    r = run_cli({"status", "--watch", "n", "--url", "nosuch://x"});
    EXPECT_EQ(r.status, 64) << r.err;
    // Nothing listens there: the usual "cannot connect" status, and no password in the text.
    const auto port = std::to_string(dlock::test::free_port());
    r = run_cli({"status", "--watch", "n", "--url", "redis://:s3cret@127.0.0.1:" + port});
    EXPECT_EQ(r.status, 74) << r.err;
    EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
}

#if DLOCK_HAS_ZOOKEEPER
TEST(StatusWatch, ZooKeeperWatchSeesAcquireAndRelease) {
    const auto zk = dlock::test::shared_zk().url("/dlock-watch");
    const auto name = "zk-" + std::to_string(::getpid());
    cli_process watch({"status", "--watch", name, "--url", zk});
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out() << watch.err();
    EXPECT_NE(watch.out().find(": free; fencing counter none"), std::string::npos) << watch.out();
    dlock::zk::client client({.url = zk});
    {
        auto held = client.acquire(name);
        const std::string token = std::to_string(held.fencing_token());
        EXPECT_TRUE(last_line_has(watch,
                                  ": held (while the holder's ZooKeeper session lives); "
                                  "fencing counter " +
                                      token))
            << watch.out();
    }
    // The release may be read half-done (the holder's node is gone while the view reads it);
    // the view ends at free.
    EXPECT_TRUE(last_line_has(watch, ": free;")) << watch.out();
    watch.send(SIGINT);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
}
#endif  // DLOCK_HAS_ZOOKEEPER

#if DLOCK_HAS_ETCD
TEST(StatusWatch, EtcdWatchSeesAcquireAndRelease) {
    const auto etcd = dlock::test::shared_etcd().url();
    const auto name = "etcd-" + std::to_string(::getpid());
    cli_process watch({"status", "--watch", "--connect-timeout",
                       dlock::test::etcd_connect_timeout(), name, "--url", etcd});
    ASSERT_TRUE(has_lines(watch, 1)) << watch.out() << watch.err();
    EXPECT_NE(watch.out().find(": free; fencing counter none"), std::string::npos) << watch.out();
    dlock::etcd::client client(
        {.url = etcd, .connect_timeout = dlock::test::scaled(std::chrono::seconds(10))});
    {
        auto held = client.acquire(name);
        const std::string token = std::to_string(held.fencing_token());
        EXPECT_TRUE(last_line_has(watch,
                                  ": held (while the holder's etcd lease lives); "
                                  "fencing counter " +
                                      token))
            << watch.out();
    }
    EXPECT_TRUE(last_line_has(watch, ": free;")) << watch.out();
    watch.send(SIGINT);
    const auto r = watch.wait(10s);
    EXPECT_EQ(r.status, 0) << r.err;
}
#endif  // DLOCK_HAS_ETCD

}  // namespace

// A release that hands the lock on gets the next holder's grant written before the releaser's
// reply (scripts.hpp, script_batch::messages_first): a PING goes ahead of the release of a
// holder that waited. What redis-server does with it, timed by the kernel's receive timestamps,
// and that dlock sends it where it should (and only there), seen with MONITOR.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "redis/scripts.hpp"
#include "redis_tap.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using dlock::test::runs_script;

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::unique_name;

/// A raw RESP connection whose reads carry the kernel's receive time (SO_TIMESTAMPNS): on
/// loopback, the moment the server's write() put the bytes in our socket.
class stamped_socket {
public:
    explicit stamped_socket(std::uint16_t port)
        : fd_(dlock::test::tap_detail::connect_local(port)) {
        const int on = 1;
        if (::setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
            throw std::runtime_error("SO_TIMESTAMPNS refused");
    }
    ~stamped_socket() { ::close(fd_); }
    stamped_socket(const stamped_socket&) = delete;
    stamped_socket& operator=(const stamped_socket&) = delete;

    void send(const std::string& bytes) {
        ASSERT_TRUE(dlock::test::tap_detail::write_all(fd_, bytes.data(), bytes.size()));
    }

    /// Reads until `want` bytes arrived (the replies expected, whole): what arrived, and the
    /// receive time of the last read. Empty after 5 s.
    std::pair<std::string, std::int64_t> read(std::size_t want) {
        std::string got;
        std::int64_t at = 0;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char buf[4096];
            alignas(cmsghdr) char control[256];
            iovec io{buf, sizeof buf};
            msghdr msg{};
            msg.msg_iov = &io;
            msg.msg_iovlen = 1;
            msg.msg_control = control;
            msg.msg_controllen = sizeof control;
            const auto n = ::recvmsg(fd_, &msg, 0);
            if (n <= 0) return {};
            got.append(buf, static_cast<std::size_t>(n));
            for (auto* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                    timespec ts{};
                    std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    at = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
                }
            }
        }
        if (got.size() < want) return {};
        return {got, at};
    }

private:
    int fd_;
};

std::string resp(const std::vector<std::string>& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return out;
}

// The property the PING rests on, in both directions: without it redis-server writes a script's
// reply before the message the script published; with a PING ahead, the message goes first.
// If a later Redis wrote the message first anyway, the first half fails: the PING is no longer
// needed there.
TEST(RedisGrantFirst, RedisWritesThePublishedMessageFirstWhenAPingWentAhead) {
    const auto port = dlock::test::shared_redis().port();
    const auto channel = unique_name("grant-first");
    stamped_socket subscriber(port), caller(port);
    subscriber.send(resp({"SUBSCRIBE", channel}));
    const auto confirmed = "*3\r\n$9\r\nsubscribe\r\n$" + std::to_string(channel.size()) + "\r\n" +
                           channel + "\r\n:1\r\n";
    ASSERT_EQ(subscriber.read(confirmed.size()).first, confirmed);

    // The kernel turns receive timestamps on for the whole system a little after the first
    // socket asks (net_enable_timestamp defers it to a work queue); until then reads carry none.
    // On a busy machine that can outlast the rounds below: wait until a reply is stamped.
    ASSERT_TRUE(eventually(
        [&] {
            caller.send(resp({"PING"}));
            const auto [pong, at] = caller.read(7);
            return pong == "+PONG\r\n" && at != 0;
        },
        10s))
        << "no receive timestamps";

    const auto publish =
        resp({"EVAL", "redis.call('PUBLISH', KEYS[1], 'granted'); return 1", "1", channel});
    const auto message = "*3\r\n$7\r\nmessage\r\n$" + std::to_string(channel.size()) + "\r\n" +
                         channel + "\r\n$7\r\ngranted\r\n";
    for (int round = 0; round < 5; ++round) {
        for (const bool ping : {false, true}) {
            SCOPED_TRACE(std::string(ping ? "with" : "without") + " a PING, round " +
                         std::to_string(round));
            caller.send((ping ? resp({"PING"}) : std::string()) + publish);
            const std::string replies = ping ? "+PONG\r\n:1\r\n" : ":1\r\n";
            const auto [reply, reply_at] = caller.read(replies.size());
            const auto [heard, heard_at] = subscriber.read(message.size());
            ASSERT_EQ(reply, replies);
            ASSERT_EQ(heard, message);
            if (ping) {
                EXPECT_LT(heard_at, reply_at) << "the reply was written first";
            } else {
                EXPECT_LT(reply_at, heard_at) << "the message was written first";
            }
        }
    }
}

/// The "[<db> <address>]" of a MONITOR line: who sent it.
std::string sender(const std::string& line) {
    const auto open = line.find('[');
    return line.substr(open, line.find(']', open) - open + 1);
}

/// For each release of `key` in `lines`, in order: whether the same connection's command just
/// before it was a PING.
std::vector<bool> releases_behind_a_ping(const std::vector<std::string>& lines,
                                         std::string_view script, const std::string& key) {
    const auto* release = dlock::redis::detail::find_script(script);
    std::vector<bool> out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (!runs_script(lines[i], release->function, key)) continue;
        bool ping = false;
        for (std::size_t j = i; j-- > 0;) {
            if (sender(lines[j]) != sender(lines[i])) continue;
            ping = lines[j].ends_with("\"PING\"");
            break;
        }
        out.push_back(ping);
    }
    return out;
}

// A holder that did not wait releases with no PING (the uncontended path keeps its commands);
// one that waited, by hand-off or by an attempt after a release, sends one ahead.
template <class Lock>
void check_ping_ahead_of_releases_after_a_wait(std::string_view release_script) {
    auto& server = dlock::test::shared_redis();
    dlock::redis::client first({.url = server.url()}), second({.url = server.url()}),
        third({.url = server.url()});
    const auto name = unique_name("grant-first");
    const auto key = first.lock_key(name);
    dlock::test::monitor_tap tap(server.port());

    Lock alone(first, name, {.lease = 30s});
    alone.lock();  // nobody waits: no PING
    alone.unlock();

    Lock holder(first, name, {.lease = 30s});
    holder.lock();
    std::atomic<int> granted{0};
    std::atomic<bool> second_may_go{false};
    std::jthread waiter2([&] {
        Lock m(second, name, {.lease = 30s});
        m.lock();
        ++granted;
        while (!second_may_go) std::this_thread::sleep_for(1ms);
        m.unlock();
    });
    ASSERT_TRUE(eventually([&] { return first.inspect(name).waiters == 1; }, 20s));
    holder.unlock();  // did not wait: no PING
    ASSERT_TRUE(eventually([&] { return granted.load() == 1; }, 20s));
    std::jthread waiter3([&] {
        Lock m(third, name, {.lease = 30s});
        m.lock();
        ++granted;
        m.unlock();  // waited: a PING
    });
    ASSERT_TRUE(eventually([&] { return first.inspect(name).waiters == 1; }, 20s));
    second_may_go = true;  // waited: a PING
    ASSERT_TRUE(eventually([&] { return granted.load() == 2; }, 20s));
    waiter2.join();
    waiter3.join();
    const auto marker = unique_name("end-of-trace");
    first.command({"ECHO", marker});
    const auto pings = releases_behind_a_ping(tap.lines_until(marker, 20s), release_script, key);
    EXPECT_EQ(pings, (std::vector<bool>{false, false, true, true}));
}

TEST(RedisGrantFirst, AHolderThatWaitedSendsAPingAheadOfItsRelease) {
    check_ping_ahead_of_releases_after_a_wait<dlock::mutex>("release");
}

TEST(RedisGrantFirst, AFairMutexHolderThatWaitedSendsAPingAheadOfItsRelease) {
    check_ping_ahead_of_releases_after_a_wait<dlock::fair_mutex>("fair_release");
}

}  // namespace

// The client's subscriber (src/redis/subscriber.*) driven directly against a private redis-server:
// the test thread plays the client's background thread, so who is woken by which message, and
// what the loop is asked to do after the connection drops, are checked exactly.
#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include "redis/listener.hpp"
#include "redis/subscriber.hpp"
#include "redis/url.hpp"
#include "redis_server.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::redis::detail::fixed_address;
using dlock::redis::detail::node;
using dlock::redis::detail::subscriber;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;
using wake_mode = subscriber::wake_mode;

std::shared_ptr<node> node_for(const dlock::test::redis_server& server) {
    std::error_code ec;
    auto endpoint = dlock::detail::parse_redis_url(server.url(), ec);
    EXPECT_FALSE(ec) << ec.message();
    return std::make_shared<node>(std::make_unique<fixed_address>(endpoint), 1000ms, 1000ms);
}

/// One pass of the client's background thread over `sub` (service, poll, on_readable): returns
/// the descriptor service() asked to poll (-1: none).
int step_loop(subscriber& sub, std::chrono::milliseconds poll_for) {
    const int fd = sub.service(steady::now(), steady::now() + 1s);
    if (fd < 0) {
        std::this_thread::sleep_for(poll_for);
        return fd;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(poll_for.count())) > 0) sub.on_readable();
    return fd;
}

/// Runs the subscriber the way the client's background thread does, from a thread of its own;
/// `step()` is one such pass, for tests that drive it by hand.
class driver {
public:
    explicit driver(const dlock::test::redis_server& server)
        : sub_({node_for(server)}, [](steady::time_point) {}) {}
    ~driver() { stop(); }

    subscriber& sub() { return sub_; }
    void start() {
        loop_ = std::jthread([this](std::stop_token stop) {
            while (!stop.stop_requested()) step(5ms);
        });
    }
    void stop() {
        if (loop_.joinable()) {
            loop_.request_stop();
            loop_.join();
        }
    }
    int step(std::chrono::milliseconds poll_for) { return step_loop(sub_, poll_for); }

private:
    subscriber sub_;
    std::jthread loop_;
};

/// A waiter thread: registers, waits for the subscription, then sleeps in wait() until woken;
/// afterwards `then` decides what the woken waiter does with its registration.
struct waiter {
    enum class then { give_up, granted, wait_again };
    std::atomic<bool> ready{false};
    std::atomic<int> wakeups{0};
    std::atomic<bool> release{false};  // set by the test: do `then` now
    std::atomic<bool> done{false};
    std::jthread thread;

    waiter(subscriber& sub, const std::string& channel, wake_mode mode, then what) {
        thread = std::jthread([this, &sub, channel, mode, what] {
            subscriber::registration reg(sub, channel, mode);
            reg.wait_subscribed(steady::now() + scaled(5s), {});
            auto seen = reg.generation();
            ready = true;
            const auto far = steady::now() + scaled(60s);  // no fallback wake-up in this test
            reg.wait(seen, far, {});
            ++wakeups;
            while (!release.load()) std::this_thread::sleep_for(1ms);
            if (what == then::granted) reg.granted();
            if (what == then::wait_again) {
                seen = reg.generation();
                reg.wait(seen, far, {});
                ++wakeups;
            }
            done = true;
        });
    }
};

TEST(RedisSubscriber, OneMessageWakesOneWaiterAndAGiveUpPassesItOn) {
    dlock::test::redis_server server;
    driver d(server);
    d.start();
    const auto channel = unique_name();
    waiter a(d.sub(), channel, wake_mode::one, waiter::then::give_up);
    waiter b(d.sub(), channel, wake_mode::one, waiter::then::give_up);
    ASSERT_TRUE(eventually([&] { return a.ready && b.ready; }, 10s));
    server.command({"PUBLISH", channel, "released"});
    ASSERT_TRUE(eventually([&] { return a.wakeups + b.wakeups >= 1; }, 5s));
    std::this_thread::sleep_for(scaled(300ms));  // a window in which a herd would show
    EXPECT_EQ(a.wakeups + b.wakeups, 1) << "one release, one waiter woken";
    auto& woken = a.wakeups == 1 ? a : b;
    auto& other = a.wakeups == 1 ? b : a;
    woken.release = true;  // gives up without the lock
    EXPECT_TRUE(eventually([&] { return other.wakeups == 1; }, 5s))
        << "the wake-up passes to the next waiter";
    other.release = true;
}

TEST(RedisSubscriber, AWakeUpIsUsedUpByAGrantOrAFailedAttempt) {
    dlock::test::redis_server server;
    driver d(server);
    d.start();
    for (const auto what : {waiter::then::granted, waiter::then::wait_again}) {
        SCOPED_TRACE(what == waiter::then::granted ? "granted" : "wait again");
        const auto channel = unique_name();
        waiter a(d.sub(), channel, wake_mode::one, what);
        waiter b(d.sub(), channel, wake_mode::one, what);
        ASSERT_TRUE(eventually([&] { return a.ready && b.ready; }, 10s));
        server.command({"PUBLISH", channel, "released"});
        ASSERT_TRUE(eventually([&] { return a.wakeups + b.wakeups >= 1; }, 5s));
        auto& woken = a.wakeups == 1 ? a : b;
        auto& other = a.wakeups == 1 ? b : a;
        woken.release = true;  // got the lock, or its attempt found the lock taken
        std::this_thread::sleep_for(scaled(300ms));
        EXPECT_EQ(a.wakeups + b.wakeups, 1) << "whoever holds the lock now publishes again";
        server.command({"PUBLISH", channel, "released"});
        EXPECT_TRUE(eventually([&] { return a.wakeups + b.wakeups == 2; }, 5s))
            << "the next release wakes one waiter again";
        if (what == waiter::then::granted) {
            EXPECT_EQ(other.wakeups, 1);
        }
        std::this_thread::sleep_for(scaled(100ms));
        EXPECT_EQ(a.wakeups + b.wakeups, 2);
        other.release = true;
        // Let whoever still sleeps go (a reconnect-style wake-up of everyone).
        while (!a.done || !b.done) {
            d.sub().wake_all();
            std::this_thread::sleep_for(1ms);
        }
    }
}

TEST(RedisSubscriber, WakeAllChannelsWakeEveryWaiter) {
    dlock::test::redis_server server;
    driver d(server);
    d.start();
    const auto channel = unique_name();
    waiter a(d.sub(), channel, wake_mode::all, waiter::then::give_up);
    waiter b(d.sub(), channel, wake_mode::one, waiter::then::give_up);
    ASSERT_TRUE(eventually([&] { return a.ready && b.ready; }, 10s));
    server.command({"PUBLISH", channel, "released"});
    EXPECT_TRUE(eventually([&] { return a.wakeups == 1 && b.wakeups == 1; }, 5s))
        << "with one wake-all waiter listed, a message wakes everyone";
    a.release = true;
    b.release = true;
}

// A hand-off channel is one per client and lock name: each keyed waiter sees only the grants that
// name its token, and keeps its own latest message (the per-waiter channel it replaces).
TEST(RedisSubscriber, AHandOffChannelGivesEachKeyedWaiterOnlyItsOwnGrants) {
    dlock::test::redis_server server;
    driver d(server);
    d.start();
    const auto channel = unique_name();
    subscriber::registration a(d.sub(), channel, wake_mode::all, "fair:c.aaaa");
    subscriber::registration b(d.sub(), channel, wake_mode::all, "fair:c.bbbb");
    a.wait_subscribed(steady::now() + scaled(10s), {});
    EXPECT_FALSE(a.subscribed_throughout()) << "registered before the channel was subscribed";
    const auto seen_a = a.generation();
    const auto seen_b = b.generation();
    server.command({"PUBLISH", channel, "granted 7 3 fair:c.bbbb"});
    b.wait(seen_b, steady::now() + scaled(5s), {});
    EXPECT_NE(b.generation(), seen_b) << "the grant naming b wakes b";
    EXPECT_EQ(b.last_message(), "granted 7 3 fair:c.bbbb");
    EXPECT_EQ(a.generation(), seen_a) << "a grant naming b is not a's";
    EXPECT_EQ(a.last_message(), "") << "a never sees b's grant";
    server.command({"PUBLISH", channel, "granted 8 2 fair:c.aaaa"});
    server.command({"PUBLISH", channel, "granted 9 5 fair:c.gone"});  // nobody waits with it
    a.wait(seen_a, steady::now() + scaled(5s), {});
    EXPECT_EQ(a.last_message(), "granted 8 2 fair:c.aaaa");
    EXPECT_EQ(b.last_message(), "granted 7 3 fair:c.bbbb") << "b keeps its own latest grant";
    // A registration made while the channel is subscribed is covered from then on; a subscriber
    // whose connection broke is not, until it subscribed again.
    subscriber::registration c(d.sub(), channel, wake_mode::all, "fair:c.cccc");
    EXPECT_TRUE(d.sub().subscribed(channel));
    EXPECT_TRUE(c.subscribed_throughout());
    server.command({"CLIENT", "KILL", "TYPE", "pubsub"});
    // Nobody reads for a waiter that is not waiting; its own wait() finds the broken connection.
    c.wait(c.generation(), steady::now() + scaled(5s), {});
    EXPECT_FALSE(c.subscribed_throughout()) << "a reconnect ends the unbroken subscription";
}

TEST(RedisSubscriber, NothingToDoAfterTheConnectionDropsWithOnlyLingeringChannels) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand: step()
    const auto channel = unique_name();
    {
        subscriber::registration reg(d.sub(), channel, wake_mode::one);
        ASSERT_TRUE(eventually(
            [&] {
                d.step(1ms);
                return server.command({"PUBSUB", "NUMSUB", channel}).ends_with("\n1");
            },
            10s));
    }  // the waiter gives up: the channel lingers, still subscribed
    d.step(1ms);
    server.kill9();
    // Nobody waits, so nothing reads the connection, and nothing is due before the linger ends:
    // no deadline in the past (the background thread would spin on it).
    EXPECT_EQ(d.step(1ms), -1);
    EXPECT_GT(d.sub().next_retry(), steady::now());
    // Then the channel goes (the drop is noticed, or the UNSUBSCRIBE goes to a dead connection)
    // and nothing is left to do.
    ASSERT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return d.sub().next_retry() == steady::time_point::max();
        },
        scaled(10s)));
    EXPECT_EQ(d.step(1ms), -1);
    server.start();
    EXPECT_EQ(d.step(1ms), -1) << "no reconnect while nobody waits";
    EXPECT_EQ(d.sub().next_retry(), steady::time_point::max());
    // A new waiter brings the connection back.
    subscriber::registration again(d.sub(), channel, wake_mode::one);
    EXPECT_TRUE(eventually([&] { return d.step(1ms) >= 0; }, 5s));
}

// A registration whose waiter read its generation before the channel's SUBSCRIBE was confirmed
// may have attempted before the server subscribed it, so a release in between published to
// nobody: the confirmation moves its generation (keyed, wake-one and wake-all waiters alike) and
// it attempts once more (docs/handoff-model.md, "What spin found"). One that reads it after the
// confirmation (the usual path: after wait_subscribed() returned) is not woken by it.
TEST(RedisSubscriber, AConfirmationWakesTheWaitersThatReadTheirGenerationBeforeIt) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand: step()
    const auto channel = unique_name();
    // The connection is up first (its opening wakes every waiter, as a reconnect does).
    subscriber::registration other(d.sub(), channel + "/other", wake_mode::one);
    ASSERT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return d.sub().subscribed(channel + "/other");
        },
        10s));
    subscriber::registration keyed(d.sub(), channel, wake_mode::all, "mutex:c.aaaa");
    subscriber::registration one(d.sub(), channel, wake_mode::one);
    subscriber::registration all(d.sub(), channel, wake_mode::all);
    // Their attempts ran now: nothing is subscribed yet (the SUBSCRIBE is not even sent).
    const auto seen_other = other.generation();
    const auto seen_keyed = keyed.generation();
    const auto seen_one = one.generation();
    const auto seen_all = all.generation();
    ASSERT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return d.sub().subscribed(channel);
        },
        10s));
    EXPECT_NE(keyed.generation(), seen_keyed);
    EXPECT_NE(one.generation(), seen_one);
    EXPECT_NE(all.generation(), seen_all);
    EXPECT_EQ(other.generation(), seen_other) << "another channel's confirmation is not its news";
    for (const auto& [reg, seen] :
         {std::pair{&keyed, seen_keyed}, std::pair{&one, seen_one}, std::pair{&all, seen_all}}) {
        const auto before = steady::now();
        reg->wait(seen, steady::now() + scaled(3s), {});
        EXPECT_LT(steady::now() - before, scaled(2s)) << "wait() returns at once";
    }
    EXPECT_EQ(keyed.last_message(), "") << "woken without a message: nothing to accept";

    // Read after the confirmation: no wake-up until a message (or a reconnect) comes.
    const auto seen = one.generation();
    subscriber::registration later(d.sub(), channel, wake_mode::one);  // already subscribed
    const auto seen_later = later.generation();
    for (int i = 0; i < 5; ++i) d.step(1ms);
    EXPECT_EQ(one.generation(), seen);
    EXPECT_EQ(later.generation(), seen_later);

    // After a reconnect the SUBSCRIBE goes again: a waiter that read its generation between the
    // reconnect's wake-up and the new confirmation is woken by the confirmation too.
    server.command({"CLIENT", "KILL", "TYPE", "pubsub"});
    // Nobody reads for waiters that are not waiting: a waiter's own wait() finds the drop.
    one.wait(one.generation(), steady::now() + scaled(5s), {});
    ASSERT_FALSE(d.sub().subscribed(channel));
    // service() reconnects (after its back-off) and sends the SUBSCRIBE; no reading yet.
    ASSERT_TRUE(
        eventually([&] { return d.sub().service(steady::now(), steady::now() + 1s) >= 0; }, 10s));
    const auto seen_before_confirmation = one.generation();  // after the reconnect's wake-up
    ASSERT_FALSE(d.sub().subscribed(channel));
    ASSERT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return d.sub().subscribed(channel);
        },
        10s));
    EXPECT_NE(one.generation(), seen_before_confirmation)
        << "the re-SUBSCRIBE's confirmation did not wake a waiter that attempted before it";
}

/// Subscribes `channel` by driving the loop by hand.
void subscribe_by_hand(driver& d, const std::string& channel) {
    ASSERT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return d.sub().subscribed(channel);
        },
        10s));
}

/// A thread in `on.wait(seen, ...)` (deadline far off, cancelled by `cancel`), `woken` once back;
/// `on` is a registration, or a listener over several nodes (RedlockListener below).
struct waiting_thread {
    std::atomic<bool> woken{false};
    std::jthread thread;
    template <class Waitable>
    explicit waiting_thread(const Waitable& on, std::stop_token cancel = {}) {
        const auto seen = on.generation();
        thread = std::jthread([this, &on, seen, cancel] {
            on.wait(seen, steady::now() + scaled(60s), cancel);
            woken = true;
        });
    }
};

// A waiter in wait() reads the connection itself (src/redis/subscriber.hpp): its message wakes it
// with nobody running the background loop.
TEST(RedisSubscriber, AWaiterReadsItsOwnMessage) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand, and not at all once subscribed
    const auto channel = unique_name();
    subscriber::registration a(d.sub(), channel, wake_mode::all, "fair:c.aaaa");
    subscriber::registration b(d.sub(), channel, wake_mode::all, "fair:c.bbbb");
    subscribe_by_hand(d, channel);
    waiting_thread wa(a);
    ASSERT_TRUE(eventually([&] { return d.sub().lent(); }, 10s)) << "the waiter reads";
    waiting_thread wb(b);  // asleep: the connection is a's
    server.command({"PUBLISH", channel, "granted 7 3 fair:c.bbbb"});
    EXPECT_TRUE(eventually([&] { return wb.woken.load(); }, 10s))
        << "the reader hands another waiter its message";
    EXPECT_FALSE(wa.woken.load());
    EXPECT_TRUE(d.sub().lent());
    server.command({"PUBLISH", channel, "granted 8 4 fair:c.aaaa"});
    EXPECT_TRUE(eventually([&] { return wa.woken.load(); }, 10s)) << "its own message wakes it";
    EXPECT_EQ(a.last_message(), "granted 8 4 fair:c.aaaa");
    EXPECT_EQ(b.last_message(), "granted 7 3 fair:c.bbbb");
    EXPECT_FALSE(d.sub().lent());
}

// The background thread takes the connection back from a reading waiter when it has work on it
// (here another channel's SUBSCRIBE); the waiter then sleeps and is woken as before.
TEST(RedisSubscriber, TheBackgroundThreadTakesTheConnectionBackForWork) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand
    const auto channel = unique_name();
    subscriber::registration a(d.sub(), channel, wake_mode::all, "fair:c.aaaa");
    subscribe_by_hand(d, channel);
    waiting_thread wa(a);
    ASSERT_TRUE(eventually([&] { return d.sub().lent(); }, 10s));
    subscriber::registration other(d.sub(), channel + "/other", wake_mode::one);
    subscribe_by_hand(d, channel + "/other");
    EXPECT_FALSE(wa.woken.load());
    server.command({"PUBLISH", channel, "granted 7 3 fair:c.aaaa"});
    EXPECT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return wa.woken.load();
        },
        10s));
    EXPECT_EQ(a.last_message(), "granted 7 3 fair:c.aaaa");
}

// A cancel reaches a waiter that sleeps in poll(2) on the connection, not on a condition variable.
TEST(RedisSubscriber, ACancelReachesAReadingWaiter) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand
    const auto channel = unique_name();
    subscriber::registration a(d.sub(), channel, wake_mode::one);
    subscribe_by_hand(d, channel);
    std::stop_source cancel;
    waiting_thread wa(a, cancel.get_token());
    ASSERT_TRUE(eventually([&] { return d.sub().lent(); }, 10s));
    cancel.request_stop();
    EXPECT_TRUE(eventually([&] { return wa.woken.load(); }, 10s));
}

// A reader that leaves while another waiter sleeps leaves the reading to the background thread.
TEST(RedisSubscriber, TheBackgroundThreadReadsForASleeperWhenTheReaderLeaves) {
    dlock::test::redis_server server;
    driver d(server);  // driven by hand
    const auto channel = unique_name();
    subscriber::registration a(d.sub(), channel, wake_mode::all, "fair:c.aaaa");
    subscriber::registration b(d.sub(), channel, wake_mode::all, "fair:c.bbbb");
    subscribe_by_hand(d, channel);
    waiting_thread wa(a);
    ASSERT_TRUE(eventually([&] { return d.sub().lent(); }, 10s));
    waiting_thread wb(b);
    ASSERT_TRUE(eventually([&] { return d.sub().sleepers() == 1; }, 10s));
    server.command({"PUBLISH", channel, "granted 7 3 fair:c.aaaa"});
    ASSERT_TRUE(eventually([&] { return wa.woken.load(); }, 10s));
    EXPECT_GE(d.step(1ms), 0) << "someone sleeps: the background thread reads";
    server.command({"PUBLISH", channel, "granted 8 4 fair:c.bbbb"});
    EXPECT_TRUE(eventually(
        [&] {
            d.step(1ms);
            return wb.woken.load();
        },
        10s));
}

// Redlock (src/redis/listener.hpp): one waiter listens on a subscriber per node. Nobody runs the
// background loop here once the channel is subscribed, so what wakes the waiter is its own reading.
class RedlockListener : public ::testing::Test {
protected:
    static constexpr std::size_t nodes = 3;
    static void SetUpTestSuite() {
        for (auto& s : servers_) s = std::make_unique<dlock::test::redis_server>();
    }
    static void TearDownTestSuite() {
        for (auto& s : servers_) s.reset();
    }
    RedlockListener() {
        for (const auto& s : servers_)
            subs_.push_back(
                std::make_unique<subscriber>(std::vector{node_for(*s)}, [](steady::time_point) {}));
    }
    void subscribe_by_hand(const std::string& channel) {
        ASSERT_TRUE(eventually(
            [&] {
                bool all = true;
                for (auto& sub : subs_) {
                    step_loop(*sub, 1ms);
                    all = all && sub->subscribed(channel);
                }
                return all;
            },
            10s));
    }
    bool all_lent() const {
        return std::all_of(subs_.begin(), subs_.end(), [](const auto& s) { return s->lent(); });
    }
    bool none_lent() const {
        return std::none_of(subs_.begin(), subs_.end(), [](const auto& s) { return s->lent(); });
    }

    static inline std::unique_ptr<dlock::test::redis_server> servers_[nodes];
    std::vector<std::unique_ptr<subscriber>> subs_;
};

// The waiter borrows every node's connection and reads them itself: one node's grant wakes it.
TEST_F(RedlockListener, AWaiterReadsEveryNodesConnectionItself) {
    const auto channel = unique_name();
    dlock::redis::detail::listener l(subs_, {channel, false, "mutex:c.aaaa"}, 2);
    subscribe_by_hand(channel);
    waiting_thread w(l);
    ASSERT_TRUE(eventually([&] { return all_lent(); }, 10s)) << "the waiter reads every node";
    servers_[1]->command({"PUBLISH", channel, "granted 5 1 mutex:c.bbbb"});  // not ours
    servers_[1]->command({"PUBLISH", channel, "granted 5 1 mutex:c.aaaa"});
    EXPECT_TRUE(eventually([&] { return w.woken.load(); }, 10s)) << "its node's grant wakes it";
    EXPECT_EQ(l.last_messages(), (std::vector<std::string>{"", "granted 5 1 mutex:c.aaaa", ""}));
    EXPECT_TRUE(none_lent()) << "every connection is given back";
}

// One node's background thread wants its connection back (another channel to subscribe): the
// waiter gives every node's back and sleeps on its signal, and a background read still wakes it.
TEST_F(RedlockListener, OneNodeWantingItsConnectionBackEndsTheReading) {
    const auto channel = unique_name();
    dlock::redis::detail::listener l(subs_, {channel, false, "mutex:c.aaaa"}, 2);
    subscribe_by_hand(channel);
    waiting_thread w(l);
    ASSERT_TRUE(eventually([&] { return all_lent(); }, 10s));
    subscriber::registration other(*subs_[2], channel + "/other", wake_mode::one);
    step_loop(*subs_[2], 1ms);  // finds it lent with work to do: asks for it back
    ASSERT_TRUE(eventually([&] { return none_lent(); }, 10s)) << "all given back, not just one";
    EXPECT_FALSE(w.woken.load());
    servers_[0]->command({"PUBLISH", channel, "granted 5 1 mutex:c.aaaa"});
    EXPECT_TRUE(eventually(
        [&] {
            for (auto& sub : subs_) step_loop(*sub, 1ms);
            return w.woken.load();
        },
        10s));
}

// A cancel reaches a waiter asleep in poll(2) on the nodes' connections.
TEST_F(RedlockListener, ACancelReachesAWaiterReadingEveryNode) {
    const auto channel = unique_name();
    dlock::redis::detail::listener l(subs_, {channel, false, "mutex:c.aaaa"}, 2);
    subscribe_by_hand(channel);
    std::stop_source cancel;
    waiting_thread w(l, cancel.get_token());
    ASSERT_TRUE(eventually([&] { return all_lent(); }, 10s));
    cancel.request_stop();
    EXPECT_TRUE(eventually([&] { return w.woken.load(); }, 10s));
    EXPECT_TRUE(none_lent());
}

}  // namespace

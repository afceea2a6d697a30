// One lock object shared by the threads of a process, against a real redis-server: thread A's
// grant runs out (renew = false), thread B locks through the same object, then A unlocks. Like a
// std::mutex, B waits for A's unlock, and A's unlock releases only A's own (expired) grant: B's
// grant stays on the server, another client cannot get in, and B's own unlock finds its token.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shared_redis.hpp"
#include "test_env.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;

// How long thread B is watched while it must keep waiting for thread A. On the old code B got the
// lock at once (the server was free); on the fixed code it never returns before A's unlock.
constexpr auto blocked_for = 300ms;

struct clients {
    std::vector<std::string> errors;
    std::mutex errors_mutex;
    dlock::redis::client shared{{.url = shared_redis().url(),
                                 .error_handler = [this](std::error_code, std::string_view what) {
                                     std::lock_guard lock(errors_mutex);
                                     errors.emplace_back(what);
                                 }}};
    dlock::redis::client other{{.url = shared_redis().url()}};

    bool exists(const std::string& name) {
        return other.command({"EXISTS", other.lock_key(name)}).integer == 1;
    }
    std::size_t error_count() {
        std::lock_guard lock(errors_mutex);
        return errors.size();
    }
};

template <class Lockable, class OtherTryLock>
void expect_expired_owner_cannot_release_the_next(clients& c, const std::vector<std::string>& names,
                                                  Lockable& shared, OtherTryLock other_try_lock) {
    std::promise<void> a_locked, a_may_unlock, b_locked, b_may_unlock;
    std::thread a([&] {
        shared.lock();
        a_locked.set_value();
        a_may_unlock.get_future().wait();
        shared.unlock();  // A's lease ran out: its release finds nothing of A's
    });
    a_locked.get_future().wait();
    for (const auto& name : names) {
        ASSERT_TRUE(eventually([&] { return !c.exists(name); }, 10s))
            << "\"" << name << "\" did not expire";
    }
    std::stop_source b_lost;
    std::thread b([&] {
        shared.lock();
        {
            std::stop_callback relay(shared.lost_token(), [&] { b_lost.request_stop(); });
            b_locked.set_value();
            b_may_unlock.get_future().wait();
        }
        shared.unlock();
    });
    auto b_in = b_locked.get_future();
    EXPECT_EQ(b_in.wait_for(blocked_for), std::future_status::timeout)
        << "B locked the object while thread A still owned it";
    a_may_unlock.set_value();
    a.join();
    ASSERT_EQ(b_in.wait_for(scaled(10s)), std::future_status::ready) << "B never got the lock";

    // B is inside: its grant is on the server and nobody else gets in.
    for (const auto& name : names) {
        EXPECT_TRUE(c.exists(name)) << "\"" << name << "\": B's grant was deleted by A's unlock";
    }
    EXPECT_FALSE(other_try_lock()) << "another client got in while B holds the lock";
    EXPECT_FALSE(b_lost.stop_requested()) << "B's grant fired lost while B is inside";
    // B's own unlock finds B's token on the server: nothing more is reported.
    const auto errors_before = c.error_count();
    b_may_unlock.set_value();
    b.join();
    EXPECT_EQ(c.error_count(), errors_before) << "B's unlock did not find B's grant";
    for (const auto& name : names) EXPECT_FALSE(c.exists(name));
}

TEST(LockSharingRedis, MutexExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    clients c;
    const auto name = unique_name();
    dlock::mutex shared(c.shared, name, {.lease = scaled(200ms), .renew = false});
    dlock::mutex other(c.other, name);
    expect_expired_owner_cannot_release_the_next(c, {name}, shared,
                                                 [&] { return other.try_lock(); });
}

TEST(LockSharingRedis, SharedMutexWriterExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    clients c;
    const auto name = unique_name();
    dlock::shared_mutex shared(c.shared, name, {.lease = scaled(200ms), .renew = false});
    dlock::shared_mutex other(c.other, name);
    expect_expired_owner_cannot_release_the_next(c, {name}, shared,
                                                 [&] { return other.try_lock(); });
}

TEST(LockSharingRedis, MultiLockExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    clients c;
    const auto p = unique_name("p"), q = unique_name("q");
    dlock::multi_lock shared({{c.shared, p}, {c.shared, q}},
                             {.lease = scaled(200ms), .renew = false});
    dlock::mutex other(c.other, q);
    expect_expired_owner_cannot_release_the_next(c, {p, q}, shared,
                                                 [&] { return other.try_lock(); });
}

}  // namespace

// One lock object shared by the threads of a process, and lock objects copied into a forked
// child, over an in-memory lock server that checks tokens like a real one: a grant whose lease ran
// out never lets its thread release another thread's later grant (the object waits locally like a
// std::mutex), and a child's copies never release the parent's grants.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/multi_lock.hpp>
#include <dlock/mutex.hpp>
#include <dlock/recursive_mutex.hpp>
#include <dlock/semaphore.hpp>
#include <dlock/shared_mutex.hpp>

#include "core/lease_core.hpp"
#include "core/status.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::lock_kind;
using dlock::lock_state;
using dlock::detail::lease_access;
using dlock::detail::lease_core;
using steady = std::chrono::steady_clock;

// A lock server in memory, safe to use from several threads. Each grant gets its own token;
// release deletes a grant only when the server still holds that token (errc::lock_lost
// otherwise, touching nothing), like the compare-and-delete of the real backends. expire() plays
// the server dropping a grant whose lease ran out, and the client noticing.
class fake_server final : public dlock::backend,
                          public dlock::detail::lease_owner,
                          public std::enable_shared_from_this<fake_server> {
public:
    static std::shared_ptr<fake_server> make() { return std::make_shared<fake_server>(); }

    using dlock::backend::acquire_until;
    [[nodiscard]] dlock::lease acquire_until(std::string_view name,
                                             const dlock::lock_request& request,
                                             const dlock::lock_options& options,
                                             steady::time_point deadline,
                                             std::error_code& ec) noexcept override {
        ec.clear();
        std::unique_lock lock(mutex_);
        ++attempts_;
        auto& holders = names_[std::string(name)];
        const auto free = [&] {
            std::uint32_t taken = 0;
            for (const auto& h : holders) {
                if (h.kind != request.kind) return false;
                if (h.kind != lock_kind::read && h.kind != lock_kind::permits) return false;
                taken += h.count;
            }
            return request.kind != lock_kind::permits || taken + request.count <= request.limit;
        };
        const auto pred = [&] { return free(); };
        std::stop_token cancel = options.cancel;
        const bool granted = deadline == steady::time_point::max()
                                 ? changed_.wait(lock, cancel, pred)
                                 : changed_.wait_until(lock, cancel, deadline, pred);
        if (!granted) {
            if (cancel.stop_requested()) {
                dlock::detail::fail(ec, errc::canceled, "canceled");
            } else {
                dlock::detail::fail(ec, errc::timeout, "held by someone else");
            }
            return {};
        }
        const auto token = "token-" + std::to_string(++fencing_);
        const auto now = steady::now();
        auto core = std::make_shared<lease_core>(shared_from_this(), std::string(name), token,
                                                 fencing_, options, now, now + 1h, request.kind);
        holders.push_back({token, request.kind, request.count, core});
        return lease_access::make(std::move(core));
    }

    void release(lease_core& lease, std::error_code& ec) noexcept override {
        ec.clear();
        {
            std::lock_guard lock(mutex_);
            ++releases_;
            auto& holders = names_[lease.name()];
            const auto it = std::find_if(holders.begin(), holders.end(),
                                         [&](const holder& h) { return h.token == lease.token(); });
            if (it == holders.end()) {
                dlock::detail::fail(ec, errc::lock_lost, "not ours");
            } else {
                holders.erase(it);
            }
        }
        lease.mark_released();
        changed_.notify_all();
    }
    void report_error(std::error_code ec, std::string_view) noexcept override {
        std::lock_guard lock(mutex_);
        reported_.push_back(ec);
    }
    void notify(const dlock::lock_event&) noexcept override {}

    /// The server drops every grant of `name` (their leases ran out) and their holders notice.
    void expire(const std::string& name) {
        std::vector<std::shared_ptr<lease_core>> gone;
        {
            std::lock_guard lock(mutex_);
            for (auto& h : names_[name]) {
                if (auto core = h.core.lock()) gone.push_back(std::move(core));
            }
            names_[name].clear();
        }
        changed_.notify_all();
        for (auto& core : gone) core->lose(make_error_code(errc::lock_lost));
    }
    /// The tokens the server holds for `name`.
    std::vector<std::string> tokens(const std::string& name) {
        std::lock_guard lock(mutex_);
        std::vector<std::string> out;
        for (const auto& h : names_[name]) out.push_back(h.token);
        return out;
    }
    int attempts() {
        std::lock_guard lock(mutex_);
        return attempts_;
    }
    std::vector<std::error_code> reported() {
        std::lock_guard lock(mutex_);
        return reported_;
    }

private:
    struct holder {
        std::string token;
        lock_kind kind;
        std::uint32_t count;
        std::weak_ptr<lease_core> core;
    };
    std::mutex mutex_;
    std::condition_variable_any changed_;
    std::map<std::string, std::vector<holder>> names_;
    std::vector<std::error_code> reported_;
    std::uint64_t fencing_ = 0;
    int attempts_ = 0;
    int releases_ = 0;
};

// How long a thread that must keep waiting is watched before the test goes on. A blocked call
// never returns within it on the fixed code; on the old code the call returned at once.
constexpr auto blocked_for = 300ms;

// The scenario of every exclusive object: thread A locks, A's grant runs out on the server, thread
// B locks through the same object, then A unlocks. B must end up holding the lock on the server
// (its grant untouched by A's unlock), and another client must not get in.
template <class Lockable, class Other>
void expect_expired_owner_cannot_release_the_next(fake_server& server,
                                                  const std::vector<std::string>& names,
                                                  Lockable& shared, Other&& other_try_lock) {
    std::promise<void> a_locked, a_may_unlock, b_done;
    std::thread a([&] {
        shared.lock();
        a_locked.set_value();
        a_may_unlock.get_future().wait();
        shared.unlock();
    });
    a_locked.get_future().wait();
    for (const auto& name : names) server.expire(name);  // A's lease ran out; A still "owns" it

    std::stop_source b_lost;
    std::thread b([&] {
        shared.lock();
        // B is inside: its grant must stay held until B unlocks.
        std::stop_callback relay(shared.lost_token(), [&] { b_lost.request_stop(); });
        b_done.set_value();
    });
    auto b_returned = b_done.get_future();
    // Like a std::mutex, B waits for A's unlock: its lock() must not return while A owns it.
    EXPECT_EQ(b_returned.wait_for(blocked_for), std::future_status::timeout)
        << "B locked the object while thread A still owned it";
    a_may_unlock.set_value();
    a.join();
    ASSERT_EQ(b_returned.wait_for(10s), std::future_status::ready) << "B never got the lock";
    b.join();

    for (const auto& name : names) {
        EXPECT_EQ(server.tokens(name).size(), 1u)
            << "\"" << name << "\": B's grant is no longer on the server after A's unlock";
    }
    EXPECT_FALSE(other_try_lock()) << "another client got in while B holds the lock";
    EXPECT_FALSE(b_lost.stop_requested()) << "B's grant reported lost";
    EXPECT_NE(shared.state(), lock_state::lost);
}

TEST(LockSharing, MutexExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    auto server = fake_server::make();
    dlock::mutex shared(*server, "m", {.renew = false});
    dlock::mutex other(*server, "m");
    expect_expired_owner_cannot_release_the_next(*server, {"m"}, shared,
                                                 [&] { return other.try_lock(); });
    const auto reported_before = server->reported().size();
    shared.unlock();  // the main thread does not own it (B does): changes nothing
    EXPECT_EQ(server->tokens("m").size(), 1u) << "unlock() from a thread that does not own it";
    const auto reported = server->reported();
    ASSERT_EQ(reported.size(), reported_before + 1);
    EXPECT_EQ(reported.back(), errc::not_owner);
}

TEST(LockSharing, SharedMutexWriterExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    auto server = fake_server::make();
    dlock::shared_mutex shared(*server, "rw", {.renew = false});
    dlock::shared_mutex other(*server, "rw");
    expect_expired_owner_cannot_release_the_next(*server, {"rw"}, shared,
                                                 [&] { return other.try_lock(); });
}

TEST(LockSharing, MultiLockExpiredOwnerUnlockNeverReleasesTheNextThreadsGrant) {
    auto server = fake_server::make();
    dlock::multi_lock shared({{*server, "p"}, {*server, "q"}}, {.renew = false});
    dlock::mutex other(*server, "q");
    expect_expired_owner_cannot_release_the_next(*server, {"p", "q"}, shared,
                                                 [&] { return other.try_lock(); });
}

// recursive_mutex keeps one grant per thread, so the same sequence already leaves B's grant alone.
TEST(LockSharing, RecursiveMutexExpiredOwnerUnlockLeavesTheNextThreadsGrant) {
    auto server = fake_server::make();
    dlock::recursive_mutex shared(*server, "r", {.renew = false});
    std::promise<void> a_locked, a_may_unlock;
    std::thread a([&] {
        shared.lock();
        a_locked.set_value();
        a_may_unlock.get_future().wait();
        shared.unlock();
    });
    a_locked.get_future().wait();
    server->expire("r");
    std::promise<void> b_locked, b_may_unlock;
    std::thread b([&] {
        shared.lock();
        b_locked.set_value();
        b_may_unlock.get_future().wait();
        EXPECT_EQ(shared.state(), lock_state::held);
        shared.unlock();
    });
    b_locked.get_future().wait();
    a_may_unlock.set_value();
    a.join();
    EXPECT_EQ(server->tokens("r").size(), 1u) << "A's unlock released B's grant";
    b_may_unlock.set_value();
    b.join();
    EXPECT_TRUE(server->tokens("r").empty());
}

// counting_semaphore: a thread's release() gives back its own grant first. Thread A's grant ran
// out and thread B took the only permit; A's release(1) must not hand B's permit back.
TEST(LockSharing, SemaphoreReleaseGivesBackTheCallersOwnGrantFirst) {
    auto server = fake_server::make();
    dlock::counting_semaphore shared(*server, "s", 1, {.renew = false});
    dlock::counting_semaphore other(*server, "s", 1);
    std::promise<void> a_acquired, a_may_release;
    std::thread a([&] {
        shared.acquire();
        a_acquired.set_value();
        a_may_release.get_future().wait();
        shared.release();
    });
    a_acquired.get_future().wait();
    server->expire("s");
    std::thread([&] { EXPECT_TRUE(shared.try_acquire()); }).join();
    a_may_release.set_value();
    a.join();
    EXPECT_EQ(server->tokens("s").size(), 1u) << "A's release(1) gave back B's permit";
    EXPECT_FALSE(other.try_acquire()) << "another client got a permit beyond the limit";
    EXPECT_EQ(shared.held(), 1u);
    EXPECT_EQ(shared.state(), lock_state::held);
}

TEST(LockSharing, WaitingForTheLocalOwnerHonoursTheDeadlineAndCancel) {
    auto server = fake_server::make();
    std::stop_source cancel;
    dlock::mutex shared(*server, "w", {.cancel = cancel.get_token()});
    shared.lock();
    server->expire("w");  // the server is free: only the local owner keeps B out
    const int attempts = server->attempts();
    std::thread([&] {
        EXPECT_FALSE(shared.try_lock());
        const auto start = steady::now();
        EXPECT_FALSE(shared.try_lock_for(50ms));
        EXPECT_GE(steady::now() - start, 50ms);
    }).join();
    EXPECT_EQ(server->attempts(), attempts) << "a thread went to the server past the local owner";
    auto waiter = std::async(std::launch::async, [&] {
        try {
            shared.lock();
            return std::error_code{};
        } catch (const dlock::error& e) {
            return e.code();
        }
    });
    EXPECT_EQ(waiter.wait_for(blocked_for), std::future_status::timeout);
    cancel.request_stop();
    ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(waiter.get(), errc::canceled);
    shared.unlock();
}

TEST(LockSharing, LockingAgainFromTheOwningThreadIsRefusedNotADeadlock) {
    auto server = fake_server::make();
    dlock::mutex m(*server, "again");
    m.lock();
    try {
        m.lock();
        FAIL() << "lock() twice from one thread returned";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    }
    EXPECT_EQ(server->tokens("again").size(), 1u);
    m.unlock();
    EXPECT_TRUE(server->tokens("again").empty());
}

// Runs `child` in a forked child process and returns its exit code (the child calls _exit, so
// no static destructor of this test binary runs there).
template <class Child>
int in_forked_child(Child child) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) ::_exit(child());
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(LockSharingFork, ChildCopiesOfTheParentsGrantsAreInert) {
    auto server = fake_server::make();
    auto lease = server->acquire("lease");
    dlock::mutex m(*server, "mutex");
    m.lock();
    const int code = in_forked_child([&] {
        if (lease.state() != lock_state::lost) return 10;
        if (!lease.lost_token().stop_requested()) return 11;
        if (m.state() != lock_state::lost) return 12;
        std::error_code ec;
        lease.release(ec);
        if (ec != errc::not_owner) return 13;
        m.unlock();
        // The child's copies reached nothing: the server (a copy here too) still holds both.
        if (server->tokens("lease").size() != 1 || server->tokens("mutex").size() != 1) return 14;
        return 0;
    });
    EXPECT_EQ(code, 0) << "10-12: the child sees the parent's grant as held; 13: its release "
                          "reached the server; 14: the child's copy released a grant";
    EXPECT_EQ(lease.state(), lock_state::held);
    EXPECT_EQ(m.state(), lock_state::held);
    m.unlock();
    lease.release();
}

}  // namespace

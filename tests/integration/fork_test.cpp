// fork() without exec, as a pre-forking server does it, against a real redis-server and a real
// ZooKeeper: the child inherits copies of the parent's client, mutex and lease; when the child's
// RAII scopes end they must not release the parent's locks (another client would be granted
// while the parent still reports held), destroying the child's copy of the client must not hang
// (its background threads exist only in the parent), and the child can still create its own
// client and lock with it. The child reports through a pipe and its exit code; it ends with
// _exit, so the test binary's static destructors (which stop the shared servers) run only in
// the parent.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "shared_redis.hpp"
#include "test_env.hpp"
#include "zk_server.hpp"

// The child creates its own client, hence a thread, after a fork of a multi-threaded process:
// supported by the library, so TSan must not end the child for it.
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }
#endif

namespace {

using namespace std::chrono_literals;
using dlock::errc;
using dlock::lock_state;
using dlock::test::scaled;
using dlock::test::shared_redis;
using dlock::test::unique_name;
using steady = std::chrono::steady_clock;

// What the child found wrong, as bits of its exit code.
enum child_fault : int {
    copy_not_lost = 1,         // its copy of the parent's lease or mutex reported held
    parent_client_usable = 2,  // it acquired a lock through the parent's client
    own_client_failed = 4,     // its own client could not lock a fresh name
    parent_lock_was_free = 8,  // its own client got the parent's lock
    child_threw = 16,          // an exception escaped
};

// The parent's side of one forked child: a pipe the child writes one byte to per milestone, and
// its exit status.
class forked_child {
public:
    template <class Body>
    explicit forked_child(Body body) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
        pid_ = ::fork();
        if (pid_ < 0) throw std::system_error(errno, std::generic_category(), "fork");
        if (pid_ == 0) {
            ::close(fds[0]);
            int code = 0;
            try {
                code = body([fd = fds[1]] {
                    const char byte = 1;
                    [[maybe_unused]] const auto n = ::write(fd, &byte, 1);
                });
            } catch (...) {
                code = child_threw;
            }
            ::_exit(code);
        }
        ::close(fds[1]);
        read_fd_ = fds[0];
    }
    ~forked_child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        ::close(read_fd_);
    }
    forked_child(const forked_child&) = delete;
    forked_child& operator=(const forked_child&) = delete;

    /// Waits up to `timeout` for the child's next milestone; false if none came.
    bool milestone(std::chrono::milliseconds timeout) {
        const auto deadline = steady::now() + scaled(timeout);
        for (;;) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now());
            if (left <= 0ms) return false;
            pollfd p{read_fd_, POLLIN, 0};
            const int n = ::poll(&p, 1, static_cast<int>(left.count()));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            char byte = 0;
            return ::read(read_fd_, &byte, 1) == 1;
        }
    }
    /// Waits up to `timeout` for the child to exit: its exit code, or -1 if it hung (then it is
    /// killed).
    int exit_code(std::chrono::milliseconds timeout) {
        const auto deadline = steady::now() + scaled(timeout);
        int status = 0;
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
            if (steady::now() >= deadline) return -1;
            std::this_thread::sleep_for(5ms);
        }
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

private:
    pid_t pid_ = -1;
    int read_fd_ = -1;
};

// The scenario, for any backend: the parent holds `name` through a dlock::mutex (in a
// std::unique_lock) and `name`/lease through a bare lease, forks, and the child lets both copies
// go, then destroys its copy of the client, then locks with its own client.
template <class Client, class MakeClient>
void fork_while_holding(MakeClient make_client) {
    const auto name = unique_name("held");
    const auto lease_name = unique_name("lease");
    const auto child_name = unique_name("child");
    std::vector<std::string> parent_errors;
    std::mutex errors_mutex;
    auto parent = std::make_unique<Client>(make_client([&](std::error_code, std::string_view what) {
        std::lock_guard lock(errors_mutex);
        parent_errors.emplace_back(what);
    }));
    std::optional<dlock::mutex> m(std::in_place, *parent, name);
    std::optional<std::unique_lock<dlock::mutex>> guard(std::in_place, *m);
    std::optional<dlock::lease> lease = parent->acquire(lease_name, {.wait = 0ms});
    const auto token = m->fencing_token();

    forked_child child([&](auto milestone) {
        int faults = 0;
        // A pre-forking server's child returns out of the scopes it inherited.
        if (lease->state() != lock_state::lost || m->state() != lock_state::lost)
            faults |= copy_not_lost;
        guard.reset();  // the child's copy of the mutex unlocks
        m.reset();
        lease.reset();  // the child's copy of the lease is destroyed
        milestone();
        {
            std::error_code ec;
            auto stolen = parent->acquire(child_name + "/via-parent", {.wait = 0ms}, ec);
            if (!ec) faults |= parent_client_usable;
        }
        parent.reset();  // the child's copy of the client: must not hang
        milestone();
        auto own = make_client(nullptr);
        {
            std::error_code ec;
            auto mine = own.acquire(child_name, {.wait = 0ms}, ec);
            if (ec || !mine) faults |= own_client_failed;
            auto parents = own.acquire(name, {.wait = 0ms}, ec);
            if (!dlock::is_contention(ec)) faults |= parent_lock_was_free;
        }
        return faults;
    });

    ASSERT_TRUE(child.milestone(20s)) << "the child hung releasing its copies of the grants";
    // The child's copies are gone: the parent still holds both locks, and nobody else gets them.
    auto other = make_client(nullptr);
    {
        dlock::mutex probe(other, name);
        EXPECT_FALSE(probe.try_lock()) << "another client got the parent's mutex after the child "
                                          "destroyed its copy";
        std::error_code ec;
        auto stolen = other.acquire(lease_name, {.wait = 0ms}, ec);
        EXPECT_TRUE(dlock::is_contention(ec))
            << "another client got the parent's lease after the child destroyed its copy";
    }
    EXPECT_EQ(m->state(), lock_state::held);
    EXPECT_EQ(lease->state(), lock_state::held);
    EXPECT_TRUE(child.milestone(20s)) << "the child hung destroying its copy of the client";
    EXPECT_EQ(child.exit_code(20s), 0)
        << "bits: 1 copy reported held in the child, 2 parent's client usable in the child, "
           "4 child's own client failed, 8 child's own client got the parent's lock, 16 threw; "
           "-1 hung";

    // The parent's grants are still its own on the server: release succeeds (compare-and-delete
    // of our token), and nothing was reported.
    EXPECT_EQ(m->fencing_token(), token);
    EXPECT_NO_THROW(lease->release());
    guard.reset();
    {
        std::lock_guard lock(errors_mutex);
        EXPECT_TRUE(parent_errors.empty()) << parent_errors.front();
    }
    dlock::mutex after(other, name);
    EXPECT_TRUE(after.try_lock());
}

using error_handler = std::function<void(std::error_code, std::string_view)>;

TEST(Fork, RedisChildCopiesNeverReleaseTheParentsLocks) {
    fork_while_holding<dlock::redis::client>([](error_handler handler) {
        return dlock::redis::client({.url = shared_redis().url(), .error_handler = handler});
    });
}

#if DLOCK_HAS_ZOOKEEPER
TEST(Fork, ZooKeeperChildCopiesNeverReleaseTheParentsLocks) {
    fork_while_holding<dlock::zk::client>([](error_handler handler) {
        return dlock::zk::client({.url = dlock::test::shared_zk().url("/dlock-fork"),
                                  .connect_timeout = scaled(10s),
                                  .error_handler = handler});
    });
}
#endif  // DLOCK_HAS_ZOOKEEPER

}  // namespace

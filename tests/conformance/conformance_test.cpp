// The conformance suite: one contract, every lock type, run over one backend per binary
// (service(), defined by the binary's conformance_<backend>.cpp). Typed over the lock types
// of kinds.hpp; each test runs as conformance/<kind>.<contract>. A backend that lacks a kind must
// answer errc::unsupported, which SetUp asserts before skipping that kind's tests.
//
// Critical sections are checked through a directory shared by threads and processes alike: a
// holder creates its own entry, lists the others and removes its entry again, so two holders that
// must not overlap see each other; exclusive holders also bump a counter (a lost update shows as
// a short count) and check their fencing token against the last one written.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <dlock/dlock.hpp>
#include <gtest/gtest.h>

#include "backends.hpp"
#include "child_process.hpp"
#include "kinds.hpp"
#include "temp_dir.hpp"
#include "test_env.hpp"

namespace dlock::test::conformance {
namespace {

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

// ---- critical-section checking, shared by threads and child processes ----

void write_text(const fs::path& p, const std::string& text) {
    const auto tmp = p.string() + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text;
    }
    fs::rename(tmp, p);  // atomic: a reader sees the old or the new text, never a torn one
}

std::uint64_t read_number(const fs::path& p) {
    const auto t = read_text(p);
    return t.empty() ? 0 : std::stoull(t);
}

/// Runs one critical section of a holder in role `tag` with fencing `tokens`, in `dir` (entries)
/// and `dir`.state (counter, last token). Returns "" or what went wrong.
std::string critical_section(const fs::path& dir, char tag,
                             const std::vector<std::uint64_t>& tokens, std::uint32_t permits) {
    static std::atomic<unsigned> serial{0};
    const auto mine =
        std::string(1, tag) + "." + std::to_string(::getpid()) + "." + std::to_string(serial++);
    const auto entry = dir / mine;
    { std::ofstream touch(entry); }
    std::string wrong;
    const auto look = [&] {
        unsigned exclusive = 0, readers = 0, holders = 0;
        for (const auto& e : fs::directory_iterator(dir)) {
            const auto n = e.path().filename().string();
            if (n == mine) continue;
            ++holders;
            if (n[0] == 'x' || n[0] == 'w') ++exclusive;
            if (n[0] == 'r') ++readers;
        }
        if ((tag == 'x' || tag == 'w') && holders > 0)
            wrong = "an exclusive holder overlapped " + std::to_string(holders) + " other(s)";
        else if (tag == 'r' && exclusive > 0)
            wrong = "a reader overlapped a writer";
        else if (tag == 'p' && holders + 1 > permits)
            wrong = std::to_string(holders + 1) + " permit holders with " +
                    std::to_string(permits) + " permits";
        (void)readers;
    };
    look();
    if (tag == 'x' || tag == 'w') {
        const auto state = fs::path(dir.string() + ".state");
        const auto count = read_number(state / "count");
        const auto last = read_number(state / "fence");
        if (!tokens.empty() && tokens.front() <= last && wrong.empty())
            wrong = "fencing token " + std::to_string(tokens.front()) + " after " +
                    std::to_string(last);
        std::this_thread::yield();
        write_text(state / "count", std::to_string(count + 1));
        if (!tokens.empty()) write_text(state / "fence", std::to_string(tokens.front()));
    } else {
        std::this_thread::yield();
    }
    if (wrong.empty()) look();
    fs::remove(entry);
    return wrong;
}

struct section_dirs {
    fs::path dir;
    section_dirs() {
        char tmpl[] = "/tmp/dlock-conformance-XXXXXX";
        dir = ::mkdtemp(tmpl);
        fs::create_directory(dir.string() + ".state");
    }
    ~section_dirs() {
        std::error_code ec;
        fs::remove_all(dir, ec);
        fs::remove_all(dir.string() + ".state", ec);
    }
    std::uint64_t count() const { return read_number(fs::path(dir.string() + ".state") / "count"); }
};

/// `iterations` critical sections of one owner; "" or the first problem.
template <class K>
std::string hammer(backend& b, const std::string& name, char tag, const fs::path& dir,
                   int iterations, std::uint32_t permits) {
    auto o = K::make(b, name, {.lease = 30s}, tag, permits);
    for (int i = 0; i < iterations; ++i) {
        o->lock();
        auto wrong = critical_section(dir, tag, o->tokens(), permits);
        o->unlock();
        if (!wrong.empty()) return wrong;
    }
    return "";
}

std::vector<std::string> backend_args_from(const std::vector<std::string>& args, std::size_t at) {
    return {args.begin() + static_cast<std::ptrdiff_t>(at), args.end()};
}

// Role "hammer": kind, tag, name, dir, iterations, permits, backend args...
const bool hammer_role = register_child("hammer", [](const std::vector<std::string>& args) {
    auto b = service().make_child(backend_args_from(args, 6), {});
    std::string wrong = "unknown kind";
    for_kind(args.at(0), [&](auto k) {
        wrong =
            hammer<decltype(k)>(*b, args.at(2), args.at(1).at(0), args.at(3), std::stoi(args.at(4)),
                                static_cast<std::uint32_t>(std::stoul(args.at(5))));
    });
    if (!wrong.empty()) std::fprintf(stderr, "hammer: %s\n", wrong.c_str());
    return wrong.empty() ? 0 : 1;
});

// Role "holder": kind, tag, name, marker, lease ms, session ms, permits, backend args...
// Takes the lock, writes its fencing tokens to the marker, then waits for lost_token: exits 0
// once it fired (within 60 s), 3 if it never did.
const bool holder_role = register_child("holder", [](const std::vector<std::string>& args) {
    auto b = service().make_child(backend_args_from(args, 7),
                                  std::chrono::milliseconds(std::stoll(args.at(5))));
    int status = 99;
    for_kind(args.at(0), [&](auto k) {
        auto o = decltype(k)::make(
            *b, args.at(2), {.lease = std::chrono::milliseconds(std::stoll(args.at(4)))},
            args.at(1).at(0), static_cast<std::uint32_t>(std::stoul(args.at(6))));
        o->lock();
        std::string tokens;
        for (auto t : o->tokens()) tokens += std::to_string(t) + " ";
        write_text(args.at(3), tokens);
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        const bool lost = cv.wait_for(lock, o->lost_token(), 60s, [] { return false; }) ||
                          o->lost_token().stop_requested();
        status = lost ? 0 : 3;
    });
    return status;
});

std::vector<std::uint64_t> parse_tokens(const std::string& text) {
    std::vector<std::uint64_t> out;
    std::istringstream in(text);
    std::uint64_t t;
    while (in >> t) out.push_back(t);
    return out;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// ---- the typed suite ----

// The checker's control: an overlapping holder, a reader beside a writer, one permit holder too
// many and a stale fencing token are each reported.
TEST(conformance_checker, reports_every_violation) {
    section_dirs dirs;
    { std::ofstream other(dirs.dir / "x.other"); }
    EXPECT_NE(critical_section(dirs.dir, 'x', {1}, 1), "");
    EXPECT_NE(critical_section(dirs.dir, 'r', {1}, 1), "");
    fs::remove(dirs.dir / "x.other");
    { std::ofstream other(dirs.dir / "p.other"); }
    EXPECT_NE(critical_section(dirs.dir, 'p', {1}, 1), "");
    EXPECT_EQ(critical_section(dirs.dir, 'p', {1}, 2), "");
    fs::remove(dirs.dir / "p.other");
    EXPECT_EQ(critical_section(dirs.dir, 'w', {5}, 1), "");
    EXPECT_NE(critical_section(dirs.dir, 'w', {5}, 1), "") << "a token not above the last one";
    EXPECT_EQ(dirs.count(), 3u) << "every exclusive section counts, overlapping or not";
}

template <class K>
class conformance : public testing::Test {
protected:
    void SetUp() override {
        b_ = service().make();
        name_ = unique_name(K::label);
        for (const auto kind : K::kinds) {
            std::error_code ec;
            auto probe =
                b_->acquire(unique_name("probe"),
                            lock_request{.kind = kind, .count = 1, .limit = 1}, {.wait = 0ms}, ec);
            if (service().lacks(kind)) {
                ASSERT_EQ(ec, make_error_code(errc::unsupported))
                    << service().label << " must refuse " << to_string(kind) << ": "
                    << ec.message();
                // The lock type surfaces it too.
                auto o = K::make(*b_, name_, {}, K::main_tag, 1);
                try {
                    o->lock();
                    ADD_FAILURE() << K::label << " locked on " << service().label;
                } catch (const dlock::error& e) {
                    EXPECT_EQ(e.code(), make_error_code(errc::unsupported)) << e.what();
                }
                if (kind == lock_kind::permits) {
                    b_->set_permits(name_, 1, ec);
                    EXPECT_EQ(ec, make_error_code(errc::unsupported)) << "set_permits";
                }
                GTEST_SKIP() << service().label << " lacks lock kind " << to_string(kind)
                             << " (errc::unsupported, as documented)";
            }
            ASSERT_FALSE(ec) << service().label << " refused " << to_string(kind) << ": "
                             << ec.message();
            probe.release();
        }
    }

    std::unique_ptr<owner> make(char tag, lock_options options = {.lease = 30s},
                                std::uint32_t permits = 1) {
        return K::make(*b_, name_, std::move(options), tag, permits);
    }
    std::size_t queued() { return service().queued(*b_, queue_name()); }
    /// The lock whose queue the FIFO and leftover checks look at: a multi_lock's first part, a
    /// striped kind's stripe (K::queue_name), the lock itself for the others.
    std::string queue_name() const {
        if constexpr (requires { K::queue_name(name_); })
            return K::queue_name(name_);
        else
            return std::is_same_v<K, multi_kind> ? name_ + "/a" : name_;
    }
    /// After everything was released: no queue or liveness entry is left, and a new owner gets
    /// the lock in one attempt.
    void expect_nothing_left() {
        const auto left = [&] { return service().leftovers(*b_, queue_name()); };
        EXPECT_TRUE(eventually([&] { return left() == 0; }, 10s))
            << left() << " entries left behind";
        auto fresh = make(K::conflict_tag);
        EXPECT_TRUE(fresh->try_lock_for(0ms)) << "a new owner could not take the free lock";
        fresh->unlock();
    }

    std::unique_ptr<backend> b_;
    std::string name_;
};

struct kind_names {
    template <class T>
    static std::string GetName(int) {
        return T::label;
    }
};

using kinds = testing::Types<mutex_kind, fair_kind, recursive_kind, write_kind, read_kind,
                             semaphore_kind, multi_kind, striped_mutex_kind, striped_fair_kind,
                             striped_recursive_kind, striped_write_kind>;
TYPED_TEST_SUITE(conformance, kinds, kind_names);

// At most one exclusive holder (or `permits` permit holders, or readers but no writer) at a
// time across threads, each thread with its own object; exclusive holders see rising tokens.
TYPED_TEST(conformance, exclusion_across_threads) {
    using K = TypeParam;
    constexpr int threads = 4;
    const int iterations = !service().cross_process ? 50 : 12;
    constexpr std::uint32_t permits = 2;
    section_dirs dirs;
    std::vector<std::string> wrong(threads);
    int exclusive_iterations = 0;
    {
        std::vector<std::jthread> workers;
        for (int t = 0; t < threads; ++t) {
            const char tag = (K::main_tag == 'r' && t == 0) ? 'w' : K::main_tag;
            if (tag == 'x' || tag == 'w') exclusive_iterations += iterations;
            workers.emplace_back([&, t, tag] {
                try {
                    wrong[t] =
                        hammer<K>(*this->b_, this->name_, tag, dirs.dir, iterations, permits);
                } catch (const std::exception& e) {
                    wrong[t] = std::string("threw: ") + e.what();
                }
            });
        }
    }
    for (int t = 0; t < threads; ++t) EXPECT_EQ(wrong[t], "") << "thread " << t;
    EXPECT_EQ(dirs.count(), static_cast<std::uint64_t>(exclusive_iterations));
    this->expect_nothing_left();
}

// The same across processes: two children and this process hammer one name.
TYPED_TEST(conformance, exclusion_across_processes) {
    using K = TypeParam;
    if (!service().cross_process)
        GTEST_SKIP() << service().label << " lives in one process: no other process can reach it";
    constexpr int iterations = 10;
    constexpr std::uint32_t permits = 2;
    section_dirs dirs;
    const char child_tag = K::main_tag == 'r' ? 'w' : K::main_tag;
    std::vector<std::unique_ptr<child_process>> children;
    for (int c = 0; c < 2; ++c)
        children.push_back(std::make_unique<child_process>(
            "hammer",
            concat({K::label, std::string(1, c == 0 ? child_tag : K::main_tag), this->name_,
                    dirs.dir.string(), std::to_string(iterations), std::to_string(permits)},
                   service().child_args())));
    const auto mine = hammer<K>(*this->b_, this->name_, K::main_tag, dirs.dir, iterations, permits);
    EXPECT_EQ(mine, "");
    for (auto& c : children) EXPECT_EQ(c->wait(120s), 0) << "a child saw a violation or failed";
    int exclusive = 0;
    for (char tag : {child_tag, K::main_tag, K::main_tag})
        if (tag == 'x' || tag == 'w') exclusive += iterations;
    EXPECT_EQ(dirs.count(), static_cast<std::uint64_t>(exclusive));
    this->expect_nothing_left();
}

// Every grant gets a larger token than every earlier grant of the name (per part).
TYPED_TEST(conformance, fencing_is_monotonic) {
    using K = TypeParam;
    auto a = this->make(K::main_tag);
    auto b = this->make(K::main_tag);
    std::vector<std::uint64_t> last;
    for (int round = 0; round < 6; ++round) {
        auto& o = round % 2 == 0 ? a : b;
        o->lock();
        const auto tokens = o->tokens();
        if (!last.empty()) {
            ASSERT_EQ(tokens.size(), last.size());
            for (std::size_t i = 0; i < tokens.size(); ++i)
                EXPECT_GT(tokens[i], last[i]) << "round " << round << ", part " << i;
        }
        last = tokens;
        o->unlock();
    }
    // A grant of the conflicting role continues the same sequence.
    auto c = this->make(K::conflict_tag);
    c->lock();
    EXPECT_GT(c->tokens().front(), last.front());
    c->unlock();
}

TYPED_TEST(conformance, std_adapters) { TypeParam::adapters(*this->b_, this->name_); }

// Waiters are served in the order they queued, where the kind promises it.
TYPED_TEST(conformance, fifo_where_promised) {
    using K = TypeParam;
    if (!K::fifo) GTEST_SKIP() << K::label << " does not promise first come, first served";
    auto holder = this->make(K::conflict_tag);
    holder->lock();
    const auto base = this->queued();
    std::mutex m;
    std::vector<int> order;
    std::vector<std::jthread> waiters;
    constexpr int count = 3;
    for (int w = 0; w < count; ++w) {
        waiters.emplace_back([&, w] {
            auto o = this->make(K::main_tag);
            o->lock();
            {
                std::lock_guard lock(m);
                order.push_back(w);
            }
            o->unlock();
        });
        ASSERT_TRUE(eventually([&] { return this->queued() == base + w + 1; }, 10s))
            << "waiter " << w << " did not queue";
    }
    holder->unlock();
    waiters.clear();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
    this->expect_nothing_left();
}

// A wait that times out gives up its place: nothing stays queued or held.
TYPED_TEST(conformance, timeout_leaves_nothing_behind) {
    using K = TypeParam;
    auto holder = this->make(K::conflict_tag);
    holder->lock();
    auto waiter = this->make(K::main_tag);
    const auto bound = scaled(200ms);
    const auto start = steady::now();
    EXPECT_FALSE(waiter->try_lock_for(bound));
    EXPECT_GE(steady::now() - start, bound) << "gave up before its bound";
    EXPECT_FALSE(waiter->try_lock_for(0ms));
    EXPECT_FALSE(waiter->try_lock_for(-5s)) << "a negative timeout counts as zero";
    // A bounded number of attempts ends in errc::attempts_exhausted, holding nothing.
    auto limited = this->make(K::main_tag, {.lease = 30s, .max_attempts = 1});
    try {
        limited->lock();
        ADD_FAILURE() << "locked while held";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), make_error_code(errc::attempts_exhausted)) << e.what();
    }
    holder->unlock();
    this->expect_nothing_left();
    EXPECT_TRUE(waiter->try_lock_for(0ms));
    waiter->unlock();
}

// A canceled wait throws errc::canceled and leaves nothing queued or held.
TYPED_TEST(conformance, cancel_leaves_nothing_behind) {
    using K = TypeParam;
    auto holder = this->make(K::conflict_tag);
    holder->lock();
    const auto base = this->queued();
    std::stop_source cancel;
    std::error_code got;
    std::atomic<bool> started{false};
    std::jthread waiter([&] {
        auto o = this->make(K::main_tag, {.lease = 30s, .cancel = cancel.get_token()});
        started = true;
        try {
            o->lock();
            o->unlock();
        } catch (const dlock::error& e) {
            got = e.code();
        }
    });
    ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
    if (K::fifo) {
        EXPECT_TRUE(eventually([&] { return this->queued() == base + 1; }, 10s));
    }
    cancel.request_stop();
    waiter.join();
    EXPECT_EQ(got, make_error_code(errc::canceled)) << got.message();
    holder->unlock();
    this->expect_nothing_left();
}

// Bad input is a clear errc::invalid_argument, never a crash, hang or silent success; names are
// opaque bytes (no two names share a lock) up to the backend's length limit.
TYPED_TEST(conformance, bad_input_is_refused) {
    using K = TypeParam;
    K::bad_input(*this->b_, this->name_);
    // The longest accepted name (a multi_lock's parts add 2 bytes, a striped object's count
    // record 9), then one byte more.
    std::size_t suffix = std::is_same_v<K, multi_kind> ? 2u : 0u;
    if constexpr (requires { K::name_suffix; }) suffix = K::name_suffix;
    const auto longest =
        this->name_ + std::string(service().max_name() - suffix - this->name_.size(), 'n');
    auto ok = K::make(*this->b_, longest, {.lease = 30s}, K::main_tag, 1);
    EXPECT_TRUE(ok->try_lock_for(0ms)) << "a name of the maximal length";
    ok->unlock();
    auto too_long = K::make(*this->b_, longest + "n", {.lease = 30s}, K::main_tag, 1);
    try {
        (void)too_long->try_lock_for(0ms);
        ADD_FAILURE() << "a name above the length limit was accepted";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument)) << e.what();
    }
    // Unusual bytes: each name is its own lock (a striped base refuses braces: see bad_input).
    constexpr bool braces = !requires { K::is_striped; };
    const auto odd = this->name_ + (braces ? "/a b\n{x}*?\xc3\xbc" : "/a b\n[x]*?\xc3\xbc");
    auto h1 = K::make(*this->b_, odd, {.lease = 30s}, K::main_tag == 'r' ? 'w' : K::main_tag, 1);
    ASSERT_TRUE(h1->try_lock_for(0ms));
    for (const auto& other : {odd + "/", odd.substr(0, odd.size() - 1), odd + "x"}) {
        auto h2 = K::make(*this->b_, other, {.lease = 30s}, K::conflict_tag, 1);
        EXPECT_TRUE(h2->try_lock_for(0ms)) << "names differing by a byte shared a lock";
        h2->unlock();
    }
    auto same = K::make(*this->b_, odd, {.lease = 30s}, K::conflict_tag, 1);
    EXPECT_FALSE(same->try_lock_for(0ms)) << "the same odd name did not conflict";
    h1->unlock();
}

// A holder that stops renewing loses its grant: lost_token fires, state() is lost, and the next
// owner gets a larger token.
TYPED_TEST(conformance, lost_token_fires_on_loss) {
    using K = TypeParam;
    auto holder = this->make(K::main_tag, {.lease = 30s, .max_hold = scaled(300ms)});
    holder->lock();
    const auto held = holder->tokens();
    EXPECT_TRUE(eventually([&] { return holder->lost_token().stop_requested(); }, 20s))
        << "lost_token did not fire after max_hold";
    EXPECT_EQ(holder->state(), lock_state::lost);
    auto next = this->make(K::conflict_tag);
    ASSERT_TRUE(next->try_lock_for(scaled(20s))) << "the lost grant still blocks";
    EXPECT_GT(next->tokens().front(), held.front());
    holder->unlock();  // never throws; touches nothing of the next owner's
    EXPECT_EQ(next->state(), lock_state::held);
    auto third = this->make(K::conflict_tag);
    EXPECT_FALSE(third->try_lock_for(0ms)) << "the lost holder's unlock freed the next owner's";
    next->unlock();
    // The lease itself: a lost grant's release() reports errc::lock_lost and deletes nothing.
    const auto kind = K::kinds.front();
    const auto other = this->name_ + "/lease";
    auto l = this->b_->acquire(other, {.kind = kind}, {.lease = 30s, .max_hold = scaled(300ms)});
    EXPECT_TRUE(eventually([&] { return l.lost_token().stop_requested(); }, 20s));
    EXPECT_EQ(l.state(), lock_state::lost);
    const auto taker_kind = kind == lock_kind::read ? lock_kind::write : kind;
    auto taker =
        this->b_->acquire(other, {.kind = taker_kind}, {.lease = 30s, .wait = scaled(20s)});
    std::error_code ec;
    l.release(ec);
    EXPECT_EQ(ec, make_error_code(errc::lock_lost)) << ec.message();
    EXPECT_EQ(taker.state(), lock_state::held);
    std::error_code again;
    auto blocked = this->b_->acquire(other, {.kind = taker_kind}, {.wait = 0ms}, again);
    EXPECT_TRUE(is_contention(again))
        << "the lost lease's release freed the taker's grant: " << again.message();
    taker.release();
}

// How many may hold at once: one exclusive holder; any number of readers but no writer with
// them; as many permit holders as permits.
TYPED_TEST(conformance, holders_at_once) {
    using K = TypeParam;
    auto first = this->make(K::main_tag, {.lease = 30s}, 2);
    ASSERT_TRUE(first->try_lock_for(0ms));
    auto second = this->make(K::main_tag, {.lease = 30s}, 2);
    const bool shares = K::main_tag == 'r' || K::main_tag == 'p';
    EXPECT_EQ(second->try_lock_for(0ms), shares);
    if (shares) {
        auto third = this->make(K::conflict_tag == 'p' ? 'p' : 'w', {.lease = 30s}, 2);
        EXPECT_FALSE(third->try_lock_for(0ms)) << "one holder too many";
        second->unlock();
    }
    first->unlock();
}

// One object shared by all threads: as exclusive as one object per thread.
TYPED_TEST(conformance, exclusion_with_one_object_shared_by_threads) {
    using K = TypeParam;
    constexpr int threads = 3;
    const int iterations = !service().cross_process ? 30 : 8;
    section_dirs dirs;
    auto shared = this->make(K::main_tag, {.lease = 30s}, 1);
    std::vector<std::string> wrong(threads);
    {
        std::vector<std::jthread> workers;
        for (int t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                try {
                    for (int i = 0; i < iterations && wrong[t].empty(); ++i) {
                        shared->lock();
                        wrong[t] = critical_section(dirs.dir, K::main_tag == 'r' ? 'r' : 'x',
                                                    shared->tokens(), 1);
                        shared->unlock();
                    }
                } catch (const std::exception& e) {
                    wrong[t] = std::string("threw: ") + e.what();
                }
            });
    }
    for (int t = 0; t < threads; ++t) EXPECT_EQ(wrong[t], "") << "thread " << t;
    if (K::main_tag != 'r') {
        EXPECT_EQ(dirs.count(), static_cast<std::uint64_t>(threads * iterations));
    }
    this->expect_nothing_left();
}

// A name belongs to one kind: another kind's acquire while it is in use is never granted. It is
// refused with errc::unexpected_reply, except that on a backend whose lock kinds share one queue
// (ZooKeeper: every exclusive kind is a `wr` node) another lock kind simply waits its turn;
// a semaphore and a lock never share a name anywhere.
TYPED_TEST(conformance, kinds_do_not_mix) {
    using K = TypeParam;
    if (std::is_same_v<K, multi_kind>) GTEST_SKIP() << "multi_lock's parts are mutexes";
    const auto mine = K::kinds.front();
    std::vector<lock_kind> others;
    if (mine == lock_kind::permits) {
        others = {lock_kind::exclusive};
    } else {
        others = {mine == lock_kind::exclusive ? lock_kind::fair : lock_kind::exclusive,
                  lock_kind::permits};
    }
    auto holder = this->make(K::main_tag);
    holder->lock();
    for (const auto other : others) {
        if (service().lacks(other)) continue;
        std::error_code ec;
        auto l = this->b_->acquire(this->queue_name(), {.kind = other, .count = 1, .limit = 1},
                                   {.wait = 0ms}, ec);
        EXPECT_FALSE(l) << "a " << to_string(other) << " grant on a name held as " << K::label;
        const bool both_locks = mine != lock_kind::permits && other != lock_kind::permits;
        if (service().lock_kinds_share_a_queue && both_locks) {
            EXPECT_TRUE(is_contention(ec)) << to_string(other) << ": " << ec.message();
        } else {
            EXPECT_EQ(ec, make_error_code(errc::unexpected_reply))
                << to_string(other) << ": " << ec.message();
        }
    }
    EXPECT_EQ(holder->state(), lock_state::held) << "the refused acquire touched the holder";
    holder->unlock();
    this->expect_nothing_left();
}

template <class K>
void dead_holder(conformance<K>& t, backend& b, const std::string& name, bool kill) {
    if (!service().cross_process)
        GTEST_SKIP() << service().label << " lives in one process: no other process can reach it";
    section_dirs dirs;
    const auto marker = dirs.dir / "token";
    const auto lease = scaled(800ms);
    const auto session = scaled(1000ms);
    child_process child(
        "holder", concat({K::label, std::string(1, K::main_tag), name, marker.string(),
                          std::to_string(lease.count()), std::to_string(session.count()), "1"},
                         service().child_args()));
    ASSERT_TRUE(eventually([&] { return fs::exists(marker); }, 30s)) << "the child never held";
    const auto theirs = parse_tokens(read_text(marker));
    ASSERT_FALSE(theirs.empty());
    child.stop_signal(kill ? SIGKILL : SIGSTOP);
    auto next = K::make(b, name, {.lease = 30s}, K::conflict_tag, 1);
    // Its lease (session) plus a margin for the backend to notice: never longer.
    ASSERT_TRUE(next->try_lock_for(std::max(lease, session) + scaled(2s)))
        << "the dead holder's grant outlived its lease";
    const auto mine = next->tokens();
    for (std::size_t i = 0; i < mine.size() && i < theirs.size(); ++i)
        EXPECT_GT(mine[i], theirs[i]) << "part " << i;
    if (kill) {
        EXPECT_EQ(child.wait(10s), 128 + SIGKILL);
    } else {
        child.stop_signal(SIGCONT);
        EXPECT_EQ(child.wait(60s), 0) << "the resumed holder did not see its grant lost";
        EXPECT_EQ(next->state(), lock_state::held);
    }
    next->unlock();
    (void)t;
}

// A holder killed with SIGKILL holds the lock no longer than its lease (session on ZooKeeper).
TYPED_TEST(conformance, killed_holder_is_replaced) {
    dead_holder(*this, *this->b_, this->name_, true);
}

// A holder frozen with SIGSTOP is replaced once its lease lapses, and on waking sees lost_token.
TYPED_TEST(conformance, paused_holder_is_replaced_and_sees_loss) {
    dead_holder(*this, *this->b_, this->name_, false);
}

}  // namespace
}  // namespace dlock::test::conformance

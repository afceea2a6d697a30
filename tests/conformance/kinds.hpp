// The lock types the conformance suite runs over, behind one interface (`owner`: one client of
// the lock, as one thread or process uses it). Each kind is a traits struct:
//
//   label          short name, used in test names, child roles and skip reasons
//   kinds          the lock_kinds it asks the backend for (a backend lacking one: unsupported)
//   main_tag       the role the kind's own tests take: 'x' exclusive, 'w' writer, 'r' reader,
//                  'p' permits
//   conflict_tag   a role that cannot hold together with main_tag (the contender of the
//                  contention tests)
//   fifo           waiters are served first come, first served (a documented promise)
//   make(b, name, options, tag, permits)   an owner in role `tag` (`permits`: the semaphore's)
//   adapters(b, name)   the std adapters the type supports, exercised (GTEST_SKIP if none)
//   bad_input(b, name)  the type's own argument checks
//
// Kinds over several locks may add `queue_name(name)` (the lock whose queue the FIFO and leftover
// checks look at) and `name_suffix` (how many bytes longer the longest name they derive is).
//
// To register a kind: add a struct here, add it to `all_kinds` below and to the child-role
// dispatch (for_kind), and its column in CONTRIBUTING.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <tuple>
#include <vector>

#include <dlock/dlock.hpp>
#include <gtest/gtest.h>

namespace dlock::test::conformance {

using namespace std::chrono_literals;

class owner {
public:
    virtual ~owner() = default;
    virtual void lock() = 0;
    virtual bool try_lock_for(std::chrono::milliseconds timeout) = 0;
    virtual void unlock() = 0;
    /// The fencing token of each part of the current grant (one for every kind but multi_lock).
    virtual std::vector<std::uint64_t> tokens() const = 0;
    virtual std::stop_token lost_token() const = 0;
    virtual lock_state state() const = 0;
};

namespace detail {

template <class T>
class lockable_owner final : public owner {
public:
    template <class... Args>
    explicit lockable_owner(Args&&... args) : m_(std::forward<Args>(args)...) {}
    void lock() override { m_.lock(); }
    bool try_lock_for(std::chrono::milliseconds timeout) override {
        return m_.try_lock_for(timeout);
    }
    void unlock() override { m_.unlock(); }
    std::vector<std::uint64_t> tokens() const override {
        if constexpr (std::is_same_v<T, multi_lock>)
            return m_.fencing_tokens();
        else
            return {m_.fencing_token()};
    }
    std::stop_token lost_token() const override { return m_.lost_token(); }
    lock_state state() const override { return m_.state(); }
    T& object() { return m_; }

private:
    T m_;
};

class reader_owner final : public owner {
public:
    reader_owner(backend& b, std::string name, lock_options options)
        : m_(b, std::move(name), std::move(options)) {}
    void lock() override { m_.lock_shared(); }
    bool try_lock_for(std::chrono::milliseconds timeout) override {
        return m_.try_lock_shared_for(timeout);
    }
    void unlock() override { m_.unlock_shared(); }
    std::vector<std::uint64_t> tokens() const override { return {m_.fencing_token()}; }
    std::stop_token lost_token() const override { return m_.lost_token(); }
    lock_state state() const override { return m_.state(); }

private:
    shared_mutex m_;
};

class permits_owner final : public owner {
public:
    permits_owner(backend& b, std::string name, std::uint32_t permits, lock_options options)
        : s_(b, std::move(name), permits, std::move(options)) {}
    void lock() override { s_.acquire(); }
    bool try_lock_for(std::chrono::milliseconds timeout) override {
        return s_.try_acquire_for(timeout);
    }
    void unlock() override { s_.release(); }
    std::vector<std::uint64_t> tokens() const override { return {s_.fencing_token()}; }
    std::stop_token lost_token() const override { return s_.lost_token(); }
    lock_state state() const override { return s_.state(); }

private:
    counting_semaphore s_;
};

inline std::vector<lock_part> multi_parts(backend& b, const std::string& name) {
    return {{b, name + "/a"}, {b, name + "/b"}};
}

inline void expect_invalid(const std::function<void()>& f, const char* what) {
    try {
        f();
        ADD_FAILURE() << what << ": no error";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument)) << what << ": " << e.what();
    }
}

/// unique_lock, try_to_lock, try_lock_for through unique_lock, scoped_lock and std::lock over two
/// objects of a Lockable type, checking each really holds (a second object of the name cannot).
template <class T, class Make>
void exercise_lockable(const std::string& name, Make make) {
    auto a = make(name + "/1");
    auto b = make(name + "/2");
    auto other_a = make(name + "/1");
    {
        std::unique_lock<T> l(*a);
        EXPECT_TRUE(l.owns_lock());
        EXPECT_FALSE(other_a->try_lock()) << "unique_lock did not hold";
    }
    {
        std::unique_lock<T> l(*other_a, std::try_to_lock);
        EXPECT_TRUE(l.owns_lock()) << "unique_lock's destructor did not unlock";
    }
    {
        std::unique_lock<T> l(*a, std::defer_lock);
        EXPECT_TRUE(l.try_lock_for(std::chrono::seconds(5)));
    }
    {
        std::scoped_lock both(*a, *b);
        EXPECT_FALSE(other_a->try_lock());
    }
    std::lock(*b, *a);  // the other order: std::lock must not deadlock
    EXPECT_FALSE(other_a->try_lock());
    a->unlock();
    b->unlock();
    // Not held any more: observers say so.
    EXPECT_EQ(a->state(), lock_state::lost);
    EXPECT_TRUE(a->lost_token().stop_requested());
    try {
        if constexpr (std::is_same_v<T, multi_lock>)
            (void)a->fencing_tokens();
        else
            (void)a->fencing_token();
        ADD_FAILURE() << "fencing token of an unlocked object";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), make_error_code(errc::not_owner)) << e.what();
    }
    EXPECT_TRUE(other_a->try_lock());
    other_a->unlock();
}

}  // namespace detail

struct mutex_kind {
    static constexpr const char* label = "mutex";
    static inline const std::vector<lock_kind> kinds{lock_kind::exclusive};
    static constexpr char main_tag = 'x', conflict_tag = 'x';
    static constexpr bool fifo = false;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t) {
        return std::make_unique<detail::lockable_owner<mutex>>(b, name, std::move(o));
    }
    static void adapters(backend& b, const std::string& name) {
        detail::exercise_lockable<mutex>(
            name, [&](const std::string& n) { return std::make_unique<mutex>(b, n); });
    }
    static void bad_input(backend& b, const std::string&) {
        detail::expect_invalid([&] { mutex m(b, ""); }, "empty name");
        detail::expect_invalid([&] { mutex m(b, "x", {.lease = 0ms}); }, "zero lease");
    }
};

struct fair_kind {
    static constexpr const char* label = "fair_mutex";
    static inline const std::vector<lock_kind> kinds{lock_kind::fair};
    static constexpr char main_tag = 'x', conflict_tag = 'x';
    static constexpr bool fifo = true;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t) {
        return std::make_unique<detail::lockable_owner<fair_mutex>>(b, name, std::move(o));
    }
    static void adapters(backend& b, const std::string& name) {
        detail::exercise_lockable<fair_mutex>(
            name, [&](const std::string& n) { return std::make_unique<fair_mutex>(b, n); });
    }
    static void bad_input(backend& b, const std::string&) {
        detail::expect_invalid([&] { fair_mutex m(b, ""); }, "empty name");
        detail::expect_invalid([&] { fair_mutex m(b, "x", {.lease = 0ms}); }, "zero lease");
    }
};

struct recursive_kind {
    static constexpr const char* label = "recursive_mutex";
    static inline const std::vector<lock_kind> kinds{lock_kind::reentrant};
    static constexpr char main_tag = 'x', conflict_tag = 'x';
    static constexpr bool fifo = false;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t) {
        return std::make_unique<detail::lockable_owner<recursive_mutex>>(b, name, std::move(o));
    }
    static void adapters(backend& b, const std::string& name) {
        detail::exercise_lockable<recursive_mutex>(
            name, [&](const std::string& n) { return std::make_unique<recursive_mutex>(b, n); });
        // Nested: the same thread takes it again through the adapters, with one fencing token.
        recursive_mutex m(b, name + "/nested");
        std::unique_lock outer(m);
        const auto token = m.fencing_token();
        {
            std::scoped_lock inner(m);
            EXPECT_EQ(m.depth(), 2u);
            EXPECT_EQ(m.fencing_token(), token);
            std::unique_lock timed(m, std::chrono::milliseconds(10));  // try_lock_for
            EXPECT_TRUE(timed.owns_lock());
            EXPECT_EQ(m.depth(), 3u);
        }
        EXPECT_EQ(m.depth(), 1u);
        mutex plain(b, name + "/plain");
        {
            std::scoped_lock both(m, plain);  // std::lock's algorithm with a re-entered level
            EXPECT_EQ(m.depth(), 2u);
        }
        EXPECT_EQ(m.depth(), 1u);
        outer.unlock();
        EXPECT_EQ(m.depth(), 0u);
        recursive_mutex other(b, name + "/nested");
        EXPECT_TRUE(other.try_lock()) << "the last level's unlock released the lock";
        other.unlock();
    }
    static void bad_input(backend& b, const std::string&) {
        detail::expect_invalid([&] { recursive_mutex m(b, ""); }, "empty name");
        detail::expect_invalid([&] { recursive_mutex m(b, "x", {.lease = 0ms}); }, "zero lease");
    }
};

struct write_kind {
    static constexpr const char* label = "shared_mutex_write";
    static inline const std::vector<lock_kind> kinds{lock_kind::write};
    static constexpr char main_tag = 'w', conflict_tag = 'w';
    static constexpr bool fifo = true;  // writers are served first come, first served
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o,
                                       char tag, std::uint32_t) {
        if (tag == 'r') return std::make_unique<detail::reader_owner>(b, name, std::move(o));
        return std::make_unique<detail::lockable_owner<shared_mutex>>(b, name, std::move(o));
    }
    static void adapters(backend& b, const std::string& name) {
        detail::exercise_lockable<shared_mutex>(
            name, [&](const std::string& n) { return std::make_unique<shared_mutex>(b, n); });
    }
    static void bad_input(backend& b, const std::string&) {
        detail::expect_invalid([&] { shared_mutex m(b, ""); }, "empty name");
        detail::expect_invalid([&] { shared_mutex m(b, "x", {.lease = 0ms}); }, "zero lease");
    }
};

struct read_kind {
    static constexpr const char* label = "shared_mutex_read";
    static inline const std::vector<lock_kind> kinds{lock_kind::read, lock_kind::write};
    static constexpr char main_tag = 'r', conflict_tag = 'w';
    static constexpr bool fifo = false;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o,
                                       char tag, std::uint32_t) {
        return write_kind::make(b, name, std::move(o), tag, 0);
    }
    static void adapters(backend& b, const std::string& name) {
        shared_mutex m1(b, name), m2(b, name), writer(b, name);
        {
            std::shared_lock r1(m1);
            std::shared_lock r2(m2, std::try_to_lock);
            EXPECT_TRUE(r2.owns_lock()) << "two readers must hold together";
            EXPECT_FALSE(writer.try_lock()) << "a writer got in past readers";
        }
        {
            std::shared_lock r1(m1, std::defer_lock);
            EXPECT_TRUE(r1.try_lock_for(std::chrono::seconds(5)));
        }
        EXPECT_TRUE(writer.try_lock()) << "shared_lock's destructor did not unlock";
        {
            std::shared_lock r(m1, std::try_to_lock);
            EXPECT_FALSE(r.owns_lock()) << "a reader got in past a writer";
        }
        writer.unlock();
    }
    static void bad_input(backend& b, const std::string& name) {
        write_kind::bad_input(b, name);
        shared_mutex m(b, name);
        m.lock_shared();
        detail::expect_invalid([&] { m.lock_shared(); }, "second share of one thread");
        m.unlock_shared();
    }
};

struct semaphore_kind {
    static constexpr const char* label = "counting_semaphore";
    static inline const std::vector<lock_kind> kinds{lock_kind::permits};
    static constexpr char main_tag = 'p', conflict_tag = 'p';
    static constexpr bool fifo = false;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t permits) {
        return std::make_unique<detail::permits_owner>(b, name, permits, std::move(o));
    }
    static void adapters(backend&, const std::string&) {
        GTEST_SKIP() << "counting_semaphore is not Lockable (like std::counting_semaphore)";
    }
    static void bad_input(backend& b, const std::string& name) {
        detail::expect_invalid([&] { counting_semaphore s(b, "", 1); }, "empty name");
        detail::expect_invalid([&] { counting_semaphore s(b, "x", 0); }, "zero permits");
        detail::expect_invalid([&] { counting_semaphore s(b, "x", 1, {.lease = 0ms}); },
                               "zero lease");
        counting_semaphore s(b, name, 2);
        detail::expect_invalid([&] { s.acquire(0); }, "acquire(0)");
        detail::expect_invalid([&] { s.acquire(3); }, "acquire above max()");
        detail::expect_invalid([&] { s.set_permits(0); }, "set_permits(0)");
        EXPECT_EQ(s.held(), 0u);
        std::error_code ec;
        auto l = b.acquire(name, {.kind = lock_kind::permits, .count = 0, .limit = 2}, {}, ec);
        EXPECT_EQ(ec, make_error_code(errc::invalid_argument)) << "backend: count 0";
        EXPECT_FALSE(l);
        l = b.acquire(name, {.kind = lock_kind::permits, .count = 3, .limit = 2}, {}, ec);
        EXPECT_EQ(ec, make_error_code(errc::invalid_argument)) << "backend: count above limit";
        EXPECT_FALSE(l);
    }
};

struct multi_kind {
    static constexpr const char* label = "multi_lock";
    static inline const std::vector<lock_kind> kinds{lock_kind::exclusive};
    static constexpr char main_tag = 'x', conflict_tag = 'x';
    static constexpr bool fifo = false;
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t) {
        return std::make_unique<detail::lockable_owner<multi_lock>>(detail::multi_parts(b, name),
                                                                    std::move(o));
    }
    static void adapters(backend& b, const std::string& name) {
        detail::exercise_lockable<multi_lock>(name, [&](const std::string& n) {
            return std::make_unique<multi_lock>(detail::multi_parts(b, n));
        });
    }
    static void bad_input(backend& b, const std::string&) {
        detail::expect_invalid([&] { multi_lock m({}); }, "no parts");
        detail::expect_invalid([&] { multi_lock m({{b, ""}}); }, "empty part name");
        detail::expect_invalid([&] { multi_lock m({{b, "x"}, {b, "x"}}); }, "duplicate part");
        detail::expect_invalid([&] { multi_lock m({{b, "x"}}, {.lease = 0ms}); }, "zero lease");
    }
};

// ---- dlock::striped<Lock> over each Lockable kind ----
//
// An owner is a striped<Lock> of `striped_count` stripes over base `name`, locking the stripe of
// one fixed key through get(key): the suite checks the stripe behaves as the plain Lock does.
// Each owner object has its own striped object, so every owner also checks the recorded stripe
// count. Extra members: `is_striped` (marks the kind), queue_name(name) (the stripe the owners use,
// where the queue and leftover checks look), name_suffix (the longest name a striped object
// derives from its base: the count record "<base>/#stripes").

namespace detail {

inline constexpr std::size_t striped_count = 8;
inline constexpr const char* striped_key = "item";

template <class Lock>
class striped_owner final : public owner {
public:
    striped_owner(backend& b, const std::string& name, lock_options options)
        : s_(b, name, striped_count, std::move(options)) {}
    void lock() override { lock_ref().lock(); }
    bool try_lock_for(std::chrono::milliseconds timeout) override {
        return lock_ref().try_lock_for(timeout);
    }
    void unlock() override { lock_ref().unlock(); }
    std::vector<std::uint64_t> tokens() const override { return {lock_ref().fencing_token()}; }
    std::stop_token lost_token() const override { return lock_ref().lost_token(); }
    lock_state state() const override { return lock_ref().state(); }

private:
    // get() checks the stripe count on first use (and may throw); the owner's observers are
    // const, the striped object's lookup is not.
    Lock& lock_ref() const { return s_.get(striped_key); }
    mutable striped<Lock> s_;
};

/// Three keys: a and b in different stripes, c in a's stripe.
struct striped_keys {
    std::string a = "k0", b, c;
    explicit striped_keys(std::size_t stripes) {
        const auto of = [&](const std::string& k) { return fnv1a_64(k) % stripes; };
        for (int i = 1; b.empty() || c.empty(); ++i) {
            const auto k = "k" + std::to_string(i);
            if (b.empty() && of(k) != of(a)) b = k;
            if (c.empty() && of(k) == of(a)) c = k;
        }
    }
};

}  // namespace detail

template <class Lock, class Plain>
struct striped_base {
    static constexpr bool is_striped = true;
    static inline const std::vector<lock_kind> kinds = Plain::kinds;
    static constexpr char main_tag = Plain::main_tag, conflict_tag = Plain::conflict_tag;
    static constexpr bool fifo = Plain::fifo;
    static constexpr std::size_t name_suffix = 9;  // "/#stripes"
    static std::unique_ptr<owner> make(backend& b, const std::string& name, lock_options o, char,
                                       std::uint32_t) {
        return std::make_unique<detail::striped_owner<Lock>>(b, name, std::move(o));
    }
    static std::string queue_name(const std::string& name) {
        return name + "/#" + std::to_string(fnv1a_64(detail::striped_key) % detail::striped_count);
    }
    /// The stripes through the std adapters and lock_all: a key's stripe excludes every key of
    /// that stripe and no other; lock_all holds each distinct stripe once, all or nothing.
    static void adapters(backend& b, const std::string& name) {
        const detail::striped_keys k(detail::striped_count);
        striped<Lock> s(b, name, detail::striped_count);
        striped<Lock> other(b, name, detail::striped_count);
        {
            std::unique_lock l(s.get(k.a));
            EXPECT_TRUE(l.owns_lock());
            EXPECT_FALSE(other.get(k.c).try_lock()) << "a key of the same stripe got in";
            std::unique_lock free(other.get(k.b), std::try_to_lock);
            EXPECT_TRUE(free.owns_lock()) << "another stripe was blocked";
        }
        {
            std::scoped_lock both(s.get(k.a), s.get(k.b));
            EXPECT_FALSE(other.get(k.a).try_lock());
            EXPECT_FALSE(other.get(k.b).try_lock());
        }
        {
            auto all = s.lock_all({k.a, k.b, k.c});
            EXPECT_EQ(all->parts().size(), 2u) << "each distinct stripe once";
            EXPECT_FALSE(other.get(k.c).try_lock());
            EXPECT_FALSE(other.get(k.b).try_lock());
            EXPECT_EQ(other.try_lock_all_for({k.b}, 0ms), nullptr);
        }
        // All or nothing: with b's stripe held elsewhere, lock_all gives up and keeps a's free.
        std::unique_lock hold_b(other.get(k.b));
        EXPECT_EQ(s.try_lock_all_for({k.a, k.b}, 50ms), nullptr);
        striped<Lock> third(b, name, detail::striped_count);
        EXPECT_TRUE(third.get(k.a).try_lock()) << "a failed lock_all left a stripe held";
        third.get(k.a).unlock();
        hold_b.unlock();
        auto all = s.lock_all({k.a, k.b});
        EXPECT_FALSE(third.get(k.b).try_lock()) << "lock_all did not get the released stripe";
    }
    /// The striped object's own checks, the Lock's, and the stripe count recorded at first use.
    static void bad_input(backend& b, const std::string& name) {
        using S = striped<Lock>;
        detail::expect_invalid([&] { S s(b, name, 0); }, "zero stripes");
        detail::expect_invalid([&] { S s(b, name, max_stripes + 1); }, "too many stripes");
        detail::expect_invalid([&] { S s(b, "", 4); }, "empty base");
        detail::expect_invalid([&] { S s(b, name + "{x}", 4); }, "a brace in the base");
        detail::expect_invalid([&] { S s(b, name, 4, {.lease = 0ms}); }, "zero lease");
        const auto counted = name + "/count";
        S four(b, counted, 4);
        std::error_code ec;
        (void)b.record_once(counted + "/#probe", "1", ec);
        if (ec == errc::unsupported) {
            EXPECT_NO_THROW(four.verify()) << "no record store: nothing to check against";
            GTEST_SKIP() << "this backend has no record store (errc::unsupported): the stripe "
                            "count is not checked";
        }
        ASSERT_FALSE(ec) << ec.message();
        four.verify();
        S five(b, counted, 5);
        try {
            (void)five.get("key");
            ADD_FAILURE() << "another stripe count was accepted";
        } catch (const dlock::error& e) {
            EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument)) << e.what();
            const std::string what = e.what();
            EXPECT_NE(what.find("opened with 5 stripes"), std::string::npos) << what;
            EXPECT_NE(what.find("records 4"), std::string::npos) << what;
        }
        detail::expect_invalid([&] { (void)five.lock_all({"a", "b"}); }, "lock_all, 5 stripes");
        S again(b, counted, 4);
        EXPECT_NO_THROW((void)again.get("key")) << "the recorded count";
    }
};

struct striped_mutex_kind : striped_base<mutex, mutex_kind> {
    static constexpr const char* label = "striped_mutex";
};
struct striped_fair_kind : striped_base<fair_mutex, fair_kind> {
    static constexpr const char* label = "striped_fair_mutex";
};
struct striped_recursive_kind : striped_base<recursive_mutex, recursive_kind> {
    static constexpr const char* label = "striped_recursive_mutex";
};
struct striped_write_kind : striped_base<shared_mutex, write_kind> {
    static constexpr const char* label = "striped_shared_mutex";
};

/// Calls f(K{}) for the kind whose label is `label`; false if none.
template <class F>
bool for_kind(const std::string& label, F&& f) {
    bool found = false;
    const auto one = [&](auto k) {
        if (!found && label == decltype(k)::label) {
            found = true;
            f(k);
        }
    };
    one(mutex_kind{});
    one(fair_kind{});
    one(recursive_kind{});
    one(write_kind{});
    one(read_kind{});
    one(semaphore_kind{});
    one(multi_kind{});
    one(striped_mutex_kind{});
    one(striped_fair_kind{});
    one(striped_recursive_kind{});
    one(striped_write_kind{});
    return found;
}

}  // namespace dlock::test::conformance

// Compile-time checks of the public types' shapes: dlock::mutex meets the standard's Lockable and
// TimedLockable requirements and, like std::mutex, is neither copyable nor movable; dlock::lease is
// move-only with noexcept moves; clients of the std lock utilities instantiate. Nothing here runs:
// this file fails to compile if a contract regresses.
#include <chrono>
#include <concepts>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <dlock/backend.hpp>
#include <dlock/lease.hpp>
#include <dlock/mutex.hpp>
#include <dlock/options.hpp>

namespace {

// [thread.req.lockable.basic], [thread.req.lockable.req], [thread.req.lockable.timed]
template <class L>
concept basic_lockable = requires(L& m) {
    { m.lock() } -> std::same_as<void>;
    { m.unlock() } -> std::same_as<void>;
};

template <class L>
concept lockable = basic_lockable<L> && requires(L& m) {
    { m.try_lock() } -> std::same_as<bool>;
};

template <class L>
concept timed_lockable = lockable<L> && requires(
    L& m, const std::chrono::milliseconds& rel, const std::chrono::duration<double>& rel_f,
    const std::chrono::steady_clock::time_point& abs_steady,
    const std::chrono::system_clock::time_point& abs_sys,
    const std::chrono::time_point<std::chrono::steady_clock, std::chrono::seconds>& abs_coarse) {
    { m.try_lock_for(rel) } -> std::same_as<bool>;
    { m.try_lock_for(rel_f) } -> std::same_as<bool>;
    { m.try_lock_until(abs_steady) } -> std::same_as<bool>;
    { m.try_lock_until(abs_sys) } -> std::same_as<bool>;
    { m.try_lock_until(abs_coarse) } -> std::same_as<bool>;
};

// The concepts themselves must tell a timed mutex from a plain one.
static_assert(timed_lockable<std::timed_mutex>);
static_assert(lockable<std::mutex> && !timed_lockable<std::mutex>);
static_assert(!basic_lockable<int>);

static_assert(basic_lockable<dlock::mutex>);
static_assert(lockable<dlock::mutex>);
static_assert(timed_lockable<dlock::mutex>);

// Like std::mutex: no copy, no move.
static_assert(!std::is_copy_constructible_v<dlock::mutex>);
static_assert(!std::is_copy_assignable_v<dlock::mutex>);
static_assert(!std::is_move_constructible_v<dlock::mutex>);
static_assert(!std::is_move_assignable_v<dlock::mutex>);
static_assert(!std::is_default_constructible_v<dlock::mutex>);
static_assert(std::is_nothrow_destructible_v<dlock::mutex>);
static_assert(noexcept(std::declval<dlock::mutex&>().unlock()));
// A mutex is built from a backend, never converted to implicitly from one.
static_assert(std::is_constructible_v<dlock::mutex, dlock::backend&, std::string>);
static_assert(!std::is_convertible_v<dlock::backend&, dlock::mutex>);

// The std lock utilities accept it.
static_assert(std::is_constructible_v<std::unique_lock<dlock::mutex>, dlock::mutex&>);
static_assert(
    std::is_constructible_v<std::unique_lock<dlock::mutex>, dlock::mutex&, std::chrono::seconds>);
static_assert(std::is_constructible_v<std::scoped_lock<dlock::mutex, dlock::mutex>, dlock::mutex&,
                                      dlock::mutex&>);
static_assert(std::is_constructible_v<std::lock_guard<dlock::mutex>, dlock::mutex&>);

// lease: move-only, noexcept moves, noexcept destructor, explicit bool.
static_assert(!std::is_copy_constructible_v<dlock::lease>);
static_assert(!std::is_copy_assignable_v<dlock::lease>);
static_assert(std::is_move_constructible_v<dlock::lease>);
static_assert(std::is_move_assignable_v<dlock::lease>);
static_assert(std::is_nothrow_move_constructible_v<dlock::lease>);
static_assert(std::is_nothrow_move_assignable_v<dlock::lease>);
static_assert(std::is_nothrow_default_constructible_v<dlock::lease>);
static_assert(std::is_nothrow_destructible_v<dlock::lease>);
static_assert(std::is_constructible_v<bool, const dlock::lease&>);
static_assert(!std::is_convertible_v<dlock::lease, bool>);
static_assert(
    std::is_same_v<decltype(std::declval<const dlock::lease&>().lost_token()), std::stop_token>);
static_assert(noexcept(std::declval<const dlock::lease&>().expires_in()));
static_assert(noexcept(std::declval<const dlock::lease&>().state()));
static_assert(noexcept(std::declval<dlock::lease&>().release(std::declval<std::error_code&>())));

// backend: the non-throwing acquire twin is noexcept; the throwing one is not.
static_assert(noexcept(std::declval<dlock::backend&>().acquire(
    std::declval<std::string_view>(), std::declval<const dlock::lock_options&>(),
    std::declval<std::error_code&>())));
static_assert(!noexcept(std::declval<dlock::backend&>().acquire(
    std::declval<std::string_view>(), std::declval<const dlock::lock_options&>())));
static_assert(std::has_virtual_destructor_v<dlock::backend>);

// options: an aggregate with defaults, "forever" is the max, never 0.
static_assert(std::is_aggregate_v<dlock::lock_options>);
static_assert(dlock::forever == std::chrono::milliseconds::max());
static_assert(dlock::forever > dlock::max_lease);

}  // namespace

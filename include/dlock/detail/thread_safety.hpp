// Clang thread-safety analysis (-Wthread-safety): the capability macros, and a mutex and scoped
// locks the analysis understands. libstdc++'s std::mutex and std::lock_guard carry no capability
// attributes, so state guarded by a mutex uses detail::mutex and detail::lock_guard /
// detail::unique_lock; then `x DLOCK_GUARDED_BY(m)` makes clang reject any access to x without m
// held, and DLOCK_REQUIRES(m) a call without it. Other compilers see plain std::mutex code.
// scripts/test.sh builds the library with clang -Wthread-safety -Werror.
#pragma once

#include <mutex>

#if defined(__clang__)
#define DLOCK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DLOCK_THREAD_ANNOTATION(x)
#endif

#define DLOCK_CAPABILITY(x) DLOCK_THREAD_ANNOTATION(capability(x))
#define DLOCK_SCOPED_CAPABILITY DLOCK_THREAD_ANNOTATION(scoped_lockable)
#define DLOCK_GUARDED_BY(x) DLOCK_THREAD_ANNOTATION(guarded_by(x))
#define DLOCK_PT_GUARDED_BY(x) DLOCK_THREAD_ANNOTATION(pt_guarded_by(x))
#define DLOCK_REQUIRES(...) DLOCK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DLOCK_ACQUIRE(...) DLOCK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DLOCK_RELEASE(...) DLOCK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DLOCK_TRY_ACQUIRE(...) DLOCK_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define DLOCK_EXCLUDES(...) DLOCK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define DLOCK_NO_THREAD_SAFETY_ANALYSIS DLOCK_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace dlock::detail {

/// std::mutex as a capability.
class DLOCK_CAPABILITY("mutex") mutex {
public:
    mutex() = default;
    mutex(const mutex&) = delete;
    mutex& operator=(const mutex&) = delete;

    void lock() DLOCK_ACQUIRE() { m_.lock(); }
    void unlock() DLOCK_RELEASE() { m_.unlock(); }
    bool try_lock() DLOCK_TRY_ACQUIRE(true) { return m_.try_lock(); }
    /// The std::mutex itself, for unique_lock::native() (std::condition_variable).
    std::mutex& native() noexcept { return m_; }

private:
    std::mutex m_;
};

/// std::lock_guard for detail::mutex.
class DLOCK_SCOPED_CAPABILITY lock_guard {
public:
    explicit lock_guard(mutex& m) DLOCK_ACQUIRE(m) : m_(m) { m_.lock(); }
    ~lock_guard() DLOCK_RELEASE() { m_.unlock(); }
    lock_guard(const lock_guard&) = delete;
    lock_guard& operator=(const lock_guard&) = delete;

private:
    mutex& m_;
};

/// A held detail::mutex that a condition variable may release and re-take while it waits: pass
/// the object itself to std::condition_variable_any, or native() to std::condition_variable. A
/// wait returns with it held again, so the analysis keeps it held across the call.
class DLOCK_SCOPED_CAPABILITY unique_lock {
public:
    explicit unique_lock(mutex& m) DLOCK_ACQUIRE(m) : lock_(m.native()) {}
    ~unique_lock() DLOCK_RELEASE() = default;
    unique_lock(const unique_lock&) = delete;
    unique_lock& operator=(const unique_lock&) = delete;

    void lock() DLOCK_ACQUIRE() { lock_.lock(); }
    void unlock() DLOCK_RELEASE() { lock_.unlock(); }
    std::unique_lock<std::mutex>& native() noexcept { return lock_; }

private:
    std::unique_lock<std::mutex> lock_;
};

}  // namespace dlock::detail

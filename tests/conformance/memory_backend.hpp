// An in-memory lock service for the conformance suite: a real dlock::backend (every lock kind,
// fencing tokens, leases that expire, renewal, max_hold, FIFO queues, notification-driven
// waiting) whose state lives in this process only. It is the reference the server backends are
// held to, and the cheapest way to run the lock types' contract. It cannot be shared between
// processes, so the suite's multi-process tests skip it.
//
// Sharing: thread-safe, like every backend. One background thread renews and expires grants.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include <dlock/backend.hpp>

namespace dlock::test {

class memory_backend final : public dlock::backend {
public:
    /// The longest lock name accepted, in bytes (the same bound as the Redis client's).
    static constexpr std::size_t max_name_length = 1024;

    memory_backend();
    /// Stops the background thread. Leases still alive stay releasable (their state outlives
    /// the backend) but are no longer renewed.
    ~memory_backend() override;
    memory_backend(const memory_backend&) = delete;
    memory_backend& operator=(const memory_backend&) = delete;

    using dlock::backend::acquire_until;
    using dlock::backend::set_permits;
    /// See dlock::backend::acquire_until. Kinds: all. A name is used by one family of kinds at a
    /// time (exclusive, reentrant, fair, read/write, permits): another family's acquire while the
    /// name is in use is errc::unexpected_reply, as Redis answers WRONGTYPE.
    [[nodiscard]] dlock::lease acquire_until(std::string_view name,
                                             const dlock::lock_request& request,
                                             const dlock::lock_options& options,
                                             std::chrono::steady_clock::time_point deadline,
                                             std::error_code& ec) noexcept override;
    void set_permits(std::string_view name, std::uint32_t permits,
                     std::error_code& ec) noexcept override;

    /// See dlock::backend::record_once: kept for the backend's lifetime.
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

    /// Waiters queued on `name` (fair and write kinds), and grants held on it.
    std::size_t queued(std::string_view name) const;
    std::size_t held(std::string_view name) const;

    struct state;

private:
    std::shared_ptr<state> state_;
    std::thread watchdog_;
};

}  // namespace dlock::test

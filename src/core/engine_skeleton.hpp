// What every backend engine shares (Redis and Redlock, ZooKeeper; the next backend too), so no
// engine writes its own copy: the acquire prologue (the checks before any I/O) and the mapping
// of what escapes an entry point to an error code, the background thread's lifecycle across
// stop() and fork(), and the clients' forwarders to their engine. No backend includes here.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <stop_token>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include <dlock/backend.hpp>
#include <dlock/options.hpp>

#include "core/fork.hpp"
#include "core/status.hpp"

namespace dlock::detail {

/// acquire_until's checks before any I/O, one rule and one message each on every backend: the
/// name (at most `max_name_length`), the options, lock_request::reenter only with the reentrant
/// kind, and a semaphore's count within 1..limit. false with `ec` set (errc::invalid_argument,
/// the message naming the field) when one fails. Backend rules (a kind a backend lacks) follow.
bool check_acquire(std::string_view name, std::size_t max_name_length, const lock_request& request,
                   const lock_options& options, std::error_code& ec) noexcept;

/// Runs the body of a noexcept engine entry point and maps what escapes it to `ec`, the same way
/// on every backend: std::bad_alloc is "out of memory" (std::errc::not_enough_memory), a
/// std::system_error keeps its code and message, any other std::exception is
/// errc::protocol_error with its message. Returns the body's result, or a value-initialised one
/// after an exception.
template <class Body>
auto guarded(std::error_code& ec, Body&& body) noexcept -> decltype(body()) {
    try {
        return std::forward<Body>(body)();
    } catch (const std::bad_alloc&) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "out of memory");
    } catch (const std::system_error& e) {
        fail(ec, e.code(), e.what());
    } catch (const std::exception& e) {
        fail(ec, errc::protocol_error, e.what());
    }
    return decltype(body()){};
}

/// An engine's one background thread (docs/architecture.md, "The background thread per client").
class engine_thread {
public:
    /// Starts `run`, which returns once its stop token is stopped.
    template <class Run>
    void start(Run&& run) {
        worker_ = std::jthread(std::forward<Run>(run));
    }
    /// Stops the thread and joins it; `wake()` makes a sleeping run() see the stop request.
    /// Not in a forked child (see abandon). Idempotent.
    template <class Wake>
    void stop(Wake&& wake) noexcept {
        if (!worker_.joinable()) return;
        worker_.request_stop();
        std::forward<Wake>(wake)();
        worker_.join();
    }
    /// A forked child's copy: the thread runs only in the parent, so its handle must be neither
    /// joined nor detached here; it is kept, untouched, until the process ends.
    void abandon() noexcept {
        if (worker_.joinable()) keep_forever(std::make_shared<std::jthread>(std::move(worker_)));
    }

private:
    std::jthread worker_;
};

/// The start of stop() for an engine whose threads and sessions belong to the parent process in a
/// forked child (ZooKeeper, etcd): true in such a child, having kept the engine alive until the
/// process ends (`engine` itself while still owned, else, from its destructor, what `keep_rest`
/// keeps), so nothing of the parent's is joined, closed or revoked; false in the process that
/// made the engine, which then stops normally.
template <class Engine, class KeepRest>
bool kept_in_forked_child(Engine& engine, KeepRest&& keep_rest) noexcept {
    if (!engine.forked()) return false;
    if (auto self = engine.weak_from_this().lock()) {
        keep_forever(std::move(self));
    } else {
        std::forward<KeepRest>(keep_rest)();
    }
    return true;
}

/// A client's backend entry point: `call(engine)` on the engine of the client whose state is
/// `impl`, or a value-initialised result with `ec` set when the client cannot be used
/// (usable_engine: moved from, or created in the parent of this forked process).
template <class Impl, class Call>
auto with_engine(const std::shared_ptr<Impl>& impl, const char* what, std::error_code& ec,
                 Call&& call) noexcept {
    auto* engine = usable_engine(impl, what, ec);
    using result = decltype(call(*engine));
    if (engine == nullptr) {
        if constexpr (std::is_void_v<result>) {
            return;
        } else {
            return result{};
        }
    }
    return std::forward<Call>(call)(*engine);
}

}  // namespace dlock::detail

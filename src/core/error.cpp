#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>

namespace dlock {
namespace {

class dlock_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "dlock"; }
    std::string message(int value) const override {
        switch (static_cast<errc>(value)) {
            case errc::invalid_argument: return "invalid argument";
            case errc::timeout: return "the lock stayed held by someone else until the wait bound";
            case errc::attempts_exhausted:
                return "the attempts limit was reached while the lock was held";
            case errc::lock_lost: return "the lock was lost";
            case errc::not_owner: return "the lock is not held by this owner";
            case errc::connection_failed: return "could not connect to the server";
            case errc::server_timeout: return "the server did not answer in time";
            case errc::auth_failed: return "authentication failed";
            case errc::protocol_error: return "the server's reply is not valid protocol";
            case errc::unexpected_reply: return "the server's reply has an unexpected type";
            case errc::server_error: return "the server answered with an error";
            case errc::unsupported: return "not supported by this build";
            case errc::quorum_unreachable: return "no quorum of servers could be reached";
            case errc::canceled: return "the wait was canceled";
        }
        return "unknown dlock error";
    }
};

}  // namespace

const std::error_category& category() noexcept {
    static const dlock_category instance;
    return instance;
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

bool is_contention(std::error_code ec) noexcept {
    return ec == errc::timeout || ec == errc::attempts_exhausted;
}

const char* to_string(event_kind kind) noexcept {
    switch (kind) {
        case event_kind::wait_started: return "wait_started";
        case event_kind::acquired: return "acquired";
        case event_kind::renewed: return "renewed";
        case event_kind::released: return "released";
        case event_kind::lost: return "lost";
        case event_kind::error: return "error";
        case event_kind::gave_up: return "gave_up";
        case event_kind::renewal_failed: return "renewal_failed";
        case event_kind::node_failed: return "node_failed";
    }
    return "unknown";
}

const char* to_string(lock_state state) noexcept {
    switch (state) {
        case lock_state::held: return "held";
        case lock_state::uncertain: return "uncertain";
        case lock_state::lost: return "lost";
    }
    return "unknown";
}

const char* to_string(lost_reason reason) noexcept {
    switch (reason) {
        case lost_reason::none: return "none";
        case lost_reason::released: return "released";
        case lost_reason::expired: return "expired";
        case lost_reason::max_hold: return "max_hold";
        case lost_reason::taken_over: return "taken_over";
        case lost_reason::deleted: return "deleted";
        case lost_reason::session_expired: return "session_expired";
        case lost_reason::client_closed: return "client_closed";
    }
    return "unknown";
}

}  // namespace dlock

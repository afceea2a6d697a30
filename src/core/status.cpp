#include "core/status.hpp"

#include <utility>

namespace dlock::detail {
namespace {
struct stored_message {
    std::error_code code;
    std::string text;
};
thread_local stored_message last;
}  // namespace

void fail(std::error_code& ec, std::error_code code, std::string message) noexcept {
    ec = code;
    try {
        last.code = code;
        last.text = std::move(message);
    } catch (...) {
        last.code.clear();  // out of memory: fall back to the code's own message
    }
}

void fail(std::error_code& ec, errc code, std::string message) noexcept {
    fail(ec, make_error_code(code), std::move(message));
}

std::string message_for(const std::error_code& ec) {
    if (ec && last.code == ec && !last.text.empty()) return last.text;
    return ec.message();
}

void throw_if(const std::error_code& ec) {
    if (ec) throw error(ec, message_for(ec));
}

}  // namespace dlock::detail

namespace dlock {

std::string last_error_message(const std::error_code& ec) {
    if (!ec) return {};
    return detail::message_for(ec);
}

std::string last_error_message() { return detail::last.text; }

}  // namespace dlock

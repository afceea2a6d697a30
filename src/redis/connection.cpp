#include "redis/connection.hpp"

#include <array>

#include "core/status.hpp"

namespace dlock::redis::detail {

using dlock::detail::deadline_after;
using dlock::detail::fail;

bool is_auth_error(const reply& r) noexcept {
    if (!r.is_error()) return false;
    const std::string_view t = r.text;
    return t.starts_with("WRONGPASS") || t.starts_with("NOAUTH") || t.starts_with("NOPERM") ||
           t.starts_with("ERR invalid password") || t.find("called without any password configured") != t.npos ||
           t.find("invalid username-password") != t.npos;
}

connection::connection(const connection_settings& settings) : settings_(settings) {}

void connection::close() noexcept {
    if (transport_) transport_->close();
    decoder_.reset();
}

void connection::open(std::error_code& ec) {
    if (is_open()) return;
    const auto& ep = settings_.endpoint;
    if (!transport_) {
        transport_ = make_transport(ep, ec);
        if (ec) return;
    }
    decoder_.reset();
    const auto deadline = deadline_after(steady::now(), settings_.connect_timeout);
    transport_->connect(deadline, ec);
    if (ec) return close();

    std::vector<command_args> hello;
    const std::string db = std::to_string(ep.db);
    if (ep.has_password) {
        if (ep.user.empty()) hello.push_back({"AUTH", ep.password});
        else hello.push_back({"AUTH", ep.user, ep.password});
    }
    if (ep.db != 0) hello.push_back({"SELECT", db});
    if (!settings_.client_name.empty()) hello.push_back({"CLIENT", "SETNAME", settings_.client_name});
    if (hello.empty()) return;

    out_buffer_.clear();
    for (const auto& c : hello) append_command(out_buffer_, c);
    transport_->write_all(out_buffer_, deadline, ec);
    if (ec) return close();
    for (std::size_t i = 0; i < hello.size(); ++i) {
        reply r;
        if (!read_reply(r, deadline, true, ec)) return close();
        if (!r.is_error()) continue;
        const auto what = "redis " + ep.describe() + ": " + std::string(hello[i][0]) + ": " + r.text;
        close();
        if (is_auth_error(r)) return fail(ec, errc::auth_failed, what);
        return fail(ec, errc::server_error, what);
    }
}

std::vector<reply> connection::pipeline(const std::vector<command_args>& commands, std::error_code& ec) {
    std::vector<reply> replies;
    // Between requests nothing may be pending. If something is, the server closed the connection
    // while it idled in the pool (restart, timeout): reconnect now, before a request is sent on it
    // and its outcome becomes unknowable.
    if (is_open() && transport_->idle_stream_broken()) close();
    open(ec);
    if (ec) return replies;
    const auto deadline = deadline_after(steady::now(), settings_.command_timeout);
    out_buffer_.clear();
    for (const auto& c : commands) append_command(out_buffer_, c);
    transport_->write_all(out_buffer_, deadline, ec);
    if (ec) {
        close();
        return replies;
    }
    replies.resize(commands.size());
    for (auto& r : replies) {
        if (!read_reply(r, deadline, true, ec)) {
            close();
            replies.clear();
            return replies;
        }
        if (is_auth_error(r)) {
            // The server demands credentials we lack (or our user lost a permission).
            const auto what = "redis " + settings_.endpoint.describe() + ": " + r.text;
            close();
            replies.clear();
            fail(ec, errc::auth_failed, what);
            return replies;
        }
    }
    return replies;
}

reply connection::execute(const command_args& command, std::error_code& ec) {
    auto replies = pipeline({command}, ec);
    if (ec) return {};
    return std::move(replies.front());
}

void connection::send(const command_args& command, std::error_code& ec) {
    open(ec);
    if (ec) return;
    out_buffer_.clear();
    append_command(out_buffer_, command);
    transport_->write_all(out_buffer_, deadline_after(steady::now(), settings_.command_timeout), ec);
    if (ec) close();
}

bool connection::receive(reply& out, steady::time_point deadline, std::error_code& ec) {
    if (!is_open()) {
        fail(ec, errc::connection_failed, "redis " + settings_.endpoint.describe() + ": not connected");
        return false;
    }
    if (read_reply(out, deadline, false, ec)) return true;
    if (ec) close();
    return false;
}

bool connection::read_reply(reply& out, steady::time_point deadline, bool timeout_is_error, std::error_code& ec) {
    std::array<char, 16 * 1024> buffer;
    for (;;) {
        if (decoder_.next(out, ec)) return true;
        if (ec) {
            dlock::detail::fail(ec, errc::protocol_error,
                                "redis " + settings_.endpoint.describe() + ": " + dlock::detail::message_for(ec));
            return false;
        }
        const auto n = transport_->read_some(buffer.data(), buffer.size(), deadline, ec);
        if (ec) {
            if (ec == errc::server_timeout && !timeout_is_error) ec.clear();
            return false;
        }
        decoder_.feed({buffer.data(), n}, ec);
        if (ec) return false;
    }
}

}  // namespace dlock::redis::detail

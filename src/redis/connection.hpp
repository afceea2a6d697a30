// One connection to a Redis server: a transport plus the RESP codec, opened lazily with AUTH,
// SELECT and CLIENT SETNAME pipelined in one round trip, and reopened on the next use after any
// failure (that is how a restarted server is survived). Not thread-safe: the client pools them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/reply.hpp>

#include "core/url.hpp"
#include "redis/codec.hpp"
#include "redis/transport.hpp"

namespace dlock::redis::detail {

using command_args = std::vector<std::string_view>;

struct connection_settings {
    dlock::detail::redis_endpoint endpoint;
    std::chrono::milliseconds connect_timeout{};
    std::chrono::milliseconds command_timeout{};
    std::string client_name;  ///< CLIENT SETNAME, so CLIENT LIST shows who is who
};

class connection {
public:
    explicit connection(const connection_settings& settings);

    bool is_open() const noexcept { return transport_ && transport_->native_handle() >= 0; }
    /// Connects and authenticates if not open. Errors: connection_failed, server_timeout, auth_failed.
    void open(std::error_code& ec);
    void close() noexcept;

    /// Sends `commands` in one write and reads one reply each, bounded by command_timeout.
    /// Error replies come back as replies; transport and protocol failures set ec and close.
    std::vector<reply> pipeline(const std::vector<command_args>& commands, std::error_code& ec);
    reply execute(const command_args& command, std::error_code& ec);

    /// Subscriber use: send without waiting, and take replies as they come.
    void send(const command_args& command, std::error_code& ec);
    /// true and `out` set when a reply arrived before `deadline`; false at the deadline (the
    /// connection stays open) or on failure (ec set, connection closed).
    bool receive(reply& out, steady::time_point deadline, std::error_code& ec);
    int native_handle() const noexcept { return transport_ ? transport_->native_handle() : -1; }

    const connection_settings& settings() const noexcept { return settings_; }

private:
    bool read_reply(reply& out, steady::time_point deadline, bool timeout_is_error, std::error_code& ec);

    const connection_settings& settings_;
    std::unique_ptr<transport> transport_;
    reply_decoder decoder_;
    std::string out_buffer_;
};

/// Maps an error reply that means "wrong credentials" (WRONGPASS, NOAUTH, ...) to auth_failed;
/// true if it did.
bool is_auth_error(const reply& r) noexcept;

}  // namespace dlock::redis::detail

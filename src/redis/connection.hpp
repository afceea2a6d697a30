// One connection to a Redis server: a non-blocking transport plus the RESP codec. It connects
// lazily, sends AUTH / SELECT / CLIENT SETNAME in the same write as the first request (no extra
// round trip), and is reopened on the next use after any failure (that is how a restarted server
// is survived). An exchange is begun, then advanced on poll(2) readiness; `exchange_all` drives
// exchanges with several servers from one thread at once, and `pipeline` is the one-server case.
// Not thread-safe: clients pool them.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/reply.hpp>

#include "redis/url.hpp"
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
    /// `settings` is an immutable snapshot, shared with the node that made it (node.hpp): a
    /// node that moves publishes new settings and never changes the ones a connection uses.
    explicit connection(std::shared_ptr<const connection_settings> settings);

    bool is_open() const noexcept { return transport_ && transport_->native_handle() >= 0; }
    void close() noexcept;
    const connection_settings& settings() const noexcept { return settings_; }
    int native_handle() const noexcept { return transport_ ? transport_->native_handle() : -1; }

    /// Whether this connection's server refused Redis Functions (scripts.hpp: Redis 6, an ACL
    /// without FCALL or FUNCTION LOAD, a library it would not load): its scripts go by EVALSHA
    /// until the connection is closed.
    bool functions_refused() const noexcept { return functions_refused_; }
    void refuse_functions() noexcept { functions_refused_ = true; }

    /// now + command_timeout, plus connect_timeout when the connection must be opened first.
    steady::time_point default_deadline() const noexcept;

    // --- one exchange: begin, then advance on readiness until done ---
    /// Queues `commands` (after the handshake if the connection must be opened first; a pooled
    /// connection the server closed while idle is reopened). Sets ec if connecting failed at once.
    void begin(const std::vector<command_args>& commands, std::error_code& ec);
    /// poll(2) events the connection waits for: the transport's (connect, handshake, read, and
    /// write while bytes are queued), never a fixed POLLIN / POLLOUT.
    short wanted_events() const noexcept;
    /// True when the transport holds bytes it read ahead that poll(2) cannot report: advance()
    /// (or receive()) without waiting.
    bool buffered() const noexcept;
    /// Makes progress without blocking, given the poll(2) events seen (0 right after begin(): write
    /// only); true once every reply of the exchange is in. A failure (including a refused
    /// handshake: auth_failed) sets ec and closes the connection.
    bool advance(std::error_code& ec, short revents);
    /// The replies of the finished exchange, in command order.
    std::vector<reply> take_replies() noexcept { return std::move(replies_); }
    /// Gives up on the exchange at its deadline: closes (the stream is out of step) and sets ec.
    void expire(std::error_code& ec);

    // --- blocking helpers ---
    /// Sends `commands` in one write and waits for all replies, bounded by command_timeout (plus
    /// connect_timeout when it must connect first). Error replies come back as replies, except
    /// those meaning "wrong or missing credentials", which set errc::auth_failed. `latest` cuts
    /// the bound further (the watchdog must not block past a lease's deadline).
    std::vector<reply> pipeline(const std::vector<command_args>& commands, std::error_code& ec,
                                steady::time_point latest = steady::time_point::max());
    reply execute(const command_args& command, std::error_code& ec);
    /// Connects and authenticates if not open (subscriber use), by `latest` at the latest.
    void open(std::error_code& ec, steady::time_point latest = steady::time_point::max());
    /// Subscriber use: queue a command whose replies arrive as a stream, and write it out, by
    /// command_timeout and by `latest` at the latest.
    void send(const command_args& command, std::error_code& ec,
              steady::time_point latest = steady::time_point::max());
    /// true and `out` set when a reply is available before `deadline`; false at the deadline (the
    /// connection stays open) or on failure (ec set, connection closed).
    bool receive(reply& out, steady::time_point deadline, std::error_code& ec);
    /// Subscriber use, for a reader that poll(2) found readable: reads what has arrived, without
    /// waiting; take the replies with next_read(). false on failure (ec set, connection closed).
    bool read_ready(std::error_code& ec);
    /// A reply already read, without reading: false when none is left.
    bool next_read(reply& out);

private:
    enum class phase { closed, connecting, handshaking, ready };
    bool flush(std::error_code& ec);
    bool read_available(std::error_code& ec);

    const std::shared_ptr<const connection_settings> snapshot_;  // keeps settings_ alive
    const connection_settings& settings_;                        // *snapshot_
    std::unique_ptr<transport> transport_;
    reply_decoder decoder_;
    phase phase_ = phase::closed;
    std::string out_;  // bytes queued for the server
    std::size_t out_sent_ = 0;
    std::size_t handshake_left_ = 0;  // handshake replies still to come (they precede the others)
    std::vector<std::string> handshake_names_;
    std::size_t expected_ = 0;  // replies of the current exchange still to come
    std::vector<reply> replies_;
    bool streaming_ = false;          // subscriber mode: replies are taken with receive()
    steady::time_point last_used_{};  // start of the last exchange
    bool functions_refused_ = false;
};

/// Whether error text `text` is an ACL's refusal of Redis Functions (FCALL, FUNCTION LOAD): not a
/// credentials failure; the scripts then run by EVALSHA (scripts.cpp).
bool refuses_functions(std::string_view text) noexcept;

/// One server's part in exchange_all.
struct exchange {
    connection* conn = nullptr;
    std::vector<command_args> commands{};
    steady::time_point deadline{};
    std::vector<reply> replies{};  ///< set on success
    std::error_code ec{};          ///< set on failure
    std::string error{};           ///< the failure's message (names the server)
};

/// Runs every exchange at once from this thread: all requests are written before any reply is
/// awaited, so the whole fan-out costs about one round trip, and a dead or slow server costs only
/// its own deadline. Returns when each exchange has its replies, failed, or reached its deadline.
/// A reply meaning "wrong or missing credentials" fails its exchange with errc::auth_failed.
void exchange_all(std::span<exchange> exchanges);

/// true for error replies that mean "wrong or missing credentials" (WRONGPASS, NOAUTH, ...).
bool is_auth_error(const reply& r) noexcept;

/// The reply decoder's error worded for a person: a first byte that is no RESP type byte means
/// the peer is not a Redis server ("not a Redis server (the reply looks like HTTP ...)").
/// Any other error is returned as is.
std::string not_redis_hint(const std::string& decoder_error);

}  // namespace dlock::redis::detail

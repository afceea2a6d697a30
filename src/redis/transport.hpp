// Byte streams to a Redis server, non-blocking: TCP and Unix sockets. Callers wait for readiness
// with poll(2) themselves (connection.cpp), which is what lets one thread drive exchanges with
// many servers at once (Redlock's parallel fan-out). The protocol lives in codec.hpp; a TLS
// stream is one more transport.
//
// A stream is connected (start_connect / finish_connect), then runs its handshake (nothing for a
// plain socket; TLS's for a TLS stream), then carries bytes. After a call that would block, the
// caller polls for `wanted_events(op)` of that call, never for a fixed POLLOUT / POLLIN: a TLS
// stream may have to read in order to write, and to write in order to read. Bytes the stream has
// already taken off the socket (`buffered()`) are read before polling again.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <system_error>

#include "core/time.hpp"
#include "redis/url.hpp"

namespace dlock::redis::detail {

using dlock::detail::steady;

/// What a caller of a transport was doing when it would block.
enum class stream_op : unsigned char { handshake, read, write };

class transport {
public:
    virtual ~transport() = default;
    /// Starts connecting without blocking. true when already connected; false when in progress
    /// (wait for POLLOUT, then finish_connect). Sets errc::connection_failed when refused at once.
    virtual bool start_connect(std::error_code& ec) = 0;
    /// Completes a connect after POLLOUT. true when connected; false when another address of the
    /// host is being tried (wait for POLLOUT again). Sets errc::connection_failed on failure.
    virtual bool finish_connect(std::error_code& ec) = 0;
    /// The step between connecting and the first write, without blocking: true when done; false
    /// when it would block (poll for wanted_events(stream_op::handshake)). Sets
    /// errc::connection_failed with the cause on failure. Plain sockets have none (true at once).
    virtual bool handshake(std::error_code& ec) = 0;
    /// Writes what the socket accepts now; 0 when it would block.
    virtual std::size_t write_some(std::string_view bytes, std::error_code& ec) = 0;
    /// Reads what is available now; 0 when nothing is. errc::connection_failed when the peer
    /// closed.
    virtual std::size_t read_some(char* buffer, std::size_t size, std::error_code& ec) = 0;
    /// poll(2) events to wait for before retrying `op` after it would block.
    virtual short wanted_events(stream_op op) const noexcept = 0;
    /// True when bytes already taken off the socket wait to be read (TLS records read ahead):
    /// poll(2) will not report them.
    virtual bool buffered() const noexcept = 0;
    /// True if an idle stream has something pending (EOF, reset, stray bytes): the server closed it
    /// (restart, idle timeout) and the next request would fail. Non-blocking.
    virtual bool idle_stream_broken() const noexcept = 0;
    /// The pollable descriptor, or -1 when closed.
    virtual int native_handle() const noexcept = 0;
    virtual void close() noexcept = 0;
};

/// A transport for `endpoint`: a socket, or TLS over one for rediss:// (tls_transport.hpp;
/// errc::invalid_argument when its CA or certificate files cannot be loaded).
std::unique_ptr<transport> make_transport(const dlock::detail::redis_endpoint& endpoint,
                                          std::error_code& ec);

/// The plain TCP or Unix socket transport for `endpoint` (what TLS runs over).
std::unique_ptr<transport> make_socket_transport(const dlock::detail::redis_endpoint& endpoint);

}  // namespace dlock::redis::detail

// Byte streams to a Redis server with deadlines: TCP and Unix sockets, non-blocking under poll(2).
// The protocol lives in codec.hpp; a TLS stream would be one more transport.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <system_error>

#include "core/time.hpp"
#include "core/url.hpp"

namespace dlock::redis::detail {

using dlock::detail::steady;

class transport {
public:
    virtual ~transport() = default;
    /// Opens the stream; errc::connection_failed, errc::server_timeout at the deadline.
    virtual void connect(steady::time_point deadline, std::error_code& ec) = 0;
    virtual void write_all(std::string_view bytes, steady::time_point deadline, std::error_code& ec) = 0;
    /// Reads what is available (waiting until the deadline for the first byte). Returns 0 and sets
    /// errc::server_timeout at the deadline; sets errc::connection_failed when the peer closed.
    virtual std::size_t read_some(char* buffer, std::size_t size, steady::time_point deadline,
                                  std::error_code& ec) = 0;
    /// True if an idle stream has something pending (EOF, reset, stray bytes): the server closed it
    /// (restart, idle timeout) and the next request would fail. Non-blocking.
    virtual bool idle_stream_broken() const noexcept = 0;
    /// The pollable descriptor, or -1 when closed.
    virtual int native_handle() const noexcept = 0;
    virtual void close() noexcept = 0;
};

/// A transport for `endpoint`; errc::unsupported for TLS, which this build lacks.
std::unique_ptr<transport> make_transport(const dlock::detail::redis_endpoint& endpoint, std::error_code& ec);

}  // namespace dlock::redis::detail

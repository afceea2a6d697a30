// RESP2 encoding and decoding with no I/O: commands are written as RESP arrays of bulk strings
// in place (append_command), replies are parsed by hiredis 0.14's reply reader (it works without
// a socket). Any transport (TCP, Unix, a future TLS stream) feeds bytes in and takes bytes out;
// this is what keeps rediss:// a transport-only addition.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/reply.hpp>

struct redisReader;

namespace dlock::redis::detail {

/// Appends one command, as a RESP array of bulk strings, to `out`.
void append_command(std::string& out, const std::vector<std::string_view>& args);

/// Incremental reply parser: feed() bytes as they arrive, then take complete replies with next().
/// Not thread-safe; one per connection.
class reply_decoder {
public:
    reply_decoder();
    ~reply_decoder();
    reply_decoder(const reply_decoder&) = delete;
    reply_decoder& operator=(const reply_decoder&) = delete;

    /// Feeds raw bytes; sets errc::protocol_error if the reader is already broken.
    void feed(std::string_view bytes, std::error_code& ec);
    /// true and `out` set when a whole reply is buffered; false when more bytes are needed.
    /// Malformed input sets errc::protocol_error; the decoder must then be reset().
    bool next(reply& out, std::error_code& ec);
    /// Drops buffered bytes and any error (after the connection was reopened).
    void reset();

private:
    struct reader_deleter {
        void operator()(redisReader* r) const noexcept;
    };
    std::unique_ptr<redisReader, reader_deleter> reader_;
};

}  // namespace dlock::redis::detail

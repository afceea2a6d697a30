#include "redis/codec.hpp"

#include <hiredis/hiredis.h>

#include <charconv>
#include <new>

#include "core/status.hpp"

namespace dlock::redis::detail {
namespace {

reply convert(const redisReply& r) {
    reply out;
    switch (r.type) {
        case REDIS_REPLY_STRING:
            out.type = reply::kind::string;
            out.text.assign(r.str, r.len);
            break;
        case REDIS_REPLY_STATUS:
            out.type = reply::kind::status;
            out.text.assign(r.str, r.len);
            break;
        case REDIS_REPLY_ERROR:
            out.type = reply::kind::error;
            out.text.assign(r.str, r.len);
            break;
        case REDIS_REPLY_INTEGER:
            out.type = reply::kind::integer;
            out.integer = r.integer;
            break;
        case REDIS_REPLY_ARRAY:
            out.type = reply::kind::array;
            out.elements.reserve(r.elements);
            for (std::size_t i = 0; i < r.elements; ++i)
                out.elements.push_back(convert(*r.element[i]));
            break;
        default: out.type = reply::kind::nil; break;
    }
    return out;
}

}  // namespace

void append_command(std::string& out, const std::vector<std::string_view>& args) {
    // The RESP array of bulk strings that redisFormatCommandArgv builds, written in place: that
    // one allocated three buffers and ran printf for every length, which showed in the renewal
    // thread's profile (docs/benchmarks.md, W6).
    char digits[24];
    const auto header = [&](char type, std::size_t n) {
        const auto r = std::to_chars(digits, digits + sizeof digits, n);
        out.push_back(type);
        out.append(digits, r.ptr);
        out.append("\r\n", 2);
    };
    const auto before = out.size();
    try {
        header('*', args.size());
        for (const auto& a : args) {
            header('$', a.size());
            out.append(a);
            out.append("\r\n", 2);
        }
    } catch (...) {
        out.resize(before);  // all of the command or none of it: never half of one on the wire
        throw;
    }
}

void reply_decoder::reader_deleter::operator()(redisReader* r) const noexcept {
    redisReaderFree(r);
}

reply_decoder::reply_decoder() : reader_(redisReaderCreate()) {
    if (!reader_) throw std::bad_alloc();
}

reply_decoder::~reply_decoder() = default;

void reply_decoder::feed(std::string_view bytes, std::error_code& ec) {
    if (redisReaderFeed(reader_.get(), bytes.data(), bytes.size()) != REDIS_OK) {
        dlock::detail::fail(ec, errc::protocol_error,
                            std::string("invalid reply: ") + reader_->errstr);
    }
}

bool reply_decoder::next(reply& out, std::error_code& ec) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
        dlock::detail::fail(ec, errc::protocol_error,
                            std::string("invalid reply: ") + reader_->errstr);
        return false;
    }
    if (raw == nullptr) return false;
    auto* r = static_cast<redisReply*>(raw);
    try {
        out = convert(*r);
    } catch (...) {
        freeReplyObject(r);
        throw;
    }
    freeReplyObject(r);
    return true;
}

void reply_decoder::reset() {
    reader_.reset(redisReaderCreate());
    if (!reader_) throw std::bad_alloc();
}

}  // namespace dlock::redis::detail

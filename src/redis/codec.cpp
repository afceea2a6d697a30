#include "redis/codec.hpp"

#include <hiredis/hiredis.h>

#include <cstdlib>
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
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    argv.reserve(args.size());
    lengths.reserve(args.size());
    for (const auto& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    char* formatted = nullptr;
    const int n = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), argv.data(),
                                         lengths.data());
    if (n < 0 || formatted == nullptr) throw std::bad_alloc();
    out.append(formatted, static_cast<std::size_t>(n));
    std::free(formatted);  // hiredis 0.14 allocates with malloc and has no redisFreeCommand
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

#include "redis/connection.hpp"
#include <cstdlib>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <array>

#include "core/status.hpp"

namespace dlock::redis::detail {

using dlock::detail::deadline_after;
using dlock::detail::fail;

bool refuses_functions(std::string_view text) noexcept {
    return text.starts_with("NOPERM") &&
           (text.find("'fcall'") != text.npos || text.find("'function|load'") != text.npos);
}

bool is_auth_error(const reply& r) noexcept {
    if (!r.is_error()) return false;
    const std::string_view t = r.text;
    if (refuses_functions(t)) return false;
    return t.starts_with("WRONGPASS") || t.starts_with("NOAUTH") || t.starts_with("NOPERM") ||
           t.starts_with("ERR invalid password") ||
           t.find("called without any password configured") != t.npos ||
           t.find("invalid username-password") != t.npos;
}

std::string not_redis_hint(const std::string& decoder_error) {
    // hiredis: "Protocol error, got \"<\" as reply type byte": the first byte of a reply is not
    // one of RESP's type bytes, so what answers is not a Redis server at all.
    const auto got = decoder_error.find("got \"");
    if (decoder_error.find("as reply type byte") == std::string::npos || got == std::string::npos ||
        got + 5 >= decoder_error.size())
        return decoder_error;
    const char first = decoder_error[got + 5];
    if (first == '<' || first == 'H') {
        return "not a Redis server (the reply looks like HTTP or HTML: got '" +
               std::string(1, first) + "' where a Redis reply starts)";
    }
    return "not a Redis server (its reply does not follow the Redis protocol: " + decoder_error +
           ")";
}

connection::connection(std::shared_ptr<const connection_settings> settings)
    : snapshot_(std::move(settings)), settings_(*snapshot_) {}

void connection::close() noexcept {
    if (transport_) transport_->close();
    decoder_.reset();
    phase_ = phase::closed;
    out_.clear();
    out_sent_ = 0;
    handshake_left_ = 0;
    handshake_names_.clear();
    expected_ = 0;
    replies_.clear();
    streaming_ = false;
    functions_refused_ = false;  // the next server (a failover's) may have them
}

void connection::begin(const std::vector<command_args>& commands, std::error_code& ec) {
    // Between exchanges nothing may be pending. If something is, the server closed the connection
    // while it idled in the pool (restart, timeout): reconnect now, before a request is sent on it
    // and its outcome becomes unknowable.
    // (Only after a real pause: a connection used a moment ago was fine then, and the check costs
    // a syscall per request in hot loops.)
    const auto now = steady::now();
    if (phase_ == phase::ready && !streaming_ && now - last_used_ > std::chrono::milliseconds(50) &&
        transport_->idle_stream_broken()) {
        close();
    }
    last_used_ = now;
    replies_.clear();
    if (phase_ == phase::closed) {
        if (!transport_) {
            transport_ = make_transport(settings_.endpoint, ec);
            if (ec) return;
        }
        decoder_.reset();
        phase_ = transport_->start_connect(ec) ? phase::handshaking : phase::connecting;
        if (ec) return close();
        const auto& ep = settings_.endpoint;
        std::vector<command_args> hello;
        const std::string db = std::to_string(ep.db);
        if (ep.has_password) {
            if (ep.user.empty())
                hello.push_back({"AUTH", ep.password});
            else
                hello.push_back({"AUTH", ep.user, ep.password});
        }
        if (ep.db != 0) hello.push_back({"SELECT", db});
        if (!settings_.client_name.empty())
            hello.push_back({"CLIENT", "SETNAME", settings_.client_name});
        for (const auto& c : hello) {
            append_command(out_, c);
            handshake_names_.emplace_back(c.front());
        }
        handshake_left_ = hello.size();
    }
    for (const auto& c : commands) append_command(out_, c);
    expected_ += commands.size();
}

short connection::wanted_events() const noexcept {
    if (phase_ == phase::connecting) return POLLOUT;
    if (phase_ == phase::handshaking) return transport_->wanted_events(stream_op::handshake);
    const short writing =
        out_sent_ < out_.size() ? transport_->wanted_events(stream_op::write) : short{0};
    return static_cast<short>(transport_->wanted_events(stream_op::read) | writing);
}

bool connection::buffered() const noexcept {
    return phase_ == phase::ready && transport_->buffered();
}

bool connection::flush(std::error_code& ec) {
    while (out_sent_ < out_.size()) {
        const auto n = transport_->write_some(std::string_view(out_).substr(out_sent_), ec);
        if (ec) return false;
        if (n == 0) return true;  // would block: wait for wanted_events()
        out_sent_ += n;
    }
    out_.clear();
    out_sent_ = 0;
    return true;
}

bool connection::read_available(std::error_code& ec) {
    std::array<char, std::size_t{16} * 1024> buffer;
    // A read that did not fill the buffer emptied the socket (and the transport holds nothing
    // more): what came is decoded, and no recv() follows just to hear EAGAIN. Bytes that arrive
    // later make the socket readable again for the caller's poll(2).
    bool drained = false;
    for (;;) {
        reply r;
        while (decoder_.next(r, ec)) {
            if (handshake_left_ > 0) {
                const auto name = handshake_names_[handshake_names_.size() - handshake_left_];
                --handshake_left_;
                if (r.is_error()) {
                    const auto what =
                        "redis " + settings_.endpoint.describe() + ": " + name + ": " + r.text;
                    fail(ec, is_auth_error(r) ? errc::auth_failed : errc::server_error, what);
                    return false;
                }
                continue;
            }
            if (streaming_) {
                replies_.push_back(std::move(r));
                continue;
            }
            if (expected_ == 0) {
                fail(ec, errc::protocol_error,
                     "redis " + settings_.endpoint.describe() + ": unsolicited reply");
                return false;
            }
            --expected_;
            replies_.push_back(std::move(r));
        }
        if (ec) {
            fail(ec, errc::protocol_error,
                 "redis " + settings_.endpoint.describe() + ": " +
                     not_redis_hint(dlock::detail::message_for(ec)));
            return false;
        }
        // An exchange is complete once its replies are in: no recv() just to hear EAGAIN.
        if (drained || (!streaming_ && expected_ == 0 && handshake_left_ == 0)) return true;
        const auto n = transport_->read_some(buffer.data(), buffer.size(), ec);
        if (ec) return false;
        if (n == 0) return true;
        decoder_.feed({buffer.data(), n}, ec);
        if (ec) return false;
        drained = n < buffer.size() && !transport_->buffered();
    }
}

bool connection::advance(std::error_code& ec, short revents) {
    if (phase_ == phase::closed) {
        fail(ec, errc::connection_failed,
             "redis " + settings_.endpoint.describe() + ": not connected");
        return false;
    }
    if (phase_ == phase::connecting) {
        if ((revents & (POLLOUT | POLLERR | POLLHUP)) == 0) return false;  // still connecting
        if (!transport_->finish_connect(ec)) {
            if (ec) close();
            return false;
        }
        phase_ = phase::handshaking;
    }
    if (phase_ == phase::handshaking) {
        if (!transport_->handshake(ec)) {
            if (ec) close();
            return false;
        }
        phase_ = phase::ready;
        revents = 0;  // the events seen were the handshake's
    }
    // Read only when poll(2) said so (or the stream holds bytes poll(2) cannot see): right after
    // a write the reply cannot be there yet, and an extra recv() per request is measurable
    // (docs/benchmarks.md).
    const short readable =
        static_cast<short>(transport_->wanted_events(stream_op::read) | POLLHUP | POLLERR);
    if (!flush(ec) ||
        (((revents & readable) != 0 || transport_->buffered()) && !read_available(ec))) {
        close();
        return false;
    }
    return handshake_left_ == 0 && expected_ == 0 && out_.empty();
}

void connection::expire(std::error_code& ec) {
    const bool connecting = phase_ == phase::connecting || phase_ == phase::handshaking;
    close();
    fail(ec, errc::server_timeout,
         "redis " + settings_.endpoint.describe() +
             (connecting ? ": connect timed out" : ": no reply in time"));
}

namespace {

/// Takes the replies of a finished exchange; a reply meaning "wrong or missing credentials" fails
/// the whole exchange with auth_failed (the server demands credentials we lack, or our ACL user
/// lost a permission).
void finish(exchange& x) {
    x.replies = x.conn->take_replies();
    for (const auto& r : x.replies) {
        if (!is_auth_error(r)) continue;
        x.conn->close();
        fail(x.ec, errc::auth_failed,
             "redis " + x.conn->settings().endpoint.describe() + ": " + r.text);
        x.error = dlock::detail::message_for(x.ec);
        x.replies.clear();
        return;
    }
}

// Advances `x` with what its socket has ready now, without waiting. True once `x` is done: all
// replies read (finished) or failed (x.ec and x.error set).
bool drain_ready(exchange& x) {
    for (;;) {
        pollfd p{x.conn->native_handle(), x.conn->wanted_events(), 0};
        if ((::poll(&p, 1, 0) <= 0 || p.revents == 0) && !x.conn->buffered()) return false;
        if (x.conn->advance(x.ec, p.revents)) {
            finish(x);
            return true;
        }
        if (x.ec) {
            x.error = dlock::detail::message_for(x.ec);
            return true;
        }
    }
}

// poll(2) over a fan-out's sockets. While every request is written and only replies are awaited,
// the thread sleeps on the socket written last (the reply most likely to come last) and then
// looks at all of them without sleeping: the replies that came first wait in their sockets
// instead of each waking the thread, one wake-up per fan-out rather than one per server
// (docs/benchmarks.md, "Fewer wake-ups on Redlock"). The timeout is the earliest deadline of all,
// so a silent server costs no more than before.
int wait_for_replies(std::vector<pollfd>& fds, int timeout_ms) {
    const bool only_replies =
        fds.size() > 1 && timeout_ms != 0 &&
        std::all_of(fds.begin(), fds.end(), [](const pollfd& p) { return p.events == POLLIN; });
    if (only_replies) {
        const int n = ::poll(&fds.back(), 1, timeout_ms);
        if (n <= 0) return n;
    }
    return ::poll(fds.data(), fds.size(), only_replies ? 0 : timeout_ms);
}

}  // namespace

steady::time_point connection::default_deadline() const noexcept {
    const auto bound = deadline_after(steady::now(), settings_.command_timeout);
    return is_open() ? bound : deadline_after(bound, settings_.connect_timeout);
}

void exchange_all(std::span<exchange> exchanges) {
    std::vector<exchange*> active;
    for (auto& x : exchanges) {
        x.ec.clear();
        x.conn->begin(x.commands, x.ec);
        // Write at once where the socket is ready: requests leave before any reply is awaited.
        if (!x.ec && x.conn->advance(x.ec, 0)) {
            finish(x);
        } else if (x.ec) {
            x.error = dlock::detail::message_for(x.ec);
        } else {
            active.push_back(&x);
        }
    }
    std::vector<pollfd> fds;
    while (!active.empty()) {
        const auto now = steady::now();
        auto next_deadline = steady::time_point::max();
        fds.clear();
        bool buffered = false;  // bytes poll(2) cannot see wait in a stream: do not sleep
        for (auto it = active.begin(); it != active.end();) {
            auto& x = **it;
            if (now >= x.deadline) {
                // The reply may be waiting in the socket: this process may not have run between
                // sending and now (SIGSTOP, a VM freeze, a busy CPU), so the deadline says nothing
                // about the server. Read what is there before giving up: a late reply is a
                // reply (validity is counted from the send time, never from the reply).
                if (drain_ready(x)) {
                    it = active.erase(it);
                    continue;
                }
                x.conn->expire(x.ec);
                x.error = dlock::detail::message_for(x.ec);
                it = active.erase(it);
                continue;
            }
            next_deadline = std::min(next_deadline, x.deadline);
            fds.push_back({x.conn->native_handle(), x.conn->wanted_events(), 0});
            buffered = buffered || x.conn->buffered();
            ++it;
        }
        if (active.empty()) break;
        int timeout_ms = dlock::detail::poll_timeout_ms(now, next_deadline);
        if (buffered) timeout_ms = 0;
        const int n = wait_for_replies(fds, timeout_ms);
        if (n <= 0 && !buffered) continue;  // timeout (deadlines are checked above) or EINTR
        for (std::size_t i = 0, j = 0; i < fds.size(); ++i) {
            auto& x = *active[j];
            if (fds[i].revents == 0 && !x.conn->buffered()) {
                ++j;
                continue;
            }
            if (x.conn->advance(x.ec, fds[i].revents)) {
                finish(x);
                active.erase(active.begin() + static_cast<std::ptrdiff_t>(j));
            } else if (x.ec) {
                x.error = dlock::detail::message_for(x.ec);
                active.erase(active.begin() + static_cast<std::ptrdiff_t>(j));
            } else {
                ++j;
            }
        }
    }
}

std::vector<reply> connection::pipeline(const std::vector<command_args>& commands,
                                        std::error_code& ec, steady::time_point latest) {
    exchange x{this, commands, std::min(default_deadline(), latest)};
    exchange_all({&x, 1});
    if (x.ec) {
        fail(ec, x.ec, x.error);
        return {};
    }
    return std::move(x.replies);
}

reply connection::execute(const command_args& command, std::error_code& ec) {
    auto replies = pipeline({command}, ec);
    if (ec) return {};
    return std::move(replies.front());
}

void connection::open(std::error_code& ec, steady::time_point latest) {
    if (is_open()) return;
    pipeline({}, ec, latest);
}

void connection::send(const command_args& command, std::error_code& ec, steady::time_point latest) {
    open(ec, latest);
    if (ec) return;
    streaming_ = true;
    append_command(out_, command);
    const auto deadline =
        std::min(deadline_after(steady::now(), settings_.command_timeout), latest);
    while (!flush(ec) || out_sent_ < out_.size()) {
        if (ec) return close();
        pollfd p{native_handle(), transport_->wanted_events(stream_op::write), 0};
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now()).count();
        if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0) {
            close();
            return fail(ec, errc::server_timeout,
                        "redis " + settings_.endpoint.describe() + ": write timed out");
        }
    }
}

bool connection::read_ready(std::error_code& ec) {
    if (!is_open()) {
        fail(ec, errc::connection_failed,
             "redis " + settings_.endpoint.describe() + ": not connected");
        return false;
    }
    if (read_available(ec)) return true;
    close();
    return false;
}

bool connection::next_read(reply& out) {
    if (replies_.empty()) return false;
    out = std::move(replies_.front());
    replies_.erase(replies_.begin());
    return true;
}

bool connection::receive(reply& out, steady::time_point deadline, std::error_code& ec) {
    for (;;) {
        if (next_read(out)) return true;
        if (!read_ready(ec)) return false;
        if (!replies_.empty()) continue;
        const auto now = steady::now();
        if (now >= deadline) return false;
        pollfd p{native_handle(), transport_->wanted_events(stream_op::read), 0};
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
        ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 60'000)));
    }
}

}  // namespace dlock::redis::detail

#include <dlock/redis/client.hpp>

#include "core/engine_skeleton.hpp"
#include "core/status.hpp"
#include "redis/url.hpp"
#include "redis/engine.hpp"
#include "redis/sentinel.hpp"

namespace dlock::redis {

using dlock::detail::fail;

// The single-instance client is the lock engine with one server (src/redis/engine.hpp).
class client::impl {
public:
    explicit impl(client_options o)
        : options(std::move(o)), engine(std::make_shared<detail::engine>(config_for(options))) {
        engine->start();
    }
    ~impl() { engine->stop(); }

    client_options options;
    std::shared_ptr<detail::engine> engine;

private:
    static detail::engine_config config_for(const client_options& o) {
        std::error_code ec;
        if (detail::is_sentinel_url(o.url)) return sentinel_config_for(o);
        auto endpoint = dlock::detail::parse_redis_url(o.url, ec);
        dlock::detail::throw_if(ec);
        dlock::detail::apply_tls_options(endpoint, o.tls, ec);
        dlock::detail::throw_if(ec);
        detail::engine_config config{
            {std::move(endpoint)}, o.connect_timeout, o.command_timeout, {},           {},
            o.key_prefix,          o.observer,        o.error_handler,   o.idle_expiry};
        config.wait_replicas = o.wait_replicas;
        config.wait_timeout = o.wait_timeout;
        config.wait_aof = o.wait_aof;
        return config;
    }

    // Sentinel (src/redis/sentinel.hpp): one master, found and followed by a resolver. The URL's
    // query options win over the client options they duplicate.
    static detail::engine_config sentinel_config_for(const client_options& o) {
        std::error_code ec;
        auto settings = detail::parse_sentinel_url(o.url, ec);
        dlock::detail::throw_if(ec);
        // rediss-sentinel://: the client's TLS options fill what the URL's tls_* left unset, for
        // the sentinels and the master alike (redis-sentinel:// refuses them, as redis:// does).
        dlock::detail::apply_tls_options(settings.master, o.tls, ec);
        dlock::detail::throw_if(ec);
        for (auto& sentinel : settings.sentinels) sentinel.tls = settings.master.tls;
        auto placeholder = settings.master;
        placeholder.host = settings.master_name;
        detail::engine_config config{{std::move(placeholder)},
                                     o.connect_timeout,
                                     o.command_timeout,
                                     {},
                                     {},
                                     o.key_prefix,
                                     o.observer,
                                     o.error_handler,
                                     o.idle_expiry};
        config.wait_replicas =
            settings.wait_replicas > 0 ? settings.wait_replicas : o.wait_replicas;
        config.wait_timeout =
            settings.wait_timeout.count() > 0 ? settings.wait_timeout : o.wait_timeout;
        config.wait_aof = settings.wait_aof || o.wait_aof;
        config.failover_wait =
            settings.failover_wait.count() > 0 ? settings.failover_wait : o.failover_wait;
        if (config.failover_wait <= std::chrono::milliseconds::zero())
            throw error(errc::invalid_argument, "client_options.failover_wait must be > 0");
        config.resolver = std::make_shared<detail::master_resolver>(
            std::move(settings), o.connect_timeout, o.command_timeout);
        config.address_source_for = [resolver = config.resolver](const auto&) {
            return std::make_unique<detail::sentinel_address>(resolver);
        };
        return config;
    }
};

client::client(client_options options) : impl_(std::make_shared<impl>(std::move(options))) {}
client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;
client::~client() = default;

lease client::acquire_until(std::string_view name, const lock_request& request,
                            const lock_options& options,
                            std::chrono::steady_clock::time_point deadline,
                            std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "acquire", ec, [&](auto& e) {
        return e.acquire_until(name, request, options, deadline, ec);
    });
}

lock_info client::inspect(std::string_view name, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "inspect", ec,
                                      [&](auto& e) { return e.inspect(name, ec); });
}

std::unique_ptr<lock_watch> client::watch(std::string_view name, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "watch", ec,
                                      [&](auto& e) { return e.watch(name, ec); });
}

void client::set_permits(std::string_view name, std::uint32_t permits,
                         std::error_code& ec) noexcept {
    dlock::detail::with_engine(impl_, "set_permits", ec,
                               [&](auto& e) { e.set_permits(name, permits, ec); });
}

std::string client::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "record_once", ec,
                                      [&](auto& e) { return e.record_once(name, value, ec); });
}

reply client::command(const std::vector<std::string>& args) {
    std::error_code ec;
    auto r = command(args, ec);
    dlock::detail::throw_if(ec);
    return r;
}

reply client::command(const std::vector<std::string>& args, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "command", ec,
                                      [&](auto& e) { return e.command(args, ec); });
}

void client::ping() {
    const auto r = command({"PING"});
    if (r.type != reply::kind::status || r.text != "PONG") {
        throw error(errc::unexpected_reply,
                    "PING answered " + std::string(to_string(r.type)) + " \"" + r.text + "\"");
    }
}

const client_options& client::options() const noexcept { return impl_->options; }
std::string client::lock_key(std::string_view name) const { return impl_->engine->key(name); }
std::string client::fence_key(std::string_view name) const { return impl_->engine->fence(name); }
std::string client::release_channel(std::string_view name) const {
    return impl_->engine->channel(name);
}

std::string redact_url(std::string_view url) { return dlock::detail::redact_url(url); }

const char* to_string(reply::kind kind) noexcept {
    switch (kind) {
        case reply::kind::nil: return "nil";
        case reply::kind::integer: return "integer";
        case reply::kind::string: return "string";
        case reply::kind::status: return "status";
        case reply::kind::error: return "error";
        case reply::kind::array: return "array";
    }
    return "unknown";
}

}  // namespace dlock::redis

#include <dlock/redlock/client.hpp>

#include <dlock/redis/client.hpp>

#include "core/engine_skeleton.hpp"
#include "core/status.hpp"
#include "redis/url.hpp"
#include "redis/engine.hpp"

namespace dlock::redlock {

using dlock::detail::fail;

// Redlock is the lock engine with N servers and a majority quorum (src/redis/engine.hpp).
class client::impl {
public:
    explicit impl(const client_options& o)
        : engine(std::make_shared<redis::detail::engine>(config_for(o))) {
        engine->start();
    }
    ~impl() { engine->stop(); }

    std::shared_ptr<redis::detail::engine> engine;

private:
    static redis::detail::engine_config config_for(const client_options& o) {
        redis::detail::engine_config config{{},
                                            o.connect_timeout,
                                            o.command_timeout,
                                            o.node_timeout,
                                            {o.drift_ratio, o.drift_floor},
                                            o.key_prefix,
                                            o.observer,
                                            o.error_handler,
                                            o.idle_expiry};
        if (o.urls.empty())
            throw error(errc::invalid_argument, "Redlock needs at least one server URL");
        for (const auto& url : o.urls) {
            std::error_code ec;
            config.servers.push_back(dlock::detail::parse_redis_url(url, ec));
            dlock::detail::throw_if(ec);
            dlock::detail::apply_tls_options(config.servers.back(), o.tls, ec);
            dlock::detail::throw_if(ec);
        }
        return config;
    }
};

namespace {

client_options options_from(
    const std::vector<std::reference_wrapper<const dlock::redis::client>>& servers) {
    client_options o;
    for (const auto& s : servers) o.urls.push_back(s.get().options().url);
    if (!servers.empty()) {
        const auto& first = servers.front().get().options();
        o.connect_timeout = first.connect_timeout;
        o.command_timeout = first.command_timeout;
        o.key_prefix = first.key_prefix;
        o.observer = first.observer;
        o.error_handler = first.error_handler;
        o.idle_expiry = first.idle_expiry;
        o.tls = first.tls;
    }
    return o;
}

}  // namespace

// By value, like every client's constructor (the options are a sink in the API).
client::client(client_options options)  // NOLINT(performance-unnecessary-value-param)
    : impl_(std::make_shared<impl>(options)) {}
client::client(const std::vector<std::reference_wrapper<const dlock::redis::client>>& servers)
    : client(options_from(servers)) {}
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

std::string client::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "record_once", ec,
                                      [&](auto& e) { return e.record_once(name, value, ec); });
}

std::unique_ptr<lock_watch> client::watch(std::string_view name, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "watch", ec,
                                      [&](auto& e) { return e.watch(name, ec); });
}

std::size_t client::size() const noexcept { return impl_->engine->size(); }
std::size_t client::quorum() const noexcept { return impl_->engine->quorum(); }

}  // namespace dlock::redlock

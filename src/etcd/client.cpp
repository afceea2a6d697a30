#include <dlock/etcd/client.hpp>

#include "core/engine_skeleton.hpp"
#include "core/lease_core.hpp"
#include "etcd/engine.hpp"

namespace dlock::etcd {

class client::impl {
public:
    explicit impl(client_options o) : engine(std::make_shared<detail::engine>(std::move(o))) {
        engine->start();
    }
    ~impl() { engine->stop(); }
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;

    std::shared_ptr<detail::engine> engine;
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

std::string client::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "record_once", ec,
                                      [&](auto& e) { return e.record_once(name, value, ec); });
}

void client::set_permits(std::string_view name, std::uint32_t permits,
                         std::error_code& ec) noexcept {
    dlock::detail::with_engine(impl_, "set_permits", ec,
                               [&](auto& e) { e.set_permits(name, permits, ec); });
}

lock_info client::inspect(std::string_view name, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "inspect", ec,
                                      [&](auto& e) { return e.inspect(name, ec); });
}

std::unique_ptr<lock_watch> client::watch(std::string_view name, std::error_code& ec) noexcept {
    return dlock::detail::with_engine(impl_, "watch", ec,
                                      [&](auto& e) { return e.watch(name, ec); });
}

const client_options& client::options() const noexcept { return impl_->engine->options(); }

std::string client::key_prefix(std::string_view name) const {
    return impl_->engine->key_prefix(name);
}

std::size_t client::waiting_here(std::string_view name) const {
    return impl_->engine->waiting_here(name);
}

std::string client::key_of(const lease& l) const {
    const auto* core = dlock::detail::lease_access::core(l);
    if (core == nullptr || &core->owner() != impl_->engine.get()) return {};
    return core->token();
}

}  // namespace dlock::etcd

// `dlock::striped<Lock>`: N locks ("stripes") over one base name, for data with many more items
// than it is worth having locks (docs/granularity.md). get(key) maps a key to its stripe with a
// fixed hash, so every process, in any language, maps a key the same way; lock_all(keys) takes
// the stripes of several keys at once, all-or-nothing, without deadlock.
//
//   dlock::striped<dlock::mutex> stock(redis, "stock", 64);
//   std::lock_guard hold(stock.get("sku-42"));          // one item
//   auto both = stock.lock_all({"sku-42", "sku-7"});    // a transfer between two items
//
// Names: stripe i of base "stock" is the lock "stock/#<i>", i zero-padded to the width of N-1
// ("stock/#07" of 64), so the locks' name order is the stripe order. On Redis every stripe is its
// own hash tag ({stock/#07}), which spreads the stripes over Redis Cluster slots; the base name
// must therefore contain no '{' or '}'.
//
// Key -> stripe: FNV-1a 64 of the key's bytes (UTF-8 as given; offset basis 14695981039346656037,
// prime 1099511628211), modulo N. Never std::hash, which differs between implementations.
//
// Stripe count: the first use records N on the server under the name "<base>/#stripes"
// (backend::record_once); a striped object opened over the same base with another N fails with
// errc::invalid_argument naming both counts, instead of silently mapping keys to other stripes.
// Every grant of a stripe is checked again against the record (one more record_once round trip
// after the acquire): if the record no longer says N, the grant is released and the acquire
// fails with errc::invalid_argument, so an object that verified its count once cannot keep
// taking stripes after the record changed (Redlock servers restarted without their data).
// Redis, Redlock (a majority of the servers) and ZooKeeper (a persistent node) record it; a
// backend without a record store (errc::unsupported) is not checked. The record's name is the
// longest name a striped object uses: the base may be at most the backend's name limit minus 9.
//
// Sharing: like the Lock type; get() may be called from any thread. The backend must outlive it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>
#include <dlock/error.hpp>
#include <dlock/multi_lock.hpp>
#include <dlock/mutex.hpp>
#include <dlock/options.hpp>
#include <dlock/recursive_mutex.hpp>
#include <dlock/shared_mutex.hpp>

namespace dlock {

namespace detail {
/// Checks that `service` records `count` stripes for `base` (records it on first use). False with
/// `ec` set (and its message) when it records another count or cannot be asked; true when the
/// backend keeps no records (errc::unsupported).
bool check_stripe_count(backend& service, const std::string& base, std::size_t count,
                        std::error_code& ec) noexcept;

/// dlock::striped's view of its backend: forwards every call to `inner`, and checks the stripe
/// count (check_stripe_count) after each grant, releasing the grant when the check fails.
class stripe_count_backend final : public backend {
public:
    stripe_count_backend(backend& inner, std::string base, std::size_t count)
        : inner_(inner), base_(std::move(base)), count_(count) {}
    [[nodiscard]] lease acquire_until(std::string_view name, const lock_request& request,
                                      const lock_options& options,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::error_code& ec) noexcept override;
    using backend::acquire_until;
    using backend::inspect;
    using backend::set_permits;
    void set_permits(std::string_view name, std::uint32_t permits,
                     std::error_code& ec) noexcept override;
    [[nodiscard]] lock_info inspect(std::string_view name, std::error_code& ec) noexcept override;
    [[nodiscard]] std::unique_ptr<lock_watch> watch(std::string_view name,
                                                    std::error_code& ec) noexcept override;
    std::string record_once(std::string_view name, std::string_view value,
                            std::error_code& ec) noexcept override;

private:
    backend& inner_;
    std::string base_;
    std::size_t count_;
};
}  // namespace detail

/// FNV-1a, 64 bits, of `bytes`: striped's key -> stripe hash.
constexpr std::uint64_t fnv1a_64(std::string_view bytes) noexcept {
    std::uint64_t h = 14695981039346656037ull;
    for (const char c : bytes) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ull;
    }
    return h;
}

/// The lock kind lock_all() asks multi_lock for, per Lock type (the exclusive side of a
/// shared_mutex). Specialise it for your own Lock types.
template <class Lock>
struct striped_kind {
    static constexpr lock_kind value = lock_kind::exclusive;
};
template <>
struct striped_kind<fair_mutex> {
    static constexpr lock_kind value = lock_kind::fair;
};
template <>
struct striped_kind<recursive_mutex> {
    static constexpr lock_kind value = lock_kind::reentrant;
};
template <>
struct striped_kind<shared_mutex> {
    static constexpr lock_kind value = lock_kind::write;
};

/// The most stripes a striped object may have.
inline constexpr std::size_t max_stripes = 65536;

template <class Lock = mutex>
requires std::constructible_from<Lock, backend&, std::string, lock_options>
class striped {
public:
    /// Validates (errc::invalid_argument): `stripes` in [1, max_stripes], `base` not empty and
    /// free of '{' and '}', and `options` (through Lock's constructor). Contacts no server.
    striped(backend& service, std::string base, std::size_t stripes, lock_options options = {})
        : service_(service),
          base_(std::move(base)),
          count_(stripes),
          options_(std::move(options)),
          checked_(service_, base_, stripes) {
        if (stripes < 1 || stripes > max_stripes) {
            throw error(errc::invalid_argument, "striped \"" + base_ + "\": stripes (" +
                                                    std::to_string(stripes) +
                                                    ") must be in [1, 65536]");
        }
        if (base_.empty() || base_.find_first_of("{}") != std::string::npos) {
            throw error(errc::invalid_argument,
                        "striped \"" + base_ +
                            "\": the base name must be non-empty and contain no '{' or '}' (each "
                            "stripe is its own Redis Cluster hash tag)");
        }
        locks_.reserve(stripes);
        for (std::size_t i = 0; i < stripes; ++i)
            locks_.push_back(std::make_unique<Lock>(checked_, stripe_name(i), options_));
    }
    striped(const striped&) = delete;
    striped& operator=(const striped&) = delete;

    std::size_t size() const noexcept { return locks_.size(); }
    const std::string& base_name() const noexcept { return base_; }

    /// The stripe of `key`: fnv1a_64(key) % size().
    std::size_t stripe_of(std::string_view key) const noexcept {
        return static_cast<std::size_t>(fnv1a_64(key) % locks_.size());
    }

    /// The lock name of stripe `i` ("<base>/#<i>", zero-padded).
    std::string stripe_name(std::size_t i) const {
        const auto width = std::to_string(count_ - 1).size();
        auto digits = std::to_string(i);
        if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
        return base_ + "/#" + digits;
    }

    /// The lock guarding `key`. The first call (of get, stripe or lock_all) checks the stripe
    /// count on the server (see above) and throws dlock::error if it differs or the server
    /// cannot be reached (a later call checks again). Each grant of the lock checks it again.
    Lock& get(std::string_view key) { return stripe(stripe_of(key)); }

    /// Stripe `i` (< size(), else errc::invalid_argument); checks the count like get().
    Lock& stripe(std::size_t i) {
        if (i >= locks_.size()) {
            throw error(errc::invalid_argument, "striped \"" + base_ + "\": stripe " +
                                                    std::to_string(i) + " of " +
                                                    std::to_string(locks_.size()));
        }
        verify();
        return *locks_[i];
    }

    /// The distinct stripes of `keys`, ascending (the order lock_all takes them in).
    std::vector<std::size_t> stripes_of(const std::vector<std::string>& keys) const {
        std::vector<std::size_t> out;
        out.reserve(keys.size());
        for (const auto& k : keys) out.push_back(stripe_of(k));
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        return out;
    }

    /// Takes the stripes of every key (each distinct stripe once, in stripe order) as one
    /// multi_lock, blocking until all are held. Throws as multi_lock::lock() (nothing is held
    /// then), and errc::invalid_argument for an empty `keys`. The returned object holds them
    /// until it is destroyed or unlocked; it locks through this object (each stripe's grant
    /// checks the count), so it must not outlive it.
    [[nodiscard]] std::unique_ptr<multi_lock> lock_all(const std::vector<std::string>& keys) {
        auto set = make_set(keys);
        set->lock();
        return set;
    }

    /// As lock_all, waiting at most `timeout` for the whole set (one deadline for every stripe).
    /// nullptr when a stripe stayed held by someone else; the stripes taken before were released.
    template <class Rep, class Period>
    [[nodiscard]] std::unique_ptr<multi_lock> try_lock_all_for(
        const std::vector<std::string>& keys, const std::chrono::duration<Rep, Period>& timeout) {
        auto set = make_set(keys);
        if (!set->try_lock_for(timeout)) return nullptr;
        return set;
    }

    /// Records or checks the stripe count now (what the first get() does). Throws dlock::error.
    void verify() {
        if (verified_.load(std::memory_order_acquire)) return;
        std::lock_guard lock(verify_mutex_);
        if (verified_.load(std::memory_order_relaxed)) return;
        std::error_code ec;
        if (!detail::check_stripe_count(service_, base_, locks_.size(), ec))
            throw error(ec, last_error_message(ec));
        verified_.store(true, std::memory_order_release);
    }

private:
    std::unique_ptr<multi_lock> make_set(const std::vector<std::string>& keys) {
        if (keys.empty()) {
            throw error(errc::invalid_argument, "striped \"" + base_ + "\": lock_all of no keys");
        }
        verify();
        std::vector<lock_part> parts;
        for (const auto i : stripes_of(keys)) {
            parts.push_back(
                lock_part{checked_, stripe_name(i), lock_request{striped_kind<Lock>::value}});
        }
        return std::make_unique<multi_lock>(std::move(parts), options_);
    }

    backend& service_;
    std::string base_;
    std::size_t count_;
    lock_options options_;
    detail::stripe_count_backend checked_;  // what the stripes lock through
    std::vector<std::unique_ptr<Lock>> locks_;
    std::mutex verify_mutex_;
    std::atomic<bool> verified_{false};
};

}  // namespace dlock

// The shop of the oversell scenario, shared by examples/oversell.cpp and `dlock demo`
// (tools/dlock/demo.cpp): one stock count kept in Redis, and a worker that sells from it until it
// is sold out. Each sale reads the count, pauses 1-2 ms (the work between check and write that
// every real shop has), and writes count - 1. Without a lock, workers overwrite each other's
// writes and sell more than there was; under a dlock::mutex they sell exactly the stock.
#pragma once

#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace oversell {

/// Runs a command; an error reply is a failure (dlock::error server_error): a shop that ignored
/// them would sell blind.
inline dlock::redis::reply checked(dlock::redis::client& redis,
                                   const std::vector<std::string>& args) {
    auto reply = redis.command(args);
    if (reply.is_error()) {
        throw dlock::error(dlock::errc::server_error, args.front() + ": " + reply.text);
    }
    return reply;
}

/// The number at `key` (0 when missing). Throws dlock::error unexpected_reply if it is not one.
inline long long read_count(dlock::redis::client& redis, const std::string& key) {
    const auto reply = checked(redis, {"GET", key});
    if (reply.is_nil()) return 0;
    try {
        std::size_t used = 0;
        const long long value = std::stoll(reply.text, &used);
        if (used == reply.text.size()) return value;
    } catch (const std::exception&) {
    }
    throw dlock::error(dlock::errc::unexpected_reply,
                       key + " holds \"" + reply.text + "\", not a number");
}

/// Sells from the stock at `stock_key` until it is sold out, counting each sale at `sold_key`.
/// With `lock` (locked mode) each read-pause-write holds it. Throws dlock::error on a server
/// failure, or lock_lost if the lease ran out before a write.
inline void sell_until_sold_out(dlock::redis::client& redis, const std::string& stock_key,
                                const std::string& sold_key, dlock::mutex* lock) {
    std::minstd_rand pauses(std::random_device{}());
    std::uniform_int_distribution<int> pause_us(1000, 2000);
    for (;;) {
        std::unique_lock<dlock::mutex> guard;
        if (lock) guard = std::unique_lock(*lock);
        const long long stock = read_count(redis, stock_key);
        if (stock <= 0) return;
        // The pause between check and write: the race window.
        std::this_thread::sleep_for(std::chrono::microseconds(pause_us(pauses)));
        // A holder paused past its lease must not write. Redis SET cannot check a fencing token,
        // so the sale checks the lease itself; a real store would reject a stale
        // lock->fencing_token().
        if (lock && lock->state() == dlock::lock_state::lost) {
            throw dlock::error(dlock::errc::lock_lost, "lost the lock before writing the stock");
        }
        checked(redis, {"SET", stock_key, std::to_string(stock - 1)});
        checked(redis, {"INCR", sold_key});
    }
}

}  // namespace oversell

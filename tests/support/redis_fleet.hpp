// N independent redis-servers for Redlock tests, started together on free loopback ports and
// torn down together. Servers are indexed 0..N-1; each keeps the redis_server interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "redis_server.hpp"

namespace dlock::test {

class redis_fleet {
public:
    explicit redis_fleet(std::size_t count, redis_server_options options = {}) {
        for (std::size_t i = 0; i < count; ++i)
            servers_.push_back(std::make_unique<redis_server>(options));
    }
    std::size_t size() const noexcept { return servers_.size(); }
    redis_server& operator[](std::size_t i) { return *servers_.at(i); }
    std::vector<std::string> urls() const {
        std::vector<std::string> out;
        for (const auto& s : servers_) out.push_back(s->url());
        return out;
    }

private:
    std::vector<std::unique_ptr<redis_server>> servers_;
};

}  // namespace dlock::test

#include "core/fork.hpp"

#include <pthread.h>

#include <atomic>
#include <new>
#include <string>
#include <utility>

#include "core/status.hpp"

namespace dlock::detail {
namespace {

std::atomic<std::uint64_t> generation{0};

void in_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

// A singly linked list with a global head: what it holds stays reachable for leak checkers.
struct kept {
    std::shared_ptr<void> object;
    kept* next;
};
std::atomic<kept*> kept_head{nullptr};

}  // namespace

std::uint64_t fork_generation() noexcept {
    // Installed before the first generation is recorded, so every later fork is counted.
    [[maybe_unused]] static const int installed = ::pthread_atfork(nullptr, nullptr, &in_child);
    return generation.load(std::memory_order_relaxed);
}

void keep_forever(std::shared_ptr<void> object) noexcept {
    auto* node = new (std::nothrow) kept{std::move(object), nullptr};
    if (node == nullptr) {
        // No memory for the list node: leak the object rather than destroy it.
        new (std::nothrow) std::shared_ptr<void>(std::move(object));
        return;
    }
    node->next = kept_head.load(std::memory_order_relaxed);
    while (!kept_head.compare_exchange_weak(node->next, node, std::memory_order_release,
                                            std::memory_order_relaxed)) {
    }
}

bool refuse_in_forked_child(const fork_witness& client, std::error_code& ec) noexcept {
    if (!client.forked()) return false;
    fail(ec, errc::invalid_argument,
         "this client was created before a fork and belongs to the parent process; a child "
         "process must create its own client");
    return true;
}

void refuse_moved_from(const char* call, std::error_code& ec) noexcept {
    fail(ec, errc::invalid_argument, std::string(call) + " on a moved-from client");
}

}  // namespace dlock::detail

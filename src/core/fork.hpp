// Fork detection for the objects a process shares with its forked children. After fork() the
// child has copies of every lease and client, but only the forking thread: the clients'
// background threads, the ZooKeeper C client's threads and the parent's grants are not its own.
// Everything that would act on the parent's behalf (release a lock, join a thread, close a
// session) first asks whether it runs in the process that created it (docs/lock-family.md,
// "fork").
#pragma once

#include <cstdint>
#include <memory>
#include <system_error>

namespace dlock::detail {

/// How many fork() calls lie between the first dlock object of this process's lineage and this
/// process: 0 in the original process, +1 in each child (a pthread_atfork child handler, installed
/// by the first call). Two values differ exactly when they were read in different processes.
std::uint64_t fork_generation() noexcept;

/// Keeps `object` alive until the process ends, never destroying it. For what a forked child holds
/// of its parent's: a thread handle (joining or detaching it would act on a thread that does not
/// exist here), a ZooKeeper session (closing it would end the parent's session). Stays reachable,
/// so leak checkers do not report it. Never throws (on allocation failure the object is leaked).
void keep_forever(std::shared_ptr<void> object) noexcept;

/// Remembers the fork generation it was created in.
class fork_witness {
public:
    /// True in a child forked after this object was created (or a descendant of one).
    bool forked() const noexcept { return born_ != fork_generation(); }

private:
    std::uint64_t born_ = fork_generation();
};

/// For a client's entry points: true, with `ec` set to errc::invalid_argument, when `client` was
/// created in the parent of this (forked) process. Its connections are the parent's (shared
/// sockets) and its threads do not exist here: a child must create its own client.
bool refuse_in_forked_child(const fork_witness& client, std::error_code& ec) noexcept;

/// Sets `ec` to errc::invalid_argument: `call` ("acquire", "inspect", ...) was made on a client
/// that was moved from.
void refuse_moved_from(const char* call, std::error_code& ec) noexcept;

/// The one guard of a client's entry points: the engine of the client whose state is `impl`, or
/// nullptr with `ec` set when the client was moved from (refuse_moved_from) or was created in
/// the parent of this forked process (refuse_in_forked_child).
template <class Impl>
auto* usable_engine(const std::shared_ptr<Impl>& impl, const char* call,
                    std::error_code& ec) noexcept {
    using engine_ptr = decltype(impl->engine.get());
    if (!impl) {
        refuse_moved_from(call, ec);
        return engine_ptr{};
    }
    if (refuse_in_forked_child(*impl->engine, ec)) return engine_ptr{};
    return impl->engine.get();
}

}  // namespace dlock::detail

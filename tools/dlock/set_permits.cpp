// `dlock set-permits NAME N`: an operator changes a semaphore's number of permits
// (dlock::backend::set_permits; docs/cli.md). Holders keep their permits; waiters re-check.
#include "backend.hpp"
#include "cli.hpp"

namespace dlock::cli {

int set_permits_command(const set_permits_options& o) {
    lock_service service(o.server);
    try {
        service.backend().set_permits(o.name, o.permits);
    } catch (const dlock::error& e) {
        throw to_cli_error(e, o.server.url);
    }
    return exit_status::ok;
}

}  // namespace dlock::cli

// dlock: distributed locks for C++20. Include this for the whole backend-neutral API (the core,
// target dlock::core); it includes no backend. To reach a lock service, either
//   - include <dlock/connect.hpp> and call dlock::connect(url) (target dlock::dlock), which picks
//     the backend from the URL's scheme, or
//   - include a backend's client header and construct its client: <dlock/redis/client.hpp>
//     (Redis), <dlock/redlock/client.hpp> (Redlock; both target dlock::redis) or
//     <dlock/zk/client.hpp> (ZooKeeper, target dlock::zk).
// <dlock/config.hpp> says which backends this build has (DLOCK_HAS_REDIS, DLOCK_HAS_ZOOKEEPER);
// <dlock/version.hpp> asks the library a program runs with (dlock::version()).
#pragma once

#include <dlock/backend.hpp>
#include <dlock/config.hpp>
#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/metrics.hpp>
#include <dlock/multi_lock.hpp>
#include <dlock/mutex.hpp>
#include <dlock/options.hpp>
#include <dlock/recursive_mutex.hpp>
#include <dlock/semaphore.hpp>
#include <dlock/shared_mutex.hpp>
#include <dlock/striped.hpp>
#include <dlock/version.hpp>

// dlock: distributed locks for C++20. Include this for the whole backend-neutral API; include
// a backend's client header (e.g. <dlock/redis/client.hpp>) to connect to a lock service.
#pragma once

#include <dlock/backend.hpp>
#include <dlock/error.hpp>
#include <dlock/event.hpp>
#include <dlock/lease.hpp>
#include <dlock/metrics.hpp>
#include <dlock/multi_lock.hpp>
#include <dlock/mutex.hpp>
#include <dlock/options.hpp>
#include <dlock/recursive_mutex.hpp>
#include <dlock/redlock/client.hpp>
#include <dlock/semaphore.hpp>
#include <dlock/shared_mutex.hpp>
#include <dlock/striped.hpp>
#include <dlock/zk/client.hpp>

#!/usr/bin/env bash
# The oversell demo: several processes sell from one stock count in Redis, without and then with
# a dlock::mutex (examples/oversell.cpp). Sets the machine up and builds first if needed, then
# runs against a private redis-server on a free loopback port, stopped again on exit.
#
#   bash scripts/demo.sh [--workers N] [--stock N] [--mode both|unlocked|locked]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -x build/examples/oversell ]] && command -v ninja redis-server redis-cli >/dev/null; then
  ninja -C build example_oversell >/dev/null  # rebuild after an edit; quiet when up to date
else
  bash scripts/setup.sh  # installs the Debian packages and builds into build/
fi

exec bash examples/run_with_redis.sh build/examples/oversell --url @URL@ --mode both "$@"

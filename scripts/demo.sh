#!/usr/bin/env bash
# The README's "run" command: sets the machine up and builds if needed, then runs `dlock demo`,
# the oversell scenario (several processes sell from one stock count, first without a lock, then
# with dlock) on a private redis-server that dlock starts on a free loopback port and stops again.
# It installs only the packages a build needs and builds only the CLI (target dlock_cli) and the
# libraries it links, not the tests, benchmarks and the test stages' tools (scripts/test.sh sets
# those up); tests/scripts/demo_script_test.sh checks this.
#
#   bash scripts/demo.sh [--workers N] [--stock N] [--backend redis|redlock] [--url URL]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -x build/tools/dlock/dlock ]] && command -v ninja redis-server >/dev/null; then
  ninja -C build dlock_cli >/dev/null  # rebuild after an edit; quiet when up to date
else
  bash scripts/setup.sh --target dlock_cli  # the Debian packages; configures build/, builds the CLI
fi

exec build/tools/dlock/dlock demo "$@"

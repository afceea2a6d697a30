#!/usr/bin/env bash
# Runs a command against a private redis-server and returns the command's exit status.
#
#   examples/run_with_redis.sh COMMAND [ARGS...]
#
# The server listens on a free 127.0.0.1 port, keeps its files in a temp dir and saves nothing
# (--save ''). Every literal @URL@ in the arguments becomes redis://127.0.0.1:PORT. The server is
# this script's child: it is stopped, waited for and its dir removed on any exit.
set -euo pipefail

if (($# == 0)); then
  echo "usage: $0 COMMAND [ARGS...]   (@URL@ in ARGS becomes the server's redis:// URL)" >&2
  exit 2
fi
for tool in redis-server redis-cli; do
  if ! command -v "$tool" >/dev/null; then
    echo "run_with_redis.sh: $tool not found (apt-get install redis-server redis-tools)" >&2
    exit 2
  fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-redis.XXXXXX")
server_pid=
# shellcheck disable=SC2317  # reached through the EXIT trap
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true  # wait on this PID only: a bare `wait` waits for all
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  # Ask the kernel for an unused port; /usr/bin/python3 starts much faster than a pyenv shim.
  if [[ -x /usr/bin/python3 ]]; then
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  else
    echo $((20000 + RANDOM % 30000))
  fi
}

# A dead child stays a zombie until we wait for it, so `kill -0` would still succeed: read its state.
server_alive() {
  local state
  read -r _ _ state _ 2>/dev/null <"/proc/$server_pid/stat" || return 1
  [[ $state != Z ]]
}

# The port may be taken between choosing it and the server binding it: then try another one.
for _ in 1 2 3 4 5; do
  port=$(free_port)
  log="$dir/redis-$port.log"  # one per attempt, so an earlier attempt's "Ready" cannot fool us
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --logfile "$log" &
  server_pid=$!
  for ((i = 0; i < 200; i++)); do  # up to 10 s; it is usually ready within 200 ms
    server_alive || break  # e.g. the port was taken meanwhile: it exits at once
    # Our server logs "Ready" only once it listens, so a PONG after that is from it and not from
    # whoever else might hold the port; `timeout` guards against a listener that never answers.
    if grep -q "Ready to accept connections" "$log" 2>/dev/null &&
      timeout 2 redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
      break 2
    fi
    sleep 0.05
  done
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
done
if [[ -z $server_pid ]]; then
  echo "run_with_redis.sh: redis-server did not start; its logs:" >&2
  cat "$dir"/redis-*.log >&2 || true
  exit 2
fi

url="redis://127.0.0.1:$port"
args=()
for arg in "$@"; do args+=("${arg//@URL@/$url}"); done

status=0
"${args[@]}" || status=$?
exit "$status"

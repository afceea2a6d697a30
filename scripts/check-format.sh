#!/usr/bin/env bash
# Fails (exit 1) if any tracked C++ file differs from .clang-format's layout.
# Fix with: clang-format -i $(git ls-files '*.cpp' '*.hpp')
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (bash scripts/setup.sh --deps-only installs it)" >&2
  exit 1
fi
# Batches of files, one clang-format per batch, $(nproc) at a time; a batch that fails is checked
# again file by file to name the files.
check_batch() {
  clang-format --dry-run -Werror "$@" >/dev/null 2>&1 && return 0
  local f
  for f; do clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || printf '%s\n' "$f"; done
}
export -f check_batch
mapfile -t bad < <(git ls-files -z '*.cpp' '*.hpp' |
  xargs -0 -r -n 20 -P "$(nproc)" bash -c 'check_batch "$@"' check_batch)
if ((${#bad[@]})); then
  printf 'check-format: not formatted: %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: $(git ls-files '*.cpp' '*.hpp' | wc -l) files formatted"

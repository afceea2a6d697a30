#!/usr/bin/env bash
# Fails (exit 1) if any tracked C++ file differs from .clang-format's layout.
# Fix with: clang-format -i $(git ls-files '*.cpp' '*.hpp')
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (bash scripts/setup.sh --deps-only installs it)" >&2
  exit 1
fi
bad=()
while IFS= read -r file; do
  clang-format --dry-run -Werror "$file" >/dev/null 2>&1 || bad+=("$file")
done < <(git ls-files '*.cpp' '*.hpp')
if ((${#bad[@]})); then
  printf 'check-format: not formatted: %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: $(git ls-files '*.cpp' '*.hpp' | wc -l) files formatted"

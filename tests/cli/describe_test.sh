#!/usr/bin/env bash
# The manual page and the completion scripts, generated from the CLI's own definitions: the page
# renders without groff warnings and documents every option each command's --help lists; the bash
# completion completes commands, options and file names as a person typing would get them; the
# zsh script parses and names every option. Usage: describe_test.sh PATH/TO/dlock
set -u
dlock=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- the manual page ---
"$dlock" __man >"$tmp/dlock.1" || fail "dlock __man exited $?"
warnings=$(groff -man -Tutf8 -ww -z "$tmp/dlock.1" 2>&1)
[[ -z $warnings ]] || fail "groff warnings: $warnings"
page=$(MANWIDTH=100 man -l "$tmp/dlock.1" 2>/dev/null | col -b)
[[ $page == *"NAME"*"dlock - run commands"* ]] || fail "the page has no NAME line"
for cmd in run status demo completion; do
  help=$("$dlock" "$cmd" --help) || fail "dlock $cmd --help exited $?"
  [[ $page == *"dlock $cmd"* ]] || fail "the page has no section for dlock $cmd"
  for opt in $(grep -oE -- '--[a-z][a-z-]+' <<<"$help" | sort -u); do
    grep -qF -- "$opt" <<<"$page" || fail "dlock $cmd --help lists $opt, the page does not"
  done
done
for word in DLOCK_URL DLOCK_PASSWORD "Exit status" "flock(1)" "EXIT STATUS" "124  --max-hold" \
  "3  dlock status: the lock is not held"; do
  grep -qF -- "$word" <<<"$page" || fail "the page does not mention $word"
done
# An installed system has the page, not the source tree's docs.
if grep -nE 'docs/|[a-z]\.md\b' <<<"$page"; then fail "the page points at files of the source tree"; fi

# --- bash completion: what COMPREPLY a person gets after pressing Tab ---
"$dlock" completion bash >"$tmp/dlock.bash" || fail "dlock completion bash exited $?"
touch "$tmp/secret.txt"
complete_words() {  # complete_words WORD... : the completions for the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
           _dlock; printf "%s\n" "${COMPREPLY[@]}"' _ "$tmp/dlock.bash" "$@"
}
expect() {  # expect "WANTED" WORD... : WANTED is among the completions
  local wanted=$1; shift
  complete_words "$@" | grep -qxF -- "$wanted" || fail "Tab after '$*' does not offer $wanted"
}
refuse() {  # refuse "UNWANTED" WORD...
  local unwanted=$1; shift
  ! complete_words "$@" | grep -qxF -- "$unwanted" || fail "Tab after '$*' offers $unwanted"
}
expect run dlock r
expect status dlock st
expect completion dlock comp
expect --fair dlock run --f
expect --no-wait dlock run --n
expect --json dlock status --j
refuse --json dlock run --j
expect --workers dlock demo --w
expect "$tmp/secret.txt" dlock run --password-file "$tmp/sec"
[[ -z $(complete_words dlock run job "") ]] ||
  fail "Tab after the lock's name offers options instead of the shell's own completion"

# --- zsh completion ---
"$dlock" completion zsh >"$tmp/_dlock" || fail "dlock completion zsh exited $?"
zsh -n "$tmp/_dlock" || fail "the zsh script does not parse"
head -1 "$tmp/_dlock" | grep -qx '#compdef dlock' || fail "the zsh script lacks #compdef dlock"
for opt in --fair --shared --write --permits --json --workers --password-file; do
  grep -qF -- "'$opt[" "$tmp/_dlock" || fail "the zsh script does not complete $opt"
done

# --- bad input ---
out=$("$dlock" completion fish 2>&1); status=$?
[[ $status == 64 ]] || fail "dlock completion fish exited $status, expected 64"
[[ $out == *fish* ]] || fail "dlock completion fish does not say what was wrong: $out"

if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "all checks passed"

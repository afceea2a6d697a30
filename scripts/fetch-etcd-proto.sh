#!/usr/bin/env bash
# Fetches etcd's .proto files (and the .proto files they import) from Debian packages into DEST,
# for the etcd backend's gRPC stubs, which the build generates (src/CMakeLists.txt). The repo holds
# no .proto text.
#
#   scripts/fetch-etcd-proto.sh DEST
#
# The three packages are architecture-independent source packages of Go code; installing them
# pulls about 140 packages, so they are downloaded (apt-get download) and unpacked (dpkg -x) into
# DEST instead: DEST/usr/share/gocode/src/... . Cached: nothing is done when DEST is complete.
# Needs the apt package lists (apt-get update) and the network once, no root.
set -euo pipefail

dest=${1:?usage: scripts/fetch-etcd-proto.sh DEST}
packages=(golang-etcd-server-dev golang-github-gogo-protobuf-dev
          golang-github-grpc-ecosystem-grpc-gateway-dev)
stamp=$dest/.complete
if [[ -f $stamp ]]; then exit 0; fi

mkdir -p "$dest/debs"
cd "$dest/debs"
# `apt-get download` as root warns that the _apt sandbox user cannot write here; harmless.
if ! apt-get -qq download "${packages[@]}" 2>"$dest/download.log"; then
  if grep -q 'Unable to locate\|Unable to find' "$dest/download.log"; then
    apt-get -o DPkg::Lock::Timeout=900 -qq update >/dev/null 2>&1 || true
  fi
  apt-get -qq download "${packages[@]}" 2>"$dest/download.log" || {
    cat "$dest/download.log" >&2
    echo "fetch-etcd-proto.sh: cannot download ${packages[*]} (configure with -DDLOCK_WITH_ETCD=OFF to build without etcd)" >&2
    exit 1
  }
fi
for p in "${packages[@]}"; do
  dpkg -x "$(ls -1 "${p}"_*.deb | tail -1)" "$dest"
done
rm -f ./*.deb
touch "$stamp"

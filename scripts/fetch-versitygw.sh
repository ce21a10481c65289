#!/usr/bin/env bash
# fetch-versitygw.sh [VERSION] — builds the Versity S3 Gateway (github.com/versity/versitygw,
# Apache-2.0), a real S3-compatible server run as its own process for Kawkab's object-store
# benchmarks and the lab (internal/tools/peer/versitygw), from the Go module proxy into a cache
# directory outside the repository. Idempotent: an existing binary is reused. Prints the
# binary's path as its last line of stdout.
#
#   MERIDIAN_CACHE   cache root (default $HOME/.cache/meridian); the binary goes to
#                    $MERIDIAN_CACHE/versitygw-VERSION/bin/versitygw
#
# Requires go and access to the Go module proxy. The build takes about 1.5 minutes of CPU.
set -euo pipefail

version="${1:-v1.8.0}"
# The version goes into a module query and a path: allow only what module versions look like.
[[ "$version" =~ ^v[0-9A-Za-z.+_-]+$ ]] || { echo "fetch-versitygw: bad version '$version'" >&2; exit 2; }
cache="${MERIDIAN_CACHE:-$HOME/.cache/meridian}"
dir="$cache/versitygw-$version"
bin="$dir/bin/versitygw"

if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

command -v go >/dev/null || { echo "fetch-versitygw: go is not installed" >&2; exit 1; }
mkdir -p "$dir"
# Build into a temporary directory and move the binary into place only when the build
# succeeded, so an interrupted run leaves nothing the next run would take for a binary.
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# Outside any module (GOFLAGS cleared) so that the repository's go.mod does not constrain it.
(cd "$work" && GOFLAGS= GOBIN="$work" go install "github.com/versity/versitygw/cmd/versitygw@$version") >&2
mkdir -p "$dir/bin"
mv "$work/versitygw" "$bin"
echo "$bin"

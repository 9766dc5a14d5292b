#!/usr/bin/env bash
# Runs every fuzz target in turn for a while each, stopping at the first failure. The seed
# corpora (testdata/fuzz/) also run as ordinary tests under `go test`; this script is for
# searching beyond them. A failing input is written to the package's testdata/fuzz/<target>/,
# where it stays as a regression seed once the bug is fixed.
#
# Usage: scripts/fuzz.sh [duration per target, a go test -fuzztime value such as 30s or 10000x]
set -euo pipefail
cd "$(dirname "$0")/.."

dur=${1:-10s}

# package and target, one per line; a new fuzz target is added here.
targets=(
	"./adapters/httpapi FuzzAcceptRequest"
	"./domain FuzzRehydrate"
	"./adapters/webhook FuzzParseRetryAfter"
	"./adapters/webhook FuzzParseRetryAfterSeconds"
)

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "== $name ($pkg) for $dur"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$dur" "$pkg" 2>&1 | tee "$log"
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 || true)
	echo "== $name passed: ${execs:-execs: ?}"
done

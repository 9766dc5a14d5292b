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
	"./adapters/httpapi FuzzStorableJSON"
	"./adapters/httpapi FuzzQueriesAndPaths"
	"./adapters/httpapi FuzzOperatorBodies"
	"./adapters/httpapi FuzzVonageReceipts"
	"./domain FuzzRehydrate"
	"./adapters/providers/webhook FuzzParseRetryAfter"
	"./adapters/providers/webhook FuzzParseRetryAfterSeconds"
)

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# fuzz runs one target; it retries once when Go's fuzzing engine reports "context deadline
# exceeded" at the end of a time budget without having found an input: a race in the engine's
# coordinator (go.dev/issue/75804, fixed in Go 1.27), not a finding. A count budget (30000x, as
# `make test` uses) never meets it. A real finding writes "Failing input written to ..." and fails.
fuzz() {
	local pkg=$1 name=$2
	for attempt in 1 2; do
		if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$dur" "$pkg" 2>&1 | tee "$log"; then
			return 0
		fi
		if grep -q 'Failing input written' "$log" || ! grep -q 'context deadline exceeded' "$log"; then
			return 1
		fi
		echo "== $name: the fuzzing engine hit its deadline without a finding; running it again ($attempt)"
	done
	return 1
}

for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "== $name ($pkg) for $dur"
	fuzz "$pkg" "$name"
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 || true)
	echo "== $name passed: ${execs:-execs: ?}"
done

#!/usr/bin/env bash
# Keeps docs/openapi.yaml usable by generated clients.
#
#   scripts/openapi.sh lint      redocly lint (scripts/redocly/redocly.yaml): no error, and an
#                                overlapping oneOf is an error, not a warning
#   scripts/openapi.sh generate  regenerates the Go client cmd/internal/apiclient with oapi-codegen
#   scripts/openapi.sh check     fails when the committed client is not what the description generates
#
# Both tools are pinned and installed on first use: @redocly/cli with npm into .tools/redocly
# (git-ignored), oapi-codegen through the Go module proxy (go run pkg@version, which leaves the
# module's go.mod alone). The client's test (cmd/internal/apiclient) runs with go test.
set -euo pipefail
cd "$(dirname "$0")/.."

REDOCLY_VERSION=2.77.0
OAPI_CODEGEN=github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2
CLIENT_DIR=cmd/internal/apiclient
CLIENT=$CLIENT_DIR/client.gen.go
TOOLS=.tools/redocly
REDOCLY=$TOOLS/node_modules/.bin/redocly

# Redocly's CLI reports usage and checks for updates over the network unless told not to.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

say() { printf 'openapi: %s\n' "$*" >&2; }

redocly() {
	if [ -x "$REDOCLY" ] && [ "$("$REDOCLY" --version 2>/dev/null)" = "$REDOCLY_VERSION" ]; then
		"$REDOCLY" "$@"
		return
	fi
	if ! command -v npm >/dev/null 2>&1; then
		say "npm is missing: install Node.js 20.19 or later with npm (Debian: nodejs, npm) and run again"
		return 1
	fi
	say "installing @redocly/cli@$REDOCLY_VERSION into $TOOLS"
	mkdir -p "$TOOLS"
	if ! npm install --prefix "$TOOLS" --no-audit --no-fund --silent "@redocly/cli@$REDOCLY_VERSION" >&2; then
		say "could not install @redocly/cli@$REDOCLY_VERSION from the npm registry (see above)"
		return 1
	fi
	"$REDOCLY" "$@"
}

# generate writes the client generated from docs/openapi.yaml to $1.
generate() {
	if ! go run "$OAPI_CODEGEN" -config "$CLIENT_DIR/oapi-codegen.yaml" -o "$1" docs/openapi.yaml; then
		say "oapi-codegen failed (is the Go module proxy reachable to fetch $OAPI_CODEGEN?)"
		return 1
	fi
}

case ${1:-} in
lint)
	if ! redocly lint --config scripts/redocly/redocly.yaml --format=summary docs/openapi.yaml; then
		# The summary counts; say where.
		redocly lint --config scripts/redocly/redocly.yaml --max-problems 20 docs/openapi.yaml || true
		exit 1
	fi
	;;
generate)
	generate "$CLIENT"
	;;
check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	generate "$tmp/client.gen.go"
	if ! diff -u "$CLIENT" "$tmp/client.gen.go" >"$tmp/diff"; then
		head -n 40 "$tmp/diff" >&2
		say "$CLIENT is not what docs/openapi.yaml generates: run scripts/openapi.sh generate and commit it"
		exit 1
	fi
	;;
*)
	echo "usage: scripts/openapi.sh lint|generate|check" >&2
	exit 2
	;;
esac

#!/usr/bin/env bash
# `make run`: services up, database created and migrated, a local webhook sink, then all roles.
set -euo pipefail
cd "$(dirname "$0")/.."

export LEDGER_DATABASE_URL=${LEDGER_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ledger?sslmode=disable}
export LEDGER_API_KEYS=${LEDGER_API_KEYS:-dev:dev-secret-key}
export LEDGER_HTTP_ADDR=${LEDGER_HTTP_ADDR:-127.0.0.1:8080}
# The local sink is on loopback, which the SSRF guard refuses unless allowed.
export LEDGER_WEBHOOK_ALLOW_CIDRS=${LEDGER_WEBHOOK_ALLOW_CIDRS:-127.0.0.0/8,::1/128}
SINK_ADDR=${SINK_ADDR:-127.0.0.1:8081}

dbname=$(basename "${LEDGER_DATABASE_URL%%\?*}")
scripts/services.sh "$dbname"
bin/ledger migrate

bin/ledger sink --addr "$SINK_ADDR" &
sink_pid=$!
trap 'kill $sink_pid 2>/dev/null || true' EXIT

key=${LEDGER_API_KEYS%%,*}; key=${key#*:}
cat <<MSG

The ledger is starting on http://$LEDGER_HTTP_ADDR (API key for tenant dev: $key).
A local webhook sink listens on http://$SINK_ADDR/ and prints what it receives.

Send a first notification:

  curl -sS -X POST http://$LEDGER_HTTP_ADDR/v1/notifications \\
    -H 'Authorization: Bearer $key' -H 'Content-Type: application/json' \\
    -H "Idempotency-Key: first-\$(date +%s)" \\
    -d '{"payload":{"text":"hello"},"recipients":[{"channel":"webhook","recipient":"http://$SINK_ADDR/hook"}]}'

Then follow it (use a delivery id from the answer):

  curl -sS -H 'Authorization: Bearer $key' http://$LEDGER_HTTP_ADDR/v1/deliveries/<id>/events

Stop with Ctrl-C.

MSG
bin/ledger serve

#!/usr/bin/env bash
# `make run`: services up, database created and migrated, a local webhook sink, then all roles.
set -euo pipefail
cd "$(dirname "$0")/.."

export LEDGER_DATABASE_URL=${LEDGER_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/ledger?sslmode=disable}
export LEDGER_API_KEYS=${LEDGER_API_KEYS:-dev:dev-secret-key}
export LEDGER_HTTP_ADDR=${LEDGER_HTTP_ADDR:-127.0.0.1:8080}
# The local sink is on loopback, which the SSRF guard refuses unless allowed.
export LEDGER_WEBHOOK_ALLOW_CIDRS=${LEDGER_WEBHOOK_ALLOW_CIDRS:-127.0.0.0/8,::1/128}
# Every channel, pointed at the sink's fakes; the Telegram fake accepts this token.
export LEDGER_CONFIG=${LEDGER_CONFIG:-docs/ledger.example.yaml}
export TELEGRAM_BOT_TOKEN=${TELEGRAM_BOT_TOKEN:-123456:dev-bot-token}
# The Twilio fake accepts this auth token (and signs its status callbacks with it), the Vonage
# fake this API secret; Vonage's receipts come back with the callback token in their URL.
export TWILIO_AUTH_TOKEN=${TWILIO_AUTH_TOKEN:-dev-twilio-auth-token}
export VONAGE_API_SECRET=${VONAGE_API_SECRET:-dev-vonage-secret}
export VONAGE_CALLBACK_TOKEN=${VONAGE_CALLBACK_TOKEN:-dev-vonage-callback-token-0001}
# Webhooks of tenant dev are signed with this (Standard Webhooks) secret.
export LEDGER_UNSUBSCRIBE_SECRET=${LEDGER_UNSUBSCRIBE_SECRET:-dev-unsubscribe-secret-of-32-bytes!}
export LEDGER_WEBHOOK_SECRETS=${LEDGER_WEBHOOK_SECRETS:-dev:whsec_ZGV2LXdlYmhvb2stc2VjcmV0LTI0LWJ5dGVzIQ==}
SINK_ADDR=${SINK_ADDR:-127.0.0.1:8081}

dbname=$(basename "${LEDGER_DATABASE_URL%%\?*}")
scripts/services.sh "$dbname"
bin/ledger migrate
bin/ledger config check "$LEDGER_CONFIG" >/dev/null

bin/ledger sink --addr "$SINK_ADDR" --telegram-token "$TELEGRAM_BOT_TOKEN" \
  --twilio-auth-token "$TWILIO_AUTH_TOKEN" --vonage-api-secret "$VONAGE_API_SECRET" &
sink_pid=$!
trap 'kill $sink_pid 2>/dev/null || true' EXIT

key=${LEDGER_API_KEYS%%,*}; key=${key#*:}
cat <<MSG

The ledger is starting on http://$LEDGER_HTTP_ADDR (API key for tenant dev: $key).
Local fakes print what they receive: webhooks on http://$SINK_ADDR/, SMTP on 127.0.0.1:2525,
the Telegram Bot API on http://127.0.0.1:8082, the Twilio Messages API on http://127.0.0.1:8083
and the Vonage SMS API on http://127.0.0.1:8084 (channels: $LEDGER_CONFIG).

Send a first notification to a webhook, an email address, a Telegram chat and a phone at once:

  curl -sS -X POST http://$LEDGER_HTTP_ADDR/v1/notifications \\
    -H 'Authorization: Bearer $key' -H 'Content-Type: application/json' \\
    -H "Idempotency-Key: first-\$(date +%s)" \\
    -d '{"payload":{"subject":"Hello","text":"hello from the ledger"},"recipients":[
         {"channel":"webhook","recipient":"http://$SINK_ADDR/hook"},
         {"channel":"email","recipient":"Ann <ann@example.com>"},
         {"channel":"telegram","recipient":"123456789"},
         {"channel":"sms","recipient":"+15005550006"}]}'

Then follow it (use a delivery id from the answer):

  curl -sS -H 'Authorization: Bearer $key' http://$LEDGER_HTTP_ADDR/v1/deliveries/<id>/events

or open the console at http://$LEDGER_HTTP_ADDR/console/ and sign in with the key $key
(or: LEDGER_API_KEY=$key bin/ledger deliveries list).

Stop with Ctrl-C.

MSG
bin/ledger serve

package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Signing follows Standard Webhooks (https://www.standardwebhooks.com/): every request carries
// webhook-id (the delivery id, the same on every attempt), webhook-timestamp (Unix seconds of the
// attempt) and webhook-signature, "v1," and the base64 HMAC-SHA256 of "id.timestamp.body" keyed
// with the secret's bytes. A receiver recomputes it over the body it received, compares in
// constant time, and refuses timestamps far from its clock.

// secretPrefix starts every Standard Webhooks secret; the rest is the key, in base64.
const secretPrefix = "whsec_"

// minSecretBytes is the shortest key taken: the spec asks for 24 to 64 random bytes.
const minSecretBytes = 24

// headerWebhookSignature carries the signatures, space-separated, one per secret of the tenant.
const headerWebhookSignature = "webhook-signature"

// Secrets are the signing keys of each tenant. A tenant with two keys (a rotation in progress)
// has both, and each request carries both signatures, so the receiver can move from the old key
// to the new one without refusing a single request. A tenant without a key is sent unsigned.
type Secrets map[string][][]byte

// ParseSecrets parses LEDGER_WEBHOOK_SECRETS, "tenant:whsec_...,tenant:whsec_...": a tenant
// named twice has two keys. Every bad pair is reported; a key is never repeated in an error.
func ParseSecrets(s string) (Secrets, error) {
	out := Secrets{}
	var problems []error
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		tenant, secret, ok := strings.Cut(pair, ":")
		tenant, secret = strings.TrimSpace(tenant), strings.TrimSpace(secret)
		if !ok || tenant == "" {
			problems = append(problems, fmt.Errorf("webhook secret pair %d is not tenant:whsec_...", i+1))
			continue
		}
		key, err := DecodeSecret(secret)
		if err != nil {
			problems = append(problems, fmt.Errorf("webhook secret pair %d (tenant %q): %w", i+1, tenant, err))
			continue
		}
		out[tenant] = append(out[tenant], key)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return out, nil
}

// DecodeSecret returns the key of a whsec_ secret.
func DecodeSecret(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("a secret starts with %s", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the part after whsec_ is not base64")
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("the key has %d bytes, want at least %d random bytes", len(key), minSecretBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature value of body for the keys: "v1,<base64>" per key,
// space-separated.
func Sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	prefix := id + "." + strconv.FormatInt(timestamp, 10) + "."
	sigs := make([]string, len(keys))
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(prefix))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// Package unsubscribe signs and checks the tokens of one-click unsubscribe links (RFC 8058): a
// link in a message's List-Unsubscribe header names who opts out of what, and only the ledger
// that sent the message can have made it. The token needs no API key: its signature is the
// authority, so a recipient's mail client can use it and no one can make one for another
// recipient, tenant or category.
package unsubscribe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// MinSecretLen is the shortest secret the ledger signs with: 32 bytes, the output size of
// HMAC-SHA256, below which the key, not the hash, bounds how hard a token is to forge.
const MinSecretLen = 32

// maxTokenLen bounds what Verify reads: a token goes into a header line and a URL, and a longer
// string is no token of ours.
const maxTokenLen = 1024

// version is the first byte of every encoded token, so a later encoding can be told apart.
const version = 1

// ErrInvalid: the string is not a token this secret signed (forged, altered, truncated, or
// signed under another secret).
var ErrInvalid = errors.New("invalid unsubscribe token")

// Token is what a link opts out: one recipient (in its channel's normal form) of one tenant
// out of one category on one channel.
type Token struct {
	Tenant    string
	Channel   string
	Recipient string
	Category  string
}

// encoding is base64url without padding: URL-safe, and short.
var encoding = base64.RawURLEncoding

// Sign returns t signed under secret: base64url of the fields, each a uvarint length and its
// bytes after a version byte, a ".", and base64url of HMAC-SHA256 over that encoded part.
func Sign(secret []byte, t Token) string {
	var b []byte
	b = append(b, version)
	for _, f := range t.fields() {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	body := encoding.EncodeToString(b)
	return body + "." + mac(secret, body)
}

// Verify returns the token s is, when secret signed it; otherwise ErrInvalid. Any change to any
// byte of s is refused: the signature is compared as text, so even a change that decodes to the
// same bytes is not taken.
func Verify(secret []byte, s string) (Token, error) {
	if len(s) > maxTokenLen {
		return Token{}, fmt.Errorf("%w: longer than %d characters", ErrInvalid, maxTokenLen)
	}
	body, sig, ok := strings.Cut(s, ".")
	if !ok {
		return Token{}, fmt.Errorf("%w: no signature", ErrInvalid)
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, body))) {
		return Token{}, fmt.Errorf("%w: the signature does not match", ErrInvalid)
	}
	b, err := encoding.Strict().DecodeString(body)
	if err != nil || len(b) == 0 || b[0] != version {
		return Token{}, fmt.Errorf("%w: not an encoding this ledger makes", ErrInvalid)
	}
	b = b[1:]
	var t Token
	for _, f := range t.fieldPointers() {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return Token{}, fmt.Errorf("%w: truncated", ErrInvalid)
		}
		*f, b = string(b[w:w+int(n)]), b[w+int(n):]
	}
	if len(b) != 0 {
		return Token{}, fmt.Errorf("%w: bytes after the fields", ErrInvalid)
	}
	return t, nil
}

// Link is the URL of a token's one-click unsubscribe: {public_url}/u/{token}.
func Link(publicURL, token string) string {
	return strings.TrimSuffix(publicURL, "/") + "/u/" + token
}

func (t Token) fields() []string { return []string{t.Tenant, t.Channel, t.Recipient, t.Category} }

func (t *Token) fieldPointers() []*string {
	return []*string{&t.Tenant, &t.Channel, &t.Recipient, &t.Category}
}

// mac is base64url of HMAC-SHA256 under secret over the encoded part of a token.
func mac(secret []byte, body string) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(body))
	return encoding.EncodeToString(h.Sum(nil))
}

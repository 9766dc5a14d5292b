package postgres

import (
	"errors"
	"fmt"
	"strings"
)

// Every idempotency key the domain makes begins with its delivery's id ("<id>/attempt/1/started",
// domain.KeyAttemptStarted), and the events' unique key is (delivery_id, idempotency_key): the id
// was kept twice in each row and in each entry of the key's index, 36 of a key's ~50 bytes, four
// times a delivery. The store keeps a key without it, from its "/" on (migration 0024), and puts
// it back as it loads the event; a key that does not begin with its delivery's id is kept whole.

// ErrAmbiguousKey: an event's idempotency key begins with "/" without its delivery's id before
// it, so it could not be told from a key stored without the id.
var ErrAmbiguousKey = errors.New("idempotency key begins with / but not with its delivery id")

// keyStored is the form of an event's key in the events table.
func keyStored(deliveryID, key string) (string, error) {
	if rest, ok := strings.CutPrefix(key, deliveryID); ok && strings.HasPrefix(rest, "/") && deliveryID == strings.ToLower(deliveryID) {
		return rest, nil
	}
	if strings.HasPrefix(key, "/") {
		return "", fmt.Errorf("%w: %q of %s", ErrAmbiguousKey, key, deliveryID)
	}
	return key, nil
}

// keyLoaded is an event's key as the domain made it, from its stored form and its delivery's id
// (as PostgreSQL writes a uuid: lower case, the form keyStored strips).
func keyLoaded(deliveryID, stored string) string {
	if strings.HasPrefix(stored, "/") {
		return deliveryID + stored
	}
	return stored
}

// keysStored is keyStored for each of events' (id, key) pairs, in order.
func keysStored(ids, keys []string) ([]string, error) {
	out := make([]string, len(keys))
	for i, k := range keys {
		s, err := keyStored(ids[i], k)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

package httpapi

import (
	"bytes"
	"testing"
)

// TestRequestHashCoversMethodPathAndBody checks the fingerprint directly: no body is valid on
// both accept endpoints, so the HTTP tests cannot show that the path alone changes it.
func TestRequestHashCoversMethodPathAndBody(t *testing.T) {
	t.Parallel()
	body := []byte(`{"payload":{}}`)
	base := requestHash("POST", "/v1/deliveries", body)
	if !bytes.Equal(base, requestHash("POST", "/v1/deliveries", []byte(`{"payload":{}}`))) {
		t.Fatal("the same request hashes differently")
	}
	for name, other := range map[string][]byte{
		"path":   requestHash("POST", "/v1/notifications", body),
		"method": requestHash("PUT", "/v1/deliveries", body),
		"body":   requestHash("POST", "/v1/deliveries", []byte(`{"payload":{} }`)),
	} {
		if bytes.Equal(base, other) {
			t.Errorf("a different %s gives the same hash", name)
		}
	}
}

package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
)

// TestOpenAPIServedIsTheDocument: GET /openapi.yaml answers docs/openapi.yaml as it is in the
// repository, as YAML, and the document is a valid OpenAPI document that its own description of
// GET /openapi.yaml accepts.
func TestOpenAPIServedIsTheDocument(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	openapitest.Wrap(t, httpapi.OpenAPIHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/yaml" {
		t.Fatalf("content type %q, want application/yaml", ct)
	}
	if !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("served %d bytes that are not docs/openapi.yaml (%d bytes)", rec.Body.Len(), len(want))
	}
	doc, err := openapitest.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
}

// TestConsoleAnswersAreInTheDescription: the console's page, a file it names, a revalidation and
// a missing file, each as docs/openapi.yaml describes them (the bundle's client checks them).
func TestConsoleAnswersAreInTheDescription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	page := b.get(t, "/console/", "")
	page.expect(t, http.StatusOK, nil)
	file := regexp.MustCompile(`src="(static/[^"]+)"`).FindSubmatch(page.body)
	if file == nil {
		t.Fatalf("the console page names no script: %s", page.body)
	}
	b.get(t, "/console/"+string(file[1]), "").expect(t, http.StatusOK, nil)
	hr, err := http.NewRequest(http.MethodGet, b.url+"/console/", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("If-None-Match", page.header.Get("ETag"))
	res, err := b.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Fatalf("revalidating the page: %d, want 304", res.StatusCode)
	}
	b.get(t, "/console/static/v1/nope.js", "").expect(t, http.StatusNotFound, nil)
}

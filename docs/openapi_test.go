package docs_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/deliveryledger/ledger/docs"
)

// TestOpenAPIIsValid: the built-in document is a valid OpenAPI 3.1 document, every reference
// resolved, every example and default true to its schema.
func TestOpenAPIIsValid(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation(), openapi3.EnableSchemaDefaultsValidation()); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

package docs_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/deliveryledger/ledger/docs"
	"github.com/deliveryledger/ledger/domain"
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

// eventUnion loads the description and returns its Event schema.
func eventUnion(t *testing.T) *openapi3.Schema {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	ref := doc.Components.Schemas["Event"]
	if ref == nil || ref.Value == nil {
		t.Fatal("components.schemas.Event is missing")
	}
	return ref.Value
}

// TestEventUnionIsDiscriminated: a generated client can switch on an event's type only when the
// union says which schema each type is. Event is a oneOf of one named schema per event type the
// ledger writes (domain.EventTypes), with a discriminator on the required `type` whose mapping
// names each of them, and each schema's `type` is its mapping key and nothing else.
func TestEventUnionIsDiscriminated(t *testing.T) {
	t.Parallel()
	event := eventUnion(t)
	d := event.Discriminator
	if d == nil || d.PropertyName != "type" {
		t.Fatalf("Event has discriminator %+v, want one on type", d)
	}
	branches := map[string]*openapi3.Schema{}
	for _, item := range event.OneOf {
		if item.Ref == "" {
			t.Errorf("Event has an inline oneOf branch: each event type needs a named schema")
			continue
		}
		branches[item.Ref] = item.Value
	}
	if len(d.Mapping) != len(event.OneOf) {
		t.Errorf("the mapping names %d schemas, oneOf has %d", len(d.Mapping), len(event.OneOf))
	}
	for _, typ := range domain.EventTypes {
		ref, ok := d.Mapping[string(typ)]
		if !ok {
			t.Errorf("the mapping has no schema for %s", typ)
			continue
		}
		branch, ok := branches[ref.Ref]
		if !ok {
			t.Errorf("%s maps to %s, which is not a branch of the oneOf", typ, ref.Ref)
			continue
		}
		if !slices.Contains(branch.Required, "type") {
			t.Errorf("%s: type is not required", ref.Ref)
		}
		if p := branch.Properties["type"]; p == nil || p.Value == nil || p.Value.Const != string(typ) {
			t.Errorf("%s: type is not the constant %q", ref.Ref, typ)
		}
	}
	if len(d.Mapping) != len(domain.EventTypes) {
		t.Errorf("the mapping names %d event types, the ledger writes %d", len(d.Mapping), len(domain.EventTypes))
	}
}

// TestEventUnionRefusesWhatTheLedgerNeverWrites: each event type's schema is as strict as the
// union of one schema was: the state the type leads to, the data of the type, every member
// required, none added. It validates as openapitest validates answers (JSON Schema 2020-12, where
// the discriminator is a hint and the `type` constants tell the branches apart).
func TestEventUnionRefusesWhatTheLedgerNeverWrites(t *testing.T) {
	t.Parallel()
	event := eventUnion(t)
	const at = "2026-01-02T03:04:05Z"
	tests := []struct {
		name  string
		event string
		ok    bool
	}{
		{"a queued event", `{"version":2,"type":"delivery.queued","state":"queued","recorded_at":"` + at + `","data":{"attempt":1}}`, true},
		{"a retry with its next attempt", `{"version":5,"type":"delivery.retry_scheduled","state":"retrying","recorded_at":"` + at +
			`","data":{"attempt":1,"latency_ms":3,"status_code":503,"next_attempt_at":"` + at + `"}}`, true},
		{"a receipt, in any state", `{"version":6,"type":"delivery.receipt_recorded","state":"processing","recorded_at":"` + at +
			`","data":{"provider":"twilio","status":"pending","source":"receipt"}}`, true},
		{"a state the type does not lead to", `{"version":2,"type":"delivery.queued","state":"delivered","recorded_at":"` + at + `","data":{"attempt":1}}`, false},
		{"another type's data", `{"version":2,"type":"delivery.queued","state":"queued","recorded_at":"` + at + `","data":{"attempt":1,"provider":"webhook"}}`, false},
		{"a retry without its next attempt", `{"version":5,"type":"delivery.retry_scheduled","state":"retrying","recorded_at":"` + at +
			`","data":{"attempt":1,"latency_ms":3}}`, false},
		{"no type", `{"version":2,"state":"queued","recorded_at":"` + at + `","data":{"attempt":1}}`, false},
		{"a type the ledger does not write", `{"version":2,"type":"delivery.lost","state":"queued","recorded_at":"` + at + `","data":{"attempt":1}}`, false},
		{"no version", `{"type":"delivery.queued","state":"queued","recorded_at":"` + at + `","data":{"attempt":1}}`, false},
		{"a member no event has", `{"version":2,"type":"delivery.queued","state":"queued","recorded_at":"` + at + `","data":{"attempt":1},"tenant":"acme"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v any
			if err := json.Unmarshal([]byte(tt.event), &v); err != nil {
				t.Fatal(err)
			}
			err := event.VisitJSON(v, openapi3.EnableJSONSchema2020()) // as openapitest validates 3.1 answers
			if tt.ok && err != nil {
				t.Errorf("refused %s: %v", tt.event, err)
			}
			if !tt.ok && err == nil {
				t.Errorf("took %s", tt.event)
			}
		})
	}
}

package domain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestEveryEventKeyNamesItsDelivery: every idempotency key begins with its delivery's id and a
// slash. The store keeps a key unique with its delivery (the events' partition key, migration
// 0019), which is as unique as the key alone only while no key can name another delivery's
// operation. A Key function not listed here fails the test until it is.
func TestEveryEventKeyNamesItsDelivery(t *testing.T) {
	t.Parallel()
	const id = "019ad2b4-0000-7000-8000-000000000001"
	keys := map[string]string{
		"KeyAccepted":         KeyAccepted(id),
		"KeyQueued":           KeyQueued(id, 1),
		"KeyDeferred":         KeyDeferred(id, 1, 2),
		"KeyReconciled":       KeyReconciled(id, 1),
		"KeyReplayed":         KeyReplayed(id, 1),
		"KeyProviderAccepted": KeyProviderAccepted(id, 1),
		"KeyReceipt":          KeyReceipt(id, "twilio", "SM1", "delivered", ""),
		"KeyLookup":           KeyLookup(id, 1, 1),
		"KeyFailedOver":       KeyFailedOver(id, 1, 1),
		"KeyAttemptStarted":   KeyAttemptStarted(id, 1),
		"KeyAttemptOutcome":   KeyAttemptOutcome(id, 1),
		"KeyScheduled":        KeyScheduled(id),
		"KeyCancelled":        KeyCancelled(id),
		"KeySuppressed":       KeySuppressed(id),
	}
	for name, key := range keys {
		if !strings.HasPrefix(key, id+"/") {
			t.Errorf("%s gives %q, which does not begin with its delivery's id and a slash", name, key)
		}
	}
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range pkgs["domain"].Files {
		for _, decl := range file.Decls {
			if f, ok := decl.(*ast.FuncDecl); ok && f.Recv == nil && strings.HasPrefix(f.Name.Name, "Key") {
				if _, listed := keys[f.Name.Name]; !listed {
					t.Errorf("%s is a key of events not listed in this test: list it", f.Name.Name)
				}
			}
		}
	}
}

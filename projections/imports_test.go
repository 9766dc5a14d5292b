package projections

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSpeaksNoSQL keeps the projections to the folds and the rules: the SQL of their tables and
// of the log they read is postgres.Views', behind the ports of store.go. The package's own files
// may import the standard library but for database/sql, the module's domain, and uuid (the read
// API's cursors); a driver of any database, a pool or a SQL builder is a reason to put the
// statement in the adapter. The external tests (package projections_test) wire the real database
// and may.
func TestSpeaksNoSQL(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{
		"github.com/deliveryledger/ledger/domain": true,
		"github.com/google/uuid":                  true,
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(".", e.Name()), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "projections" {
			continue // projections_test
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(p, "/")
			standard := !strings.Contains(first, ".")
			if allowed[p] || (standard && p != "database/sql" && !strings.HasPrefix(p, "database/sql/")) {
				continue
			}
			t.Errorf("%s imports %s: the projections hold folds and rules; SQL and drivers belong to adapters/postgres", e.Name(), p)
		}
	}
	// A check that read nothing would pass for any package.
	if checked < 10 {
		t.Fatalf("checked %d files, want the package's files", checked)
	}
}

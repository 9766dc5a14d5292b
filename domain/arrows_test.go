package domain

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modulePrefix is the ledger's module path with a slash, as go.mod names it (read rather than
// written here, so that domain/ names no package of the module, not even in a string).
func modulePrefix(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m) + "/"
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// TestArrowsRunOneWay keeps the layout of docs/design.md ("Packages and what each may import"):
// adapters → projections → domain and adapters → commands → domain. Nothing under projections/
// or commands/ imports adapters/ or cmd/, neither imports the other, and domain imports nothing
// of the module. The product code is held to it, and so are tests inside those packages; a
// package's external tests (package x_test) may wire adapters, since they test the package
// against the real database and broker. It lives here, at the root of the arrows, because it
// needs nothing but the standard library.
func TestArrowsRunOneWay(t *testing.T) {
	t.Parallel()
	forbidden := map[string][]string{
		"domain":      {""}, // any package of the module
		"commands":    {"adapters/", "cmd/", "projections"},
		"projections": {"adapters/", "cmd/", "commands"},
		// retention decides what leaves the hot store; its ports are the store's and the
		// archive's, which adapters implement.
		"retention": {"adapters/", "cmd/", "commands"},
		// tracing is the OpenTelemetry edge every layer may call: it knows none of them.
		"tracing": {"adapters/", "cmd/", "commands", "projections", "domain"},
	}
	module := modulePrefix(t)
	checked := 0
	for dir, banned := range forbidden {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			if strings.HasSuffix(f.Name.Name, "_test") {
				return nil // an external test package may wire adapters
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				rel, ok := strings.CutPrefix(p, module)
				if !ok {
					continue
				}
				for _, b := range banned {
					if strings.HasPrefix(rel, b) {
						t.Errorf("%s imports %s: the arrows run adapters → commands/projections → domain", path, p)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", dir, err)
		}
	}
	// A check that read nothing would pass for any tree.
	if checked < 20 {
		t.Fatalf("checked %d files, want the packages' files", checked)
	}
}

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

// TestImportsStandardLibraryOnly keeps domain pure: the rules of the ledger must not depend on
// a driver, a broker client or a framework. A standard library path has no dot in its first
// element (encoding/json); every module path outside it has one, such as a github.com path.
// Test files are held to the same rule.
func TestImportsStandardLibraryOnly(t *testing.T) {
	t.Parallel()

	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatalf("read package directory: %v", err)
	}
	fset := token.NewFileSet()
	var sources, tests int
	for _, entry := range entries {
		name := entry.Name()
		if entry.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		if strings.HasSuffix(name, "_test.go") {
			tests++
		} else {
			sources++
		}
		f, err := parser.ParseFile(fset, filepath.Join(".", name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", name, imp.Path.Value, err)
			}
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") {
				t.Errorf("%s imports %q, which is not standard library", name, path)
			}
		}
	}
	// A check that parsed nothing would pass for any package.
	if sources == 0 || tests == 0 {
		t.Fatalf("found %d source and %d test files in the package directory", sources, tests)
	}
}

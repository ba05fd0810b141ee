package protocol

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Both sides link this package: an import of a client, of the controller or of the
// runner's tools here would put that code into the other side's binary. Only the
// standard library and the API types may be imported.
func TestImportsOnlyTheStandardLibraryAndTheAPITypes(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && path != "github.com/toolgate/toolgate/api/v1alpha1" {
				t.Errorf("%s imports %s: package protocol may import only the standard library and the API types", name, path)
			}
		}
	}
	if files == 0 {
		t.Fatal("no source file of the package was read")
	}
}

package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Sample is one document of the samples people read and copy
// (config/samples/toolgate_*.yaml).
type Sample struct {
	// File is the sample file's base name.
	File string
	// Doc is the document as written.
	Doc []byte
	// Object is the document decoded.
	Object *unstructured.Unstructured
}

// Samples reads every document of config/samples/toolgate_*.yaml, in file order. A
// file that does not decode is an error naming it; finding no sample is one too.
func Samples() ([]Sample, error) {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "config", "samples", "toolgate_*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []Sample
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
			}
			if len(u.Object) == 0 {
				continue // comments only
			}
			out = append(out, Sample{File: filepath.Base(f), Doc: []byte(doc), Object: u})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no samples found in config/samples")
	}
	return out, nil
}

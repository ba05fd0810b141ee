package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/policy"
	"github.com/toolgate/toolgate/internal/policyset"
)

// policyDoc is one ToolPolicy or ClusterToolPolicy read from a file.
type policyDoc struct {
	kind       string
	name       string
	generation int64
	spec       v1.ToolPolicySpec
}

func (d policyDoc) id() string { return d.kind + "/" + d.name }

// readPolicyFile reads every ToolPolicy and ClusterToolPolicy of a YAML (or JSON)
// file with one or more documents. Unknown fields are errors, so a misspelt field
// does not silently leave a rule wider than meant.
func readPolicyFile(path string) ([]policyDoc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parsePolicyDocs(path, data)
}

func parsePolicyDocs(path string, data []byte) ([]policyDoc, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []policyDoc
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d is not YAML: %w", path, n, err)
		}
		if tm.APIVersion != v1.GroupVersion.String() {
			return nil, fmt.Errorf("%s: document %d has apiVersion %q; want %s", path, n, tm.APIVersion, v1.GroupVersion)
		}
		var d policyDoc
		switch tm.Kind {
		case policy.KindToolPolicy:
			var p v1.ToolPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				return nil, fmt.Errorf("%s: document %d (ToolPolicy): %w", path, n, err)
			}
			d = policyDoc{kind: tm.Kind, name: p.Name, generation: p.Generation, spec: p.Spec}
		case policy.KindClusterToolPolicy:
			var p v1.ClusterToolPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				return nil, fmt.Errorf("%s: document %d (ClusterToolPolicy): %w", path, n, err)
			}
			d = policyDoc{kind: tm.Kind, name: p.Name, generation: p.Generation, spec: p.Spec}
		default:
			return nil, fmt.Errorf("%s: document %d is a %q; only ToolPolicy and ClusterToolPolicy are evaluated", path, n, tm.Kind)
		}
		if d.name == "" {
			return nil, fmt.Errorf("%s: document %d (%s) has no metadata.name", path, n, tm.Kind)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no ToolPolicy or ClusterToolPolicy", path)
	}
	return out, nil
}

// compilePolicies compiles the policies of a file the way the controller compiles
// the cluster's (sorted by name within each kind). A policy that does not compile
// is an error: a file given on purpose should be fixed, not skipped.
func compilePolicies(docs []policyDoc) (policyset.Set, error) {
	var out policyset.Set
	sorted := append([]policyDoc(nil), docs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, d := range sorted {
		p, err := policy.Compile(d.kind, d.name, d.generation, d.spec)
		if err != nil {
			return out, fmt.Errorf("%s does not compile: %w", d.id(), err)
		}
		if p.Cluster() {
			out.Cluster = append(out.Cluster, p)
		} else {
			out.Namespaced = append(out.Namespaced, p)
		}
	}
	return out, nil
}

// loadPolicyFile reads and compiles a policy file.
func loadPolicyFile(path string) (policyset.Set, error) {
	docs, err := readPolicyFile(path)
	if err != nil {
		return policyset.Set{}, err
	}
	return compilePolicies(docs)
}

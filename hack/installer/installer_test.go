package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testenv"
)

const (
	chartDir      = "../../dist/chart"
	configDefault = "../../config/default"
	configArchive = "../../config/archive"
	configCRDs    = "../../config/crd/bases"
	// allValues sets every value of the chart (TestChartValuesReachTheManager keeps
	// it so): helm lint runs with it too.
	allValues = "testdata/all-values.yaml"
	namespace = "toolgate-system"
)

// objects is a rendered stream, keyed by kind/namespace/name.
type objects map[string]*unstructured.Unstructured

func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func parse(t *testing.T, stream string) objects {
	t.Helper()
	objs := objects{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("parse %q: %v", doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		k := key(u.GetKind(), u.GetNamespace(), u.GetName())
		if _, dup := objs[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		objs[k] = u
	}
	return objs
}

// renderKustomize renders a kustomization as `make build-installer` does, without
// setting images.
func renderKustomize(t *testing.T, dir string) objects {
	t.Helper()
	m, err := Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(y))
}

// renderChart is `helm template --include-crds --namespace toolgate-system`, through
// helm's own install action in client-only dry-run mode.
func renderChart(t *testing.T, values map[string]any) objects {
	t.Helper()
	out, err := templateChart(values)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

func templateChart(values map[string]any) (string, error) {
	return templateChartIn(values, namespace)
}

func templateChartIn(values map[string]any, ns string) (string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = "toolgate"
	install.Namespace = ns
	install.IncludeCRDs = true
	r, err := install.Run(chrt, values)
	if err != nil {
		return "", fmt.Errorf("helm template: %w", err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return "", fmt.Errorf("helm template returned a %T, not a v1 release", r)
	}
	return throughKyaml(rel.Manifest)
}

// throughKyaml reads and writes a stream as kustomize does. kustomize's YAML
// library rewrites some folded scalars (a blank line more in the CEL expressions
// of config/admission): the chart's objects go through it too, so that both sides
// are compared as the same library reads them.
func throughKyaml(stream string) (string, error) {
	nodes, err := kio.FromBytes([]byte(stream))
	if err != nil {
		return "", fmt.Errorf("parse the chart's rendering: %w", err)
	}
	var docs []string
	for _, n := range nodes {
		s, err := n.String()
		if err != nil {
			return "", err
		}
		docs = append(docs, s)
	}
	return strings.Join(docs, "---\n"), nil
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestChartLints runs helm lint, strict (a warning fails too), with the chart's
// defaults and with every value set.
func TestChartLints(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, allValues: readValues(t, allValues)} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			result := lint.Run([]string{chartDir}, values)
			for _, m := range result.Messages {
				t.Log(m)
			}
			if len(result.Errors) > 0 || result.TotalChartsLinted != 1 {
				t.Fatalf("helm lint: %d charts linted, errors: %v", result.TotalChartsLinted, result.Errors)
			}
		})
	}
}

// TestChartLintCatchesErrors shows the lint above fails on a broken template.
func TestChartLintCatchesErrors(t *testing.T) {
	broken := t.TempDir()
	if err := os.CopyFS(broken, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "templates", "broken.yaml"), []byte("{{ .Values.nothing.here }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lint := action.NewLint()
	lint.Strict = true
	if result := lint.Run([]string{broken}, nil); len(result.Errors) == 0 {
		t.Fatal("helm lint passed a template that dereferences a missing value")
	}
}

// chartOnly removes from the chart's default rendering what it adds to
// config/default, each for a reason, so that everything else must be equal:
//   - replicas: the chart runs two (leader election, a standby); config/default one,
//     for the kind cluster of make deploy.
//   - the archive API's certificate (its Secret, the APIService's caBundle, the
//     manager's --archive-api-cert-dir and its volume): with two replicas each would
//     make its own and overwrite the others' CA; config/default's single replica
//     makes one at start.
func chartOnly(t *testing.T, objs objects) {
	t.Helper()
	certSecret := key("Secret", namespace, "toolgate-archive-api-cert")
	if _, ok := objs[certSecret]; !ok {
		t.Fatalf("the chart renders no %s", certSecret)
	}
	delete(objs, certSecret)
	apiService := objs[key("APIService", "", "v1alpha1.archive.toolgate.dev")]
	if apiService == nil {
		t.Fatal("the chart renders no APIService")
	}
	unstructured.RemoveNestedField(apiService.Object, "spec", "caBundle")
	d := objs[key("Deployment", namespace, "toolgate-controller-manager")]
	if d == nil {
		t.Fatal("the chart renders no manager Deployment")
	}
	unstructured.RemoveNestedField(d.Object, "spec", "replicas")
	pod := d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := pod["containers"].([]any)[0].(map[string]any)
	c["args"] = remove(t, c["args"].([]any), func(a any) bool { return strings.HasPrefix(a.(string), "--archive-api-cert-dir=") })
	isCert := func(v any) bool { return v.(map[string]any)["name"] == "archive-api-cert" }
	c["volumeMounts"] = remove(t, c["volumeMounts"].([]any), isCert)
	pod["volumes"] = remove(t, pod["volumes"].([]any), isCert)
}

func remove(t *testing.T, list []any, match func(any) bool) []any {
	t.Helper()
	out := slices.DeleteFunc(slices.Clone(list), match)
	if len(out) != len(list)-1 {
		t.Fatalf("expected one element to remove from %v, removed %d", list, len(list)-len(out))
	}
	return out
}

// TestChartMatchesConfigDefault holds the chart, with its default values, to what
// `make deploy` applies: the same objects, whole (CRDs, RBAC rules, admission
// policies, the manager's args, env, ports, volumes...), save chartOnly's.
func TestChartMatchesConfigDefault(t *testing.T) {
	want := renderKustomize(t, configDefault)
	// The chart installs into the release's namespace (helm install
	// --create-namespace); docs/install.md says to label it as config/default does.
	delete(want, key("Namespace", "", namespace))
	unstructured.RemoveNestedField(want[key("Deployment", namespace, "toolgate-controller-manager")].Object, "spec", "replicas")
	got := renderChart(t, nil)
	chartOnly(t, got)
	if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
		t.Errorf("the chart's objects differ from config/default's (-config/default +chart):\n%s", diff)
	}
	for k, w := range want {
		if g, ok := got[k]; ok {
			if diff := cmp.Diff(w.Object, g.Object); diff != "" {
				t.Errorf("%s differs (-config/default +chart):\n%s", k, diff)
			}
		}
	}
}

func keys(objs objects) []string {
	ks := make([]string, 0, len(objs))
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestChartCRDsAreConfigCRDs: the chart's crds/ are controller-gen's, byte for byte.
func TestChartCRDsAreConfigCRDs(t *testing.T) {
	want, err := filepath.Glob(filepath.Join(configCRDs, "*.yaml"))
	if err != nil || len(want) == 0 {
		t.Fatalf("no CRDs in %s: %v", configCRDs, err)
	}
	got, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	base := func(ps []string) []string {
		var bs []string
		for _, p := range ps {
			bs = append(bs, filepath.Base(p))
		}
		return bs
	}
	if diff := cmp.Diff(base(want), base(got)); diff != "" {
		t.Fatalf("dist/chart/crds/ holds other files than config/crd/bases/ (-config +chart); copy them: cp config/crd/bases/*.yaml dist/chart/crds/\n%s", diff)
	}
	for _, p := range want {
		w, _ := os.ReadFile(p)
		g, _ := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(p)))
		if !bytes.Equal(w, g) {
			t.Errorf("dist/chart/crds/%s differs from config/crd/bases/: cp config/crd/bases/*.yaml dist/chart/crds/", filepath.Base(p))
		}
	}
}

// managerContainerOf returns the manager's container and pod spec.
func managerContainerOf(objs objects) (container, pod map[string]any, err error) {
	d := objs[key("Deployment", namespace, "toolgate-controller-manager")]
	if d == nil {
		return nil, nil, fmt.Errorf("no manager Deployment")
	}
	pod, _, _ = unstructured.NestedMap(d.Object, "spec", "template", "spec")
	containers, _, _ := unstructured.NestedSlice(pod, "containers")
	for _, c := range containers {
		if c.(map[string]any)["name"] == managerContainer {
			return c.(map[string]any), pod, nil
		}
	}
	return nil, nil, fmt.Errorf("no container %s", managerContainer)
}

func argsOf(objs objects) []string {
	c, _, err := managerContainerOf(objs)
	if err != nil {
		return nil
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

// Checks of the table below: each returns nil when the rendering shows the value.
func hasArg(arg string) func(objects) error {
	return func(objs objects) error {
		if !slices.Contains(argsOf(objs), arg) {
			return fmt.Errorf("the manager's args %v lack %s", argsOf(objs), arg)
		}
		return nil
	}
}

func lacksArgPrefix(prefix string) func(objects) error {
	return func(objs objects) error {
		for _, a := range argsOf(objs) {
			if strings.HasPrefix(a, prefix) {
				return fmt.Errorf("the manager's args hold %s", a)
			}
		}
		return nil
	}
}

func lacks(kind, name string) func(objects) error {
	return func(objs objects) error {
		ns := namespace
		if kind == "APIService" {
			ns = ""
		}
		if objs[key(kind, ns, name)] != nil {
			return fmt.Errorf("%s %s is rendered", kind, name)
		}
		return nil
	}
}

// field checks a field of an object at a path of map keys and list indexes.
func field(kind, name string, want any, path ...any) func(objects) error {
	return func(objs objects) error {
		ns := namespace
		o := objs[key(kind, ns, name)]
		if o == nil {
			return fmt.Errorf("no %s %s", kind, name)
		}
		var v any = o.Object
		for _, p := range path {
			switch p := p.(type) {
			case string:
				m, ok := v.(map[string]any)
				if !ok {
					return fmt.Errorf("%s %s: no %v", kind, name, path)
				}
				v = m[p]
			case int:
				l, ok := v.([]any)
				if !ok || p >= len(l) {
					return fmt.Errorf("%s %s: no %v", kind, name, path)
				}
				v = l[p]
			}
		}
		// Compare as JSON does: numbers rendered from YAML are float64.
		var w any
		j, _ := yaml.Marshal(want)
		_ = yaml.Unmarshal(j, &w)
		if !reflect.DeepEqual(v, w) {
			return fmt.Errorf("%s %s %v is %#v, want %#v", kind, name, path, v, w)
		}
		return nil
	}
}

func all(checks ...func(objects) error) func(objects) error {
	return func(objs objects) error {
		for _, c := range checks {
			if err := c(objs); err != nil {
				return err
			}
		}
		return nil
	}
}

// manager is the path to the manager's container in its Deployment.
var manager = []any{"spec", "template", "spec", "containers", 0}

func managerField(want any, path ...any) func(objects) error {
	return field("Deployment", "toolgate-controller-manager", want, append(slices.Clone(manager), path...)...)
}

func podField(want any, path ...any) func(objects) error {
	return field("Deployment", "toolgate-controller-manager", want, append([]any{"spec", "template", "spec"}, path...)...)
}

// valueCases: each value of the chart, set, and what it changes in the rendering.
// Every leaf of values.yaml must be some case's path (TestChartValuesReachTheManager).
var valueCases = []struct {
	path  string
	value any
	// also sets further values the case needs (the judge's model with its endpoint).
	also  map[string]any
	check func(objects) error
}{
	{path: "replicaCount", value: 3, check: field("Deployment", "toolgate-controller-manager", 3, "spec", "replicas")},
	{path: "leaderElection", value: false, check: lacksArgPrefix("--leader-elect")},
	{path: "images.controller", value: "example.com/controller:v1", check: managerField("example.com/controller:v1", "image")},
	{path: "images.runner", value: "example.com/runner:v1", check: hasArg("--runner-image=example.com/runner:v1")},
	{path: "images.workspace", value: "example.com/workspace:v1", check: hasArg("--default-sandbox-image=example.com/workspace:v1")},
	{path: "images.postgres", value: "example.com/postgres:v1", check: field("StatefulSet", "toolgate-archive-db", "example.com/postgres:v1", "spec", "template", "spec", "containers", 0, "image")},
	{path: "images.pullPolicy", value: "Always", check: all(managerField("Always", "imagePullPolicy"),
		field("StatefulSet", "toolgate-archive-db", "Always", "spec", "template", "spec", "containers", 0, "imagePullPolicy"))},
	{path: "imagePullSecrets", value: []any{map[string]any{"name": "pull"}}, check: all(podField([]any{map[string]any{"name": "pull"}}, "imagePullSecrets"),
		field("StatefulSet", "toolgate-archive-db", []any{map[string]any{"name": "pull"}}, "spec", "template", "spec", "imagePullSecrets"))},
	{path: "modelEndpoints", value: []any{"https://llm.example.com/v1", "http://vllm:8000/v1"}, check: hasArg("--model-endpoints=https://llm.example.com/v1,http://vllm:8000/v1")},
	{path: "workers.intent", value: 16, check: hasArg("--intent-workers=16")},
	{path: "workers.execution", value: 17, check: hasArg("--execution-workers=17")},
	{path: "workers.approval", value: 3, check: hasArg("--approval-workers=3")},
	{path: "workers.task", value: 9, check: hasArg("--task-workers=9")},
	{path: "spentJobTTL", value: "5m", check: hasArg("--spent-job-ttl=5m")},
	{path: "sessionIdleTimeout", value: "20m", check: hasArg("--session-idle-timeout=20m")},
	{path: "callRetention", value: "2h", check: hasArg("--call-retention=2h")},
	{path: "taskTTLAfterFinished", value: "48h", check: hasArg("--task-ttl-after-finished=48h")},
	{path: "judge.endpoint", value: "http://vllm:8000/v1", also: map[string]any{"judge.model": "m"}, check: hasArg("--judge-endpoint=http://vllm:8000/v1")},
	{path: "judge.model", value: "qwen", also: map[string]any{"judge.endpoint": "http://vllm:8000/v1"}, check: hasArg("--judge-model=qwen")},
	{path: "judge.apiKeySecret.name", value: "judge-key", also: map[string]any{"judge.endpoint": "http://j/v1", "judge.model": "m"}, check: all(
		hasArg("--judge-api-key-file=/etc/toolgate/judge/api-key"),
		podField("judge-key", "volumes", 2, "secret", "secretName"),
		managerField(map[string]any{"name": "judge-api-key", "mountPath": "/etc/toolgate/judge", "readOnly": true}, "volumeMounts", 2))},
	{path: "judge.apiKeySecret.key", value: "token", also: map[string]any{"judge.endpoint": "http://j/v1", "judge.model": "m", "judge.apiKeySecret.name": "judge-key"},
		check: podField([]any{map[string]any{"key": "token", "path": "api-key"}}, "volumes", 2, "secret", "items")},
	{path: "judge.timeout", value: "3s", also: map[string]any{"judge.endpoint": "http://j/v1", "judge.model": "m"}, check: hasArg("--judge-timeout=3s")},
	{path: "judge.concurrency", value: 7, also: map[string]any{"judge.endpoint": "http://j/v1", "judge.model": "m"}, check: hasArg("--judge-concurrency=7")},
	{path: "mcp.enabled", value: false, check: all(lacksArgPrefix("--mcp-"), lacks("Service", "toolgate-mcp"), managerField([]any{
		map[string]any{"name": "metrics", "containerPort": 8080}, map[string]any{"name": "archive-api", "containerPort": 8443}}, "ports"))},
	{path: "mcp.port", value: 9000, check: all(hasArg("--mcp-bind-address=:9000"), managerField(map[string]any{"name": "mcp", "containerPort": 9000}, "ports", 1))},
	{path: "mcp.maxWait", value: "2m", check: hasArg("--mcp-max-wait=2m")},
	{path: "mcp.service.type", value: "LoadBalancer", check: field("Service", "toolgate-mcp", "LoadBalancer", "spec", "type")},
	{path: "mcp.service.port", value: 443, check: field("Service", "toolgate-mcp", 443, "spec", "ports", 0, "port")},
	{path: "archive.enabled", value: false, check: all(lacksArgPrefix("--archive-"), lacks("StatefulSet", "toolgate-archive-db"),
		lacks("APIService", "v1alpha1.archive.toolgate.dev"), lacks("Secret", "toolgate-archive-api-cert"), podField(nil, "volumes"))},
	{path: "archive.secretName", value: "my-archive", check: all(podField("my-archive", "volumes", 0, "secret", "secretName"),
		field("StatefulSet", "toolgate-archive-db", "my-archive", "spec", "template", "spec", "volumes", 0, "secret", "secretName"))},
	{path: "archive.api.enabled", value: false, check: all(lacksArgPrefix("--archive-api-"), lacks("APIService", "v1alpha1.archive.toolgate.dev"),
		lacks("Service", "toolgate-archive-api"), hasArg("--archive-dsn-file=/etc/toolgate/archive/dsn"))},
	{path: "archive.postgres.enabled", value: false, check: all(lacks("StatefulSet", "toolgate-archive-db"), lacks("NetworkPolicy", "toolgate-archive-db"),
		hasArg("--archive-dsn-file=/etc/toolgate/archive/dsn"))},
	{path: "archive.postgres.storage", value: "20Gi", check: field("StatefulSet", "toolgate-archive-db", "20Gi", "spec", "volumeClaimTemplates", 0, "spec", "resources", "requests", "storage")},
	{path: "archive.postgres.storageClassName", value: "fast", check: field("StatefulSet", "toolgate-archive-db", "fast", "spec", "volumeClaimTemplates", 0, "spec", "storageClassName")},
	{path: "archive.postgres.resources", value: map[string]any{"limits": map[string]any{"cpu": "2", "memory": "2Gi"}},
		check: field("StatefulSet", "toolgate-archive-db", map[string]any{"cpu": "2", "memory": "2Gi"}, "spec", "template", "spec", "containers", 0, "resources", "limits")},
	{path: "notifications.workers", value: 5, check: hasArg("--notification-workers=5")},
	{path: "notifications.timeout", value: "20s", check: hasArg("--notification-timeout=20s")},
	{path: "notifications.backoff", value: "1s", check: hasArg("--notification-backoff=1s")},
	{path: "notifications.maxBackoff", value: "1m", check: hasArg("--notification-max-backoff=1m")},
	{path: "notifications.maxAttempts", value: 3, check: hasArg("--notification-max-attempts=3")},
	{path: "goMemLimit", value: "900MiB", check: managerField(map[string]any{"name": "GOMEMLIMIT", "value": "900MiB"}, "env", 1)},
	{path: "resources", value: map[string]any{"limits": map[string]any{"cpu": "2", "memory": "1Gi"}}, check: managerField(map[string]any{"cpu": "2", "memory": "1Gi"}, "resources", "limits")},
	{path: "nodeSelector", value: map[string]any{"pool": "system"}, check: podField(map[string]any{"pool": "system"}, "nodeSelector")},
	{path: "tolerations", value: []any{map[string]any{"key": "system", "operator": "Exists"}}, check: podField([]any{map[string]any{"key": "system", "operator": "Exists"}}, "tolerations")},
	{path: "affinity", value: map[string]any{"podAntiAffinity": map[string]any{}}, check: podField(map[string]any{"podAntiAffinity": map[string]any{}}, "affinity")},
	{path: "extraArgs", value: []any{"--zap-log-level=debug"}, check: hasArg("--zap-log-level=debug")},
}

// set puts value at a dotted path of a values map.
func set(values map[string]any, path string, value any) {
	parts := strings.Split(path, ".")
	m := values
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = value
}

// leaves lists the dotted paths of values.yaml's settings: a map is walked into
// unless a case sets it whole.
func leaves(prefix string, m map[string]any, whole map[string]bool) []string {
	var out []string
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !whole[p] {
			out = append(out, leaves(p, sub, whole)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// TestChartValuesReachTheManager sets each value alone and sees it in the
// rendering; each check must fail on the defaults (else it proves nothing).
func TestChartValuesReachTheManager(t *testing.T) {
	defaults := renderChart(t, nil)
	covered := map[string]bool{}
	for _, c := range valueCases {
		covered[c.path] = true
		t.Run(c.path, func(t *testing.T) {
			if c.check(defaults) == nil {
				t.Fatalf("the check passes with the default values: it cannot show %s does anything", c.path)
			}
			values := map[string]any{}
			for p, v := range c.also {
				set(values, p, v)
			}
			set(values, c.path, c.value)
			if err := c.check(renderChart(t, values)); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, p := range leaves("", readValues(t, filepath.Join(chartDir, "values.yaml")), covered) {
		if !covered[p] {
			t.Errorf("values.yaml's %s has no case in valueCases: show it reaches the rendering", p)
		}
	}
	// The values file helm lint runs with sets every value.
	all := readValues(t, allValues)
	for _, p := range leaves("", readValues(t, filepath.Join(chartDir, "values.yaml")), covered) {
		if !hasPath(all, p) {
			t.Errorf("%s does not set %s", allValues, p)
		}
	}
}

func hasPath(m map[string]any, path string) bool {
	var v any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = mm[p]; !ok {
			return false
		}
	}
	return true
}

// TestChartRefusesJudgeWithoutModel: the manager would refuse it at start; the
// chart says so at install.
func TestChartRefusesJudgeWithoutModel(t *testing.T) {
	_, err := templateChart(map[string]any{"judge": map[string]any{"endpoint": "http://j/v1"}})
	if err == nil || !strings.Contains(err.Error(), "judge.model is required with judge.endpoint") {
		t.Fatalf("want the chart to refuse a judge endpoint without a model, got %v", err)
	}
}

// TestChartArgsAreManagerFlags: every flag the chart passes, with every value set,
// is one the manager defines (its -help, from the real binary).
func TestChartArgsAreManagerFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/manager")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/manager: %v\n%s", err, out)
	}
	// -help exits 2 after printing the flags.
	help, _ := exec.Command(bin, "-help").CombinedOutput()
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		defined[m[1]] = true
	}
	if !defined["runner-image"] {
		t.Fatalf("could not read the manager's flags from its -help:\n%s", help)
	}
	args := argsOf(renderChart(t, readValues(t, allValues)))
	if len(args) < 20 {
		t.Fatalf("%s renders only %d args: %v", allValues, len(args), args)
	}
	for _, a := range args {
		name := strings.TrimPrefix(strings.SplitN(a, "=", 2)[0], "--")
		if !defined[name] {
			t.Errorf("the chart passes %s, which the manager does not define", a)
		}
	}
}

// TestBuildInstaller runs what `make build-installer` runs and checks the images
// are set wherever the development ones were, and that the two files together are
// config/default, archive-db.yaml holding config/archive's objects.
func TestBuildInstaller(t *testing.T) {
	out := t.TempDir()
	images := Images{Controller: "example.com/c:v1", Runner: "example.com/r:v1", Workspace: "example.com/w:v1", Postgres: "example.com/p:v1"}
	if err := run(configDefault, out, images); err != nil {
		t.Fatal(err)
	}
	read := func(name string) (string, objects) {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data), parse(t, string(data))
	}
	installText, install := read("install.yaml")
	archiveText, archiveDB := read("archive-db.yaml")
	for _, dev := range []string{"toolgate/controller:dev", "toolgate/runner:dev", "toolgate/workspace:dev", "toolgate/postgres:dev", "controller:latest"} {
		if strings.Contains(installText+archiveText, dev) {
			t.Errorf("the manifests still name %s", dev)
		}
	}
	for _, check := range []func(objects) error{
		managerField("example.com/c:v1", "image"),
		hasArg("--runner-image=example.com/r:v1"),
		hasArg("--default-sandbox-image=example.com/w:v1"),
	} {
		if err := check(install); err != nil {
			t.Error(err)
		}
	}
	if err := field("StatefulSet", "toolgate-archive-db", "example.com/p:v1", "spec", "template", "spec", "containers", 0, "image")(archiveDB); err != nil {
		t.Error(err)
	}

	whole := renderKustomize(t, configDefault)
	var union []string
	for _, objs := range []objects{install, archiveDB} {
		union = append(union, keys(objs)...)
	}
	sort.Strings(union)
	if diff := cmp.Diff(keys(whole), union); diff != "" {
		t.Errorf("install.yaml and archive-db.yaml are not config/default's objects (-config/default +files):\n%s", diff)
	}
	var wantArchive []string
	for _, o := range renderKustomize(t, configArchive) {
		wantArchive = append(wantArchive, key(o.GetKind(), namespace, "toolgate-"+o.GetName()))
	}
	sort.Strings(wantArchive)
	if diff := cmp.Diff(wantArchive, keys(archiveDB)); diff != "" {
		t.Errorf("archive-db.yaml is not config/archive's objects (-config/archive +archive-db.yaml):\n%s", diff)
	}
	// kubectl apply -f makes the namespace before the objects in it.
	if !regexp.MustCompile(`\A(#[^\n]*\n)*apiVersion: v1\nkind: Namespace\n`).MatchString(installText) {
		t.Errorf("install.yaml does not open with the Namespace:\n%.300s", installText)
	}
}

// TestBuildInstallerRefusesMissingImages: no image may be left to a default.
func TestBuildInstallerRefusesMissingImages(t *testing.T) {
	err := run(configDefault, t.TempDir(), Images{Controller: "c", Runner: "r", Workspace: "w"})
	if err == nil || err.Error() != "-postgres-image is required" {
		t.Fatalf("want -postgres-image is required, got %v", err)
	}
}

// TestChartAppliesToAnAPIServer: a real kube-apiserver (envtest) accepts every
// object the chart renders with every value set, in a namespace other than
// toolgate-system: the objects are valid, the admission policies' CEL compiles, and
// the namespace reaches every reference to it.
func TestChartAppliesToAnAPIServer(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	const ns = "governance"
	out, err := templateChartIn(readValues(t, allValues), ns)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	// The namespace first, the CRDs next (the objects of later kinds may need them),
	// then the rest in a fixed order.
	ordered := []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}}
	for _, crdFirst := range []bool{true, false} {
		for _, k := range keys(objs) {
			if (objs[k].GetKind() == "CustomResourceDefinition") == crdFirst {
				ordered = append(ordered, objs[k])
			}
		}
	}
	for _, o := range ordered {
		// Server-side apply: envtest installed config/crd's CRDs already, the same.
		if err := env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("installer-test"), client.ForceOwnership); err != nil {
			t.Errorf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	params := objs[key("ConfigMap", ns, "toolgate-admission-params")]
	if got, _, _ := unstructured.NestedString(params.Object, "data", "controllerServiceAccount"); got != "system:serviceaccount:"+ns+":toolgate-controller-manager" {
		t.Errorf("the admission policies take the controller to be %q", got)
	}
	for _, k := range keys(objs) {
		if strings.Contains(k, "toolgate-system") || strings.Contains(fmt.Sprint(objs[k].Object), "toolgate-system") {
			t.Errorf("%s names toolgate-system, not the release's namespace", k)
		}
	}
}

// TestChartArchiveAPICertificate: the certificate the chart makes for the archive
// API is signed by the CA it puts in the APIService, for the name the aggregator
// dials (the Service's, in the release's namespace).
func TestChartArchiveAPICertificate(t *testing.T) {
	const ns = "governance"
	out, err := templateChartIn(nil, ns)
	if err != nil {
		t.Fatal(err)
	}
	objs := parse(t, out)
	secret := objs[key("Secret", ns, "toolgate-archive-api-cert")]
	apiService := objs[key("APIService", "", "v1alpha1.archive.toolgate.dev")]
	if secret == nil || apiService == nil {
		t.Fatal("the chart renders no archive API certificate or APIService")
	}
	decode := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	bundle, _, _ := unstructured.NestedString(apiService.Object, "spec", "caBundle")
	if bundle != data["ca.crt"] {
		t.Fatal("the APIService's caBundle is not the Secret's ca.crt")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(decode(bundle)) {
		t.Fatal("the caBundle holds no PEM certificate")
	}
	pair, err := tls.X509KeyPair(decode(data["tls.crt"]), decode(data["tls.key"]))
	if err != nil {
		t.Fatalf("tls.crt and tls.key: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "toolgate-archive-api." + ns + ".svc"}); err != nil {
		t.Fatalf("the aggregator would refuse the archive API's certificate: %v", err)
	}
}

// TestChartRefusesBadValues: values.schema.json turns a misspelt or malformed value
// into an error at install, naming it, instead of a value silently left out or a
// controller that refuses to start.
func TestChartRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		path  string
		value any
		want  string
	}{
		{"replicas", 3, "additional properties 'replicas' not allowed"},
		{"workers.intnet", 3, "additional properties 'intnet' not allowed"},
		{"workers.intent", 0, "/workers/intent': minimum: got 0, want 1"},
		{"spentJobTTL", "5 minutes", "/spentJobTTL': '5 minutes' does not match pattern"},
		{"judge.timeout", 2, "/judge/timeout': got number, want string"},
		{"mcp.port", 70000, "/mcp/port': maximum: got 70,000, want 65,535"},
		{"images.pullPolicy", "Sometimes", "/images/pullPolicy'"},
		{"notifications.maxAttempts", 101, "/notifications/maxAttempts': maximum: got 101, want 100"},
		{"extraArgs", []any{"zap-log-level=debug"}, "/extraArgs/0': 'zap-log-level=debug' does not match pattern"},
	} {
		t.Run(c.path, func(t *testing.T) {
			values := map[string]any{}
			set(values, c.path, c.value)
			_, err := templateChart(values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
}

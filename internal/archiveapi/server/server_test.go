package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/archiveapi"
	"github.com/toolgate/toolgate/internal/archiveapi/apitest"
	apiserver "github.com/toolgate/toolgate/internal/archiveapi/server"
	"github.com/toolgate/toolgate/internal/leakcheck"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

var (
	env     *testenv.Env
	store   *archive.Archive
	server  *apiserver.Server
	configs = map[string]*rest.Config{}
)

const (
	viewerUser = "val"
	nobody     = "nora"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(func() int {
		pg, err := pgtest.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = pg.Close() }()
		if env, err = testenv.Start(testenv.WithAggregation()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = env.Stop() }()
		stop, err := setup(pg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		return m.Run()
	}))
}

// setup opens an archive in the server's postgres database (the test binary has
// one archive), serves it through the aggregator, and adds the users.
func setup(pg *pgtest.Server) (func(), error) {
	ctx := context.Background()
	var err error
	if store, err = archive.Open(ctx, pg.DSN("postgres")); err != nil {
		return nil, err
	}
	srv, stopServer, err := apitest.Serve(ctx, env, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	server = srv
	stop := func() { _ = stopServer(); store.Close() }
	for _, u := range []string{"admin", viewerUser, nobody} {
		user := envtest.User{Name: u}
		if u == "admin" {
			user.Groups = []string{"system:masters"}
		}
		authn, err := env.AddUser(user, env.Config)
		if err != nil {
			stop()
			return nil, err
		}
		configs[u] = authn.Config()
	}
	return stop, nil
}

// get reads path (with its query) through the kube-apiserver as user.
func get(ctx context.Context, user, path string) ([]byte, error) {
	c, err := archiveapi.NewRESTClient(configs[user])
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(path)
	if err != nil {
		return nil, err
	}
	req := c.Get().AbsPath(u.Path)
	for k, vs := range u.Query() {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	// Do's Error, not DoRaw's, decodes the API's Status into the error.
	res := req.Do(ctx)
	raw, _ := res.Raw()
	return raw, res.Error()
}

const base = "/apis/" + archiveapi.Group + "/" + archiveapi.Version

// callIn stores a call of task in ns.
func callIn(t *testing.T, ns, task, name string, i int) archive.Record {
	t.Helper()
	rec, _, err := store.Store(t.Context(), archive.Record{
		UID: ns + "-" + name, Kind: archive.KindCall, Namespace: ns, Task: task, TaskUID: ns + "-" + task, Name: name,
		RecordedAt: time.Now(), Body: json.RawMessage(fmt.Sprintf(`{"intent":{"name":%q,"n":%d}}`, name, i)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// bindViewer grants user config/rbac's viewer role in ns, and waits until the
// archive's API lets them read there (RBAC and the authorizer's refusal cache).
func bindViewer(t *testing.T, user, ns, probe string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "viewer_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatal(err)
	}
	role.Name = "toolgate-viewer"
	if err := env.Client.Create(t.Context(), role); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer-" + user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	}
	if err := env.Client.Create(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	var last error
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = get(ctx, user, probe)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the viewer role never let %s read %s: %v", user, probe, last)
	}
}

// TestReadsFollowRBAC: a user without RBAC in a namespace is refused its archived
// calls (403, saying what is missing); with the viewer role they read them, and
// nothing of another namespace through any path.
func TestReadsFollowRBAC(t *testing.T) {
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	a := callIn(t, nsA, "fix", "fix-0", 0)
	callIn(t, nsA, "fix", "fix-1", 1)
	callIn(t, nsA, "fix", "fix-2", 2)
	b := callIn(t, nsB, "fix", "secret-call", 0)
	pathA := base + "/namespaces/" + nsA + "/calls/" + a.Name

	_, err := get(t.Context(), nobody, pathA)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot get resource "calls" in API group "archive.toolgate.dev" in the namespace "`+nsA+`"`) {
		t.Fatalf("a user without RBAC reads %s: %v, want 403 naming what is missing", pathA, err)
	}
	bindViewer(t, viewerUser, nsA, pathA)
	raw, err := get(t.Context(), viewerUser, pathA)
	var got archiveapi.Record
	if err != nil || json.Unmarshal(raw, &got) != nil || got.Kind != "Call" || string(got.UID) != a.UID || got.Record.SHA256 != a.SHA256 {
		t.Fatalf("viewer reads %s: %s, %v", pathA, raw, err)
	}
	if _, err := get(t.Context(), nobody, pathA); !apierrors.IsForbidden(err) {
		t.Errorf("the viewer's binding let another user read: %v", err)
	}

	// Attacks on the gate: namespace B's call through A's path, B's task UID
	// through A's list and verify, B directly, and every namespace at once.
	if _, err := get(t.Context(), viewerUser, base+"/namespaces/"+nsA+"/calls/"+b.Name); !apierrors.IsNotFound(err) {
		t.Errorf("B's call by name through A's path: %v, want 404", err)
	}
	raw, err = get(t.Context(), viewerUser, base+"/namespaces/"+nsA+"/calls?taskUID="+b.TaskUID)
	if err != nil || strings.Contains(string(raw), b.Name) {
		t.Errorf("B's task listed through A's path: %s, %v", raw, err)
	}
	if _, err := get(t.Context(), viewerUser, base+"/namespaces/"+nsA+"/tasks/fix/verify?taskUID="+b.TaskUID); !apierrors.IsNotFound(err) {
		t.Errorf("B's chain verified through A's path: %v, want 404", err)
	}
	for _, trick := range []string{"/namespaces/" + nsA + "/calls/..%2f..%2f" + nsB + "%2fcalls%2f" + b.Name, "/namespaces/" + nsA + "/calls/../../" + nsB + "/calls/" + b.Name} {
		if raw, err := get(t.Context(), viewerUser, base+trick); err == nil || strings.Contains(string(raw), b.UID) {
			t.Errorf("%s read B's call through A's path: %s, %v", trick, raw, err)
		}
	}
	if _, err := get(t.Context(), viewerUser, base+"/namespaces/"+nsB+"/calls/"+b.Name); !apierrors.IsForbidden(err) {
		t.Errorf("B's call read by a viewer of A: %v, want 403", err)
	}
	if _, err := get(t.Context(), viewerUser, base+"/calls?taskUID="+b.TaskUID); !apierrors.IsForbidden(err) {
		t.Errorf("every namespace's calls listed by a viewer of A: %v, want 403", err)
	}
	if _, err := get(t.Context(), "admin", base+"/calls?taskUID="+b.TaskUID); !apierrors.IsBadRequest(err) {
		t.Errorf("every namespace's calls listed by an admin: %v, want 400 (read one namespace at a time)", err)
	}
	forgedHeaders(t, pathA)
	pages(t, nsA, a.TaskUID)
}

// forgedHeaders: a request that reaches the server directly, not through the
// front proxy, with the front proxy's headers, is anonymous, and refused.
func forgedHeaders(t *testing.T, path string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+server.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Remote-User", "admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker does not check who it talks to
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a direct request claiming to be admin got %d, want 403 (anonymous)", resp.StatusCode)
	}
}

// pages reads the task's calls two at a time, through continue tokens.
func pages(t *testing.T, ns, taskUID string) {
	t.Helper()
	var names []string
	token := ""
	for range 3 {
		raw, err := get(t.Context(), viewerUser, base+"/namespaces/"+ns+"/calls?limit=2&taskUID="+taskUID+"&continue="+token)
		var list archiveapi.CallList
		if err != nil || json.Unmarshal(raw, &list) != nil {
			t.Fatalf("listing: %s, %v", raw, err)
		}
		for _, r := range list.Items {
			names = append(names, r.Name)
		}
		if token = list.Continue; token == "" {
			break
		}
	}
	if fmt.Sprint(names) != "[fix-0 fix-1 fix-2]" {
		t.Errorf("pages of 2 read %v, want [fix-0 fix-1 fix-2]", names)
	}
}

// TestOddInput: what no reader should send is answered 400 with a message that
// says what is wrong, never with another record.
func TestOddInput(t *testing.T) {
	ns := env.Namespace(t)
	rec := callIn(t, ns, "fix", "fix-0", 0)
	calls := base + "/namespaces/" + ns + "/calls"
	for _, c := range []struct{ path, want string }{
		{calls + "?taskUID=" + rec.TaskUID + "&continue=bm90LWEtdG9rZW4", "continue token"},
		{calls + "?taskUID=" + rec.TaskUID + "&continue=%25%25%25", "continue token"},
		{calls + "?taskUID=" + rec.TaskUID + "&limit=0", "limit"},
		{calls + "?taskUID=" + rec.TaskUID + "&limit=1001", "limit"},
		{calls + "?taskUID=" + rec.TaskUID + "&limit=ten", "limit"},
		{calls, "taskUID"},
		{calls + "/Bad_Name", "name"},
		{calls + "/fix-0/verify/extra", "is not one the archive serves"},
	} {
		raw, err := get(t.Context(), "admin", c.path)
		var status apierrors.APIStatus
		switch {
		case !errors.As(err, &status):
			t.Errorf("%s: %s, %v; want a refusal", c.path, raw, err)
		case c.want == "" && status.Status().Code != http.StatusBadRequest && status.Status().Code != http.StatusNotFound:
			t.Errorf("%s: %v, want 400 or 404", c.path, err)
		case c.want != "" && (status.Status().Code != http.StatusBadRequest || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want 400 about %s", c.path, err, c.want)
		}
	}
}

// TestDiscovery: kubectl finds the API's resources through the API server, as
// the aggregator merged them (kubectl api-resources, kubectl get calls).
func TestDiscovery(t *testing.T) {
	kube, err := kubernetes.NewForConfig(configs[viewerUser])
	if err != nil {
		t.Fatal(err)
	}
	var resources *metav1.APIResourceList
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resources, err = kube.Discovery().ServerResourcesForGroupVersion(archiveapi.GroupVersion.String())
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("discovery of %s: %v", archiveapi.GroupVersion, err)
	}
	var names []string
	for _, r := range resources.APIResources {
		names = append(names, r.Name+":"+strings.Join(r.Verbs, ","))
	}
	if got := strings.Join(names, " "); got != "calls:get,list tasks:get tasks/verify:get" {
		t.Errorf("discovery lists %s", got)
	}
	groups, err := kube.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		found = found || g.Name == archiveapi.Group && g.PreferredVersion.Version == archiveapi.Version
	}
	if !found {
		t.Errorf("the API server's groups lack %s", archiveapi.GroupVersion)
	}
}

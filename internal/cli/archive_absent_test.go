package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// TestArchiveNotInstalled: a cluster without the archive's API answers discovery
// 404; the commands ask once, say so once when something they show is missing,
// and otherwise go on with the cluster's objects.
func TestArchiveNotInstalled(t *testing.T) {
	var asked atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer api.Close()
	var errOut bytes.Buffer
	c := &cluster{namespace: "team-a", archive: &archiveReader{cfg: &rest.Config{Host: api.URL}, namespace: "team-a", errOut: &errOut}}

	complete := &taskObjects{task: &v1.AgentTask{ObjectMeta: metav1.ObjectMeta{Name: "fix", UID: "u1"}}}
	c.mergeArchived(t.Context(), complete)
	if errOut.Len() != 0 {
		t.Errorf("nothing was missing, yet the command said: %s", errOut.String())
	}
	missing := &taskObjects{task: complete.task, intents: []v1.ToolIntent{{Status: v1.ToolIntentStatus{ExecutionName: "fix-t0-0"}}}}
	for range 3 {
		c.mergeArchived(t.Context(), missing)
	}
	if task, _, err := c.archive.task(t.Context(), "fix"); err != nil || task != nil {
		t.Errorf("reading a task without the API: %v, %v; want not found", task, err)
	}
	c.archive.noteAbsent()
	if got := strings.Count(errOut.String(), "is not installed in this cluster"); got != 1 {
		t.Errorf("the note was printed %d times, want once:\n%s", got, errOut.String())
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("discovery was asked %d times, want once per command", n)
	}
}

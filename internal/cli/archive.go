package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/archive/body"
	"github.com/toolgate/toolgate/internal/archiveapi"
	"github.com/toolgate/toolgate/internal/transcript"
)

// archiveReader reads the archive through its aggregated API
// (archive.toolgate.dev/v1alpha1) with the user's own kubeconfig: what the user may
// read of a namespace's archive is what RBAC lets them, and the plugin never
// holds the database's password.
type archiveReader struct {
	cfg       *rest.Config
	namespace string
	errOut    io.Writer
	client    *rest.RESTClient
	// checked and installed: discovery is asked once per command.
	checked, installed bool
	// noted: that the API is not installed is said once per command.
	noted bool
}

// available asks discovery, once, whether the API is served. A cluster without it
// works as before: only what is still in the cluster is read.
func (a *archiveReader) available(ctx context.Context) (bool, error) {
	if a.checked {
		return a.installed, nil
	}
	c, err := archiveapi.NewRESTClient(a.cfg)
	if err != nil {
		return false, err
	}
	res := c.Get().AbsPath("/apis", archiveapi.Group, archiveapi.Version).Do(ctx)
	switch err := res.Error(); {
	case apierrors.IsNotFound(err):
		a.checked = true
	case err != nil:
		return false, fmt.Errorf("asking the API server whether the archive is served (%s): %w", archiveapi.GroupVersion, apiError(err))
	default:
		a.checked, a.installed, a.client = true, true, c
	}
	return a.installed, nil
}

// noteAbsent says, once, that what is not in the cluster cannot be read from the
// archive, when a read came up short.
func (a *archiveReader) noteAbsent() {
	if a.checked && !a.installed && !a.noted {
		a.noted = true
		fmt.Fprintf(a.errOut, "note: the archive's API (%s) is not installed in this cluster: calls and tasks deleted from the cluster cannot be read (docs/archive.md)\n", archiveapi.GroupVersion)
	}
}

// get reads one object of the API into out; found is false on a 404 and when the
// API is not installed.
func (a *archiveReader) get(ctx context.Context, out any, params map[string]string, path ...string) (found bool, err error) {
	if ok, err := a.available(ctx); !ok || err != nil {
		return false, err
	}
	req := a.client.Get().AbsPath(append([]string{"/apis", archiveapi.Group, archiveapi.Version, "namespaces", a.namespace}, path...)...)
	for k, v := range params {
		req = req.Param(k, v)
	}
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading the archive: %w", apiError(err))
	}
	raw, err := res.Raw()
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(raw, out)
}

// task reads the newest archived task of the name.
func (a *archiveReader) task(ctx context.Context, name string) (*v1.AgentTask, *body.Task, error) {
	var rec archiveapi.Record
	found, err := a.get(ctx, &rec, nil, archiveapi.Tasks, name)
	if err != nil || !found {
		return nil, nil, err
	}
	var content body.Task
	if err := json.Unmarshal(asTheAPIServerWrites(rec.Body), &content); err != nil {
		return nil, nil, fmt.Errorf("the archived task %s: %w", name, err)
	}
	t := content.Task
	return &v1.AgentTask{TypeMeta: metav1.TypeMeta{Kind: "AgentTask", APIVersion: v1.GroupVersion.String()},
		ObjectMeta: objectMeta(rec.Namespace, t), Spec: t.Spec, Status: t.Status}, &content, nil
}

// call reads the newest archived call of the name.
func (a *archiveReader) call(ctx context.Context, name string) (*archivedCall, error) {
	var rec archiveapi.Record
	found, err := a.get(ctx, &rec, nil, archiveapi.Calls, name)
	if err != nil || !found {
		return nil, err
	}
	return decodeCall(rec)
}

// calls reads every archived call of the task, page by page.
func (a *archiveReader) calls(ctx context.Context, taskUID types.UID) ([]archivedCall, error) {
	var out []archivedCall
	params := map[string]string{"taskUID": string(taskUID)}
	for {
		var list archiveapi.CallList
		found, err := a.get(ctx, &list, params, archiveapi.Calls)
		if err != nil || !found {
			return out, err
		}
		for _, rec := range list.Items {
			c, err := decodeCall(rec)
			if err != nil {
				return nil, err
			}
			out = append(out, *c)
		}
		if list.Continue == "" {
			return out, nil
		}
		params["continue"] = list.Continue
	}
}

// archivedCall is a call's record as the objects the cluster held.
type archivedCall struct {
	intent    v1.ToolIntent
	approval  *v1.Approval
	execution *v1.Execution
}

func decodeCall(rec archiveapi.Record) (*archivedCall, error) {
	var content body.Call
	if err := json.Unmarshal(asTheAPIServerWrites(rec.Body), &content); err != nil {
		return nil, fmt.Errorf("the archived call %s: %w", rec.Name, err)
	}
	ns, in := rec.Namespace, content.Intent
	c := &archivedCall{intent: v1.ToolIntent{TypeMeta: metav1.TypeMeta{Kind: "ToolIntent", APIVersion: v1.GroupVersion.String()},
		ObjectMeta: objectMeta(ns, in), Spec: in.Spec, Status: in.Status}}
	if ap := content.Approval; ap != nil {
		c.approval = &v1.Approval{TypeMeta: metav1.TypeMeta{Kind: "Approval", APIVersion: v1.GroupVersion.String()},
			ObjectMeta: objectMeta(ns, *ap), Spec: ap.Spec, Status: ap.Status}
	}
	if ex := content.Execution; ex != nil {
		c.execution = &v1.Execution{TypeMeta: metav1.TypeMeta{Kind: "Execution", APIVersion: v1.GroupVersion.String()},
			ObjectMeta: objectMeta(ns, *ex), Spec: ex.Spec, Status: ex.Status}
	}
	return c, nil
}

// objectMeta is the metadata of a recorded object as the cluster held it.
func objectMeta[S, T any](ns string, o body.Object[S, T]) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: o.Name, UID: types.UID(o.UID), Labels: o.Labels, OwnerReferences: o.OwnerReferences, CreationTimestamp: o.CreationTimestamp}
}

// mergeArchived adds to objs the archived calls of its task that the cluster no
// longer holds: an object is the cluster's while it exists there (the same UID is
// never added twice), and the archive's once it was deleted. An archive that
// cannot be read (not installed, or not readable by this user) leaves the
// cluster's objects as they are, and says why.
func (c *cluster) mergeArchived(ctx context.Context, objs *taskObjects) {
	archived, err := c.archive.calls(ctx, objs.task.UID)
	if err != nil {
		fmt.Fprintf(c.archive.errOut, "note: %v; only what is in the cluster is shown\n", err)
		return
	}
	seen := map[types.UID]bool{}
	for _, in := range objs.intents {
		seen[in.UID] = true
	}
	for _, a := range objs.approvals {
		seen[a.UID] = true
	}
	for _, e := range objs.executions {
		seen[e.UID] = true
	}
	for _, call := range archived {
		if !seen[call.intent.UID] {
			objs.intents = append(objs.intents, call.intent)
		}
		if a := call.approval; a != nil && !seen[a.UID] {
			objs.approvals = append(objs.approvals, *a)
		}
		if e := call.execution; e != nil && !seen[e.UID] {
			objs.executions = append(objs.executions, *e)
		}
	}
	if !c.archive.installed && objs.missesObjects() {
		c.archive.noteAbsent()
	}
}

// missesObjects says whether an intent names an Approval or Execution the
// objects lack: deleted, so that only the archive could show it.
func (objs *taskObjects) missesObjects() bool {
	names := map[string]bool{}
	for _, a := range objs.approvals {
		names["a/"+a.Name] = true
	}
	for _, e := range objs.executions {
		names["e/"+e.Name] = true
	}
	for _, in := range objs.intents {
		if ref := in.Status.ApprovalName; ref != "" && !names["a/"+ref] {
			return true
		}
		if ref := in.Status.ExecutionName; ref != "" && !names["e/"+ref] {
			return true
		}
	}
	return false
}

// intentOrArchived reads the intent of the name from the cluster, else from the
// archive; the archived call is returned too, for its Execution.
func (c *cluster) intentOrArchived(ctx context.Context, name string) (*v1.ToolIntent, *archivedCall, error) {
	intent := &v1.ToolIntent{}
	err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, intent)
	if err == nil {
		return intent, nil, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, nil, apiError(err)
	}
	call, err := c.archive.call(ctx, name)
	switch {
	case err != nil:
		return nil, nil, err
	case call == nil:
		c.archive.noteAbsent()
		return nil, nil, fmt.Errorf("ToolIntent %q not found in namespace %q, in the cluster or its archive", name, c.namespace)
	}
	return &call.intent, call, nil
}

// executionOrArchived reads the intent's Execution of the name from the cluster,
// else from the intent's archived call; nil when neither holds it.
func (c *cluster) executionOrArchived(ctx context.Context, intent *v1.ToolIntent, call *archivedCall, name string) (*v1.Execution, error) {
	exec := &v1.Execution{}
	err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, exec)
	if err == nil {
		return exec, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, apiError(err)
	}
	if call == nil {
		if call, err = c.archive.call(ctx, intent.Name); err != nil {
			return nil, err
		}
	}
	if call == nil || call.execution == nil || call.execution.Name != name || call.intent.UID != intent.UID {
		c.archive.noteAbsent()
		return nil, nil
	}
	return call.execution, nil
}

// turnRecords are the task's turn records and completion checks: the cluster's
// ConfigMaps, or, for a task read from the archive (its ConfigMaps went with it),
// its record's.
func turnRecords(ctx context.Context, c *cluster, objs *taskObjects) ([]agent.TurnRecord, map[int32]v1.CompletionCheck, string, error) {
	if a := objs.archivedTask; a != nil {
		checks := map[int32]v1.CompletionCheck{}
		for _, check := range a.CompletionChecks {
			checks[check.Turn] = check
		}
		return a.Turns, checks, "", nil
	}
	return transcript.Read(ctx, c.client, objs.task)
}

// asTheAPIServerWrites writes a record's body with its object keys in the order
// the API server writes a custom resource's (sorted, as encoding/json writes a
// map), numbers as they were: PostgreSQL's jsonb keeps its own key order, and the
// raw JSON of an intent's input is printed as it is, so without this an archived
// call's input would read differently from the same call's in the cluster.
func asTheAPIServerWrites(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	out, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return out
}

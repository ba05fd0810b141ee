package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/archiveapi"
)

// Reader is what the API reads from the archive (*archive.Archive).
type Reader interface {
	Named(ctx context.Context, kind archive.Kind, namespace, name string) (archive.Record, error)
	Calls(ctx context.Context, namespace, taskUID string, after int64, limit int) (archive.Page, error)
	ChainOf(ctx context.Context, namespace, task, taskUID string) (bool, error)
	VerifyChain(ctx context.Context, taskUID string) (archive.Verification, error)
}

// handler serves the API's reads, behind authentication and authorization: what
// it serves is what the RequestInfo the authorizer decided on names, and nothing
// else (the path must be exactly that RequestInfo's, see canonicalPath).
type handler struct {
	archive Reader
}

var discoveryGroups, discoveryGroup, discoveryResources = archiveapi.Discovery()

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	info, ok := request.RequestInfoFrom(r.Context())
	if !ok {
		writeStatus(w, apierrors.NewInternalError(errors.New("no request info")))
		return
	}
	if !info.IsResourceRequest {
		h.discovery(w, r)
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: archiveapi.Group, Resource: info.Resource}, info.Verb))
		return
	}
	if info.APIGroup != archiveapi.Group || info.APIVersion != archiveapi.Version {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Name))
		return
	}
	if err := checkRequest(r, info); err != nil {
		writeStatus(w, err)
		return
	}
	ctx := r.Context()
	switch {
	case info.Resource == archiveapi.Calls && info.Name == "" && info.Verb == "list":
		h.listCalls(ctx, w, r, info.Namespace)
	case info.Resource == archiveapi.Calls && info.Name != "" && info.Subresource == "":
		h.get(ctx, w, archive.KindCall, info.Namespace, info.Name)
	case info.Resource == archiveapi.Tasks && info.Name != "" && info.Subresource == "":
		h.get(ctx, w, archive.KindTask, info.Namespace, info.Name)
	case info.Resource == archiveapi.Tasks && info.Name != "" && info.Subresource == archiveapi.Verify:
		h.verify(ctx, w, r, info.Namespace, info.Name)
	case info.Resource == archiveapi.Tasks && info.Name == "":
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: archiveapi.Group, Resource: info.Resource}, info.Verb))
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: archiveapi.Group, Resource: resourcePath(info)}, info.Name))
	}
}

// checkRequest refuses what the API does not serve before anything is read: a
// path that is not exactly the one its RequestInfo names (extra segments, dot
// segments, an escaped slash), a read across namespaces, and names that no
// Kubernetes object can have.
func checkRequest(r *http.Request, info *request.RequestInfo) *apierrors.StatusError {
	if info.Namespace == "" {
		return apierrors.NewBadRequest("the archive is read one namespace at a time: /apis/" + archiveapi.GroupVersion.String() + "/namespaces/NAMESPACE/" + info.Resource)
	}
	if r.URL.RawPath != "" || r.URL.Path != canonicalPath(info) {
		return apierrors.NewBadRequest(fmt.Sprintf("the path %q is not one the archive serves: /apis/%s/namespaces/NAMESPACE/{calls,tasks}[/NAME[/verify]]", r.URL.EscapedPath(), archiveapi.GroupVersion))
	}
	if errs := validation.IsDNS1123Label(info.Namespace); len(errs) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("namespace %q: %s", info.Namespace, strings.Join(errs, "; ")))
	}
	if info.Name != "" {
		if errs := validation.IsDNS1123Subdomain(info.Name); len(errs) > 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("name %q: %s", info.Name, strings.Join(errs, "; ")))
		}
	}
	return nil
}

// canonicalPath is the path a RequestInfo stands for. The RequestInfo parser
// ignores segments after a subresource; a request must not carry any.
func canonicalPath(info *request.RequestInfo) string {
	p := "/apis/" + info.APIGroup + "/" + info.APIVersion + "/namespaces/" + info.Namespace + "/" + info.Resource
	if info.Name != "" {
		p += "/" + info.Name
	}
	if info.Subresource != "" {
		p += "/" + info.Subresource
	}
	return p
}

func resourcePath(info *request.RequestInfo) string {
	if info.Subresource != "" {
		return info.Resource + "/" + info.Subresource
	}
	return info.Resource
}

func (h handler) discovery(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method))
		return
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/apis":
		writeJSON(w, http.StatusOK, discoveryGroups)
	case "/apis/" + archiveapi.Group:
		writeJSON(w, http.StatusOK, discoveryGroup)
	case "/apis/" + archiveapi.GroupVersion.String():
		writeJSON(w, http.StatusOK, discoveryResources)
	case "/healthz", "/livez", "/readyz":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
	}
}

func (h handler) get(ctx context.Context, w http.ResponseWriter, kind archive.Kind, namespace, name string) {
	rec, err := h.archive.Named(ctx, kind, namespace, name)
	if err != nil {
		writeStatus(w, readError(err, kind, name))
		return
	}
	writeJSON(w, http.StatusOK, wireRecord(rec))
}

// continueToken is an opaque cursor: the seq of the last record of a page.
func continueToken(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("seq:" + strconv.FormatInt(seq, 10)))
}

func parseContinue(token string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	n, found := strings.CutPrefix(string(raw), "seq:")
	seq, convErr := strconv.ParseInt(n, 10, 64)
	if err != nil || !found || convErr != nil || seq <= 0 {
		return 0, errors.New("the continue token is not one this API gave: start again without it")
	}
	return seq, nil
}

// listParams reads taskUID, limit and continue of a list of calls.
func listParams(r *http.Request) (taskUID string, after int64, limit int, err error) {
	q := r.URL.Query()
	taskUID, limit = q.Get("taskUID"), archiveapi.DefaultLimit
	if taskUID == "" {
		return "", 0, 0, fmt.Errorf("calls are listed by task: taskUID=UID of the AgentTask is required")
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > archiveapi.MaxLimit {
			return "", 0, 0, fmt.Errorf("limit %q: a number from 1 to %d", s, archiveapi.MaxLimit)
		}
	}
	if s := q.Get("continue"); s != "" {
		if after, err = parseContinue(s); err != nil {
			return "", 0, 0, err
		}
	}
	return taskUID, after, limit, nil
}

func (h handler) listCalls(ctx context.Context, w http.ResponseWriter, r *http.Request, namespace string) {
	taskUID, after, limit, err := listParams(r)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	page, err := h.archive.Calls(ctx, namespace, taskUID, after, limit)
	if err != nil {
		writeStatus(w, readError(err, archive.KindCall, ""))
		return
	}
	list := archiveapi.CallList{TypeMeta: metav1.TypeMeta{Kind: "CallList", APIVersion: archiveapi.GroupVersion.String()}, Items: []archiveapi.Record{}}
	for _, rec := range page.Records {
		list.Items = append(list.Items, wireRecord(rec))
	}
	if page.Next != 0 {
		list.Continue = continueToken(page.Next)
	}
	writeJSON(w, http.StatusOK, list)
}

// verify walks the chain of the task: the newest task record of the name, or the
// chain taskUID= names (a task whose calls are archived but which has not ended)
// when it is this namespace's task of that name.
func (h handler) verify(ctx context.Context, w http.ResponseWriter, r *http.Request, namespace, name string) {
	taskUID := r.URL.Query().Get("taskUID")
	if taskUID == "" {
		rec, err := h.archive.Named(ctx, archive.KindTask, namespace, name)
		if err != nil {
			writeStatus(w, readError(err, archive.KindTask, name))
			return
		}
		taskUID = rec.UID
	} else if ok, err := h.archive.ChainOf(ctx, namespace, name, taskUID); err != nil || !ok {
		if err == nil {
			err = archive.ErrNotFound
		}
		writeStatus(w, readError(err, archive.KindTask, name))
		return
	}
	v, err := h.archive.VerifyChain(ctx, taskUID)
	if err != nil {
		writeStatus(w, readError(err, archive.KindTask, name))
		return
	}
	out := archiveapi.TaskVerification{
		TypeMeta:   metav1.TypeMeta{Kind: "TaskVerification", APIVersion: archiveapi.GroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		TaskUID:    taskUID, Records: v.Checked, LastSHA256: v.Last, Intact: v.Break == nil,
	}
	if b := v.Break; b != nil {
		out.Break = &archiveapi.ChainBreak{Seq: b.Seq, Name: b.Name, Problem: b.Problem}
	}
	writeJSON(w, http.StatusOK, out)
}

func wireRecord(rec archive.Record) archiveapi.Record {
	return archiveapi.Record{
		TypeMeta: metav1.TypeMeta{Kind: string(rec.Kind), APIVersion: archiveapi.GroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: rec.Name, Namespace: rec.Namespace, UID: types.UID(rec.UID),
			CreationTimestamp: metav1.NewTime(rec.RecordedAt)},
		Record: archiveapi.RecordInfo{Seq: rec.Seq, Task: rec.Task, TaskUID: rec.TaskUID, RecordedAt: metav1.NewTime(rec.RecordedAt),
			SHA256: rec.SHA256, PrevSHA256: rec.PrevSHA256},
		Body: rec.Body,
	}
}

// readError is a read's error as a Status: not found is a 404 naming what; any
// other error is logged and answered 503, without the database's words (they can
// name hosts and users).
func readError(err error, kind archive.Kind, name string) *apierrors.StatusError {
	resource := archiveapi.Calls
	if kind == archive.KindTask {
		resource = archiveapi.Tasks
	}
	if errors.Is(err, archive.ErrNotFound) {
		return apierrors.NewNotFound(schema.GroupResource{Group: archiveapi.Group, Resource: resource}, name)
	}
	klog.ErrorS(err, "reading the archive", "resource", resource, "name", name)
	return apierrors.NewServiceUnavailable("the archive could not be read; the controller's log says why")
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	writeJSON(w, int(status.Code), status)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

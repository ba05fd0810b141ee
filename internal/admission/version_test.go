package admission

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// A second version of the Approval API, as a later release might serve it: v1alpha2
// keeps the votes under other names (spec.ballots, each with voter, decision and
// comment), and a conversion webhook maps them to v1alpha1's spec.votes (user,
// decision, comment). Policies that matched every version and read v1alpha1's names
// behind has() would see no vote in a v1alpha2 request (votesChanged false) and let
// anyone who may patch an Approval vote. Matched as v1alpha1 with matchPolicy
// Equivalent, the request reaches the policy converted to v1alpha1.

const servedSecondVersion = "v1alpha2"

// TestDecisionThroughAnotherVersionIsRefused: pat may patch Approvals but does not
// hold the approve verb; a decision sent through v1alpha2 is refused as it is
// through v1alpha1, and the stored Approval stays Pending.
func TestDecisionThroughAnotherVersionIsRefused(t *testing.T) {
	serveApprovalsAsSecondVersion(t)
	ns := setupNamespace(t)
	a := createApproval(t, ns, agentUser, nil)

	approvals := schema.GroupVersionResource{Group: toolgatev1alpha1.GroupVersion.Group, Version: servedSecondVersion, Resource: "approvals"}
	dyn, err := dynamic.NewForConfig(configs[patcherUser])
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"ballots":[{"decision":"Approved","voter":%q,"comment":"through v1alpha2"}]}}`, patcherUser))
	_, err = dyn.Resource(approvals).Namespace(ns).Patch(t.Context(), a.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	wantRefused(t, err, patcherUser+" may not vote on approvals in namespace "+ns+": that needs the approve verb")
	if got := getApproval(t, a); len(got.Spec.Votes) != 0 {
		t.Fatalf("the vote through %s was stored: %+v", servedSecondVersion, got.Spec.Votes)
	}

	// An approver still decides through the other version: the policies did not
	// simply stop matching it.
	patch = []byte(fmt.Sprintf(`{"spec":{"ballots":[{"decision":"Approved","voter":%q}]}}`, alice))
	aliceDyn, err := dynamic.NewForConfig(configs[alice])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceDyn.Resource(approvals).Namespace(ns).Patch(t.Context(), a.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("alice's decision through %s was refused: %v", servedSecondVersion, err)
	}
	if got := getApproval(t, a); len(got.Spec.Votes) != 1 || got.Spec.Votes[0].User != alice || got.Spec.Votes[0].Decision != toolgatev1alpha1.DecisionApproved {
		t.Fatalf("alice's vote through %s: stored %+v", servedSecondVersion, got.Spec.Votes)
	}
}

// serveApprovalsAsSecondVersion adds v1alpha2 (served, not stored) to the Approval
// CRD, with a conversion webhook, until the test ends.
func serveApprovalsAsSecondVersion(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	srv := httptest.NewTLSServer(http.HandlerFunc(convertApprovals))
	t.Cleanup(srv.Close)
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	key := client.ObjectKey{Name: "approvals." + toolgatev1alpha1.GroupVersion.Group}
	if err := crds.Get(ctx, key, crd); err != nil {
		t.Fatal(err)
	}
	original := crd.DeepCopy()
	second := *crd.Spec.Versions[0].DeepCopy()
	second.Name, second.Storage, second.AdditionalPrinterColumns = servedSecondVersion, false, nil
	spec := second.Schema.OpenAPIV3Schema.Properties["spec"]
	delete(spec.Properties, "votes")
	spec.Properties["ballots"] = apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"decision": {Type: "string"}, "voter": {Type: "string"}, "comment": {Type: "string"}},
	}}}
	second.Schema.OpenAPIV3Schema.Properties["spec"] = spec
	crd.Spec.Versions = append(crd.Spec.Versions, second)
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ConversionReviewVersions: []string{"v1"},
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptrTo(srv.URL + "/convert"), CABundle: caBundle},
		},
	}
	if err := crds.Update(ctx, crd); err != nil {
		t.Fatalf("adding %s to the Approval CRD: %v", servedSecondVersion, err)
	}
	t.Cleanup(func() {
		current := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(context.Background(), key, current); err != nil {
			t.Errorf("restoring the Approval CRD: %v", err)
			return
		}
		current.Spec.Versions, current.Spec.Conversion = original.Spec.Versions, original.Spec.Conversion
		if err := crds.Update(context.Background(), current); err != nil {
			t.Errorf("restoring the Approval CRD: %v", err)
		}
	})

	// Served once a list through it answers (discovery and the conversion webhook).
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: toolgatev1alpha1.GroupVersion.Group, Version: servedSecondVersion, Resource: "approvals"}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("%s of approvals is never served", servedSecondVersion)
	}
}

func ptrTo[T any](v T) *T { return &v }

// convertApprovals is the conversion webhook between v1alpha1 and v1alpha2.
func convertApprovals(w http.ResponseWriter, r *http.Request) {
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not a ConversionReview", http.StatusBadRequest)
		return
	}
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	to := review.Request.DesiredAPIVersion
	for _, raw := range review.Request.Objects {
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			break
		}
		spec, _ := obj["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
		}
		// The votes move between spec.votes[].user and spec.ballots[].voter; decision
		// and comment keep their names.
		from, to2, userFrom, userTo := "ballots", "votes", "voter", "user"
		if strings.HasSuffix(to, "/"+servedSecondVersion) {
			from, to2, userFrom, userTo = "votes", "ballots", "user", "voter"
		}
		if list, ok := spec[from].([]any); ok {
			for _, item := range list {
				if v, ok := item.(map[string]any); ok {
					v[userTo] = v[userFrom]
					delete(v, userFrom)
				}
			}
			spec[to2] = list
		}
		delete(spec, from)
		obj["spec"], obj["apiVersion"] = spec, to
		out, err := json.Marshal(obj)
		if err != nil {
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			break
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

package admission

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
)

// access is one question to the API server's authorizer.
type access struct {
	verb, resource string
	allowed        bool
}

// TestUserRoles binds each role of config/rbac to a fresh user and asks the API
// server's RBAC authorizer what that user may do.
func TestUserRoles(t *testing.T) {
	cases := []struct {
		role string
		// clusterWide binds with a ClusterRoleBinding and asks about all namespaces.
		clusterWide bool
		want        []access
	}{
		{role: "agent", want: []access{
			{"create", "toolintents", true},
			{"list", "toolintents", true},
			{"watch", "agenttasks", true},
			// patch, to cancel its own call (spec.cancel); admission holds it to that.
			{"patch", "toolintents", true},
			{"update", "toolintents", false},
			{"delete", "toolintents", false},
			{"get", "approvals", false},
			{"patch", "approvals", false},
			{"approve", "approvals", false},
			{"create", "executions", false},
			{"update", "toolintents/status", false},
			{"get", "notificationchannels", false},
		}},
		{role: "approver", want: []access{
			{"approve", "approvals", true},
			{"patch", "approvals", true},
			{"update", "approvals", true},
			{"list", "approvals", true},
			{"get", "toolintents", true},
			{"get", "agenttasks", true},
			{"list", "executions", true},
			{"create", "executions", false},
			{"create", "approvals", false},
			{"delete", "approvals", false},
			{"update", "approvals/status", false},
			{"create", "toolintents", false},
		}},
		{role: "editor", want: []access{
			{"create", "agenttasks", true},
			{"delete", "agenttasks", true},
			{"update", "toolpolicies", true},
			{"list", "executions", true},
			{"get", "approvals", true},
			{"approve", "approvals", false},
			{"patch", "approvals", false},
			{"create", "toolintents", false},
			{"create", "executions", false},
			{"update", "agenttasks/status", false},
			{"create", "notificationchannels", true},
			{"update", "notificationchannels", true},
			{"update", "notificationchannels/status", false},
		}},
		{role: "viewer", want: []access{
			{"get", "agenttasks", true},
			{"list", "toolintents", true},
			{"watch", "approvals", true},
			{"get", "executions", true},
			{"list", "toolpolicies", true},
			{"create", "agenttasks", false},
			{"patch", "approvals", false},
			{"approve", "approvals", false},
			{"list", "notificationchannels", true},
			{"create", "notificationchannels", false},
		}},
		{role: "admin", clusterWide: true, want: []access{
			{"create", "clustertoolpolicies", true},
			{"update", "clustertoolpolicies", true},
			{"delete", "clustertoolpolicies", true},
			{"approve", "approvals", false},
			{"create", "toolintents", false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.role, func(t *testing.T) {
			user := "role-test-" + tc.role
			ns := ""
			if tc.clusterWide {
				binding := &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: user},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleNames[tc.role]},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
				}
				mustCreate(t, binding)
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), binding) })
			} else {
				ns = env.Namespace(t)
				if err := grant(t.Context(), ns, roleNames[tc.role], rbacv1.Subject{Kind: rbacv1.UserKind, Name: user}); err != nil {
					t.Fatal(err)
				}
			}
			first := tc.want[0]
			waitAllowed(t, ns, user, nil, first.verb, first.resource)
			for _, w := range tc.want {
				if got := allowed(t, ns, user, nil, w.verb, w.resource); got != w.allowed {
					t.Errorf("%s may %s %s: %v; want %v", roleNames[tc.role], w.verb, w.resource, got, w.allowed)
				}
			}
		})
	}
}

// TestApprovalRolesAreNotAggregated keeps approve and the agent's create out of the
// built-in roles: edit and admin are granted widely, and aggregation would hand every
// namespace editor the power to decide approvals or feed intents into tasks. The
// aggregation controller does not run in envtest, so this reads the labels.
func TestApprovalRolesAreNotAggregated(t *testing.T) {
	roles, err := userRoles("")
	if err != nil {
		t.Fatal(err)
	}
	for _, bare := range []string{"agent", "approver", "admin"} {
		for label := range roles[bare].Labels {
			if strings.HasPrefix(label, "rbac.authorization.k8s.io/aggregate-to-") {
				t.Errorf("config/rbac/%s carries %s; it must be granted on purpose, not aggregated", userRoleFiles[bare], label)
			}
		}
	}
	if roles["viewer"].Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
		t.Errorf("config/rbac/viewer_role.yaml is not aggregated into view")
	}
	if roles["editor"].Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" {
		t.Errorf("config/rbac/editor_role.yaml is not aggregated into edit")
	}
}

// TestControllerRole checks the controller's ClusterRole, which controller-gen
// generates into config/rbac/role.yaml from the reconcilers' markers: the controller
// must create Approvals and Executions and write every status, and must never hold
// approve.
func TestControllerRole(t *testing.T) {
	role := &rbacv1.ClusterRole{}
	if err := readYAML(filepath.Join("config", "rbac", "role.yaml"), role); err != nil {
		t.Fatalf("%v (role.yaml is generated: run make manifests)", err)
	}
	var binding rbacv1.ClusterRoleBinding
	if err := readYAML(filepath.Join("config", "rbac", "role_binding.yaml"), &binding); err != nil {
		t.Fatal(err)
	}
	if binding.RoleRef.Name != role.Name {
		t.Fatalf("config/rbac/role_binding.yaml binds %q, but role.yaml is named %q", binding.RoleRef.Name, role.Name)
	}
	role.Name = "controller-role-test"
	mustCreate(t, role)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), role) })
	user := "controller-role-test"
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	}
	mustCreate(t, crb)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })

	want := []access{
		{"create", "approvals", true},
		{"create", "executions", true},
		{"update", "toolintents/status", true},
		{"update", "approvals/status", true},
		{"update", "executions/status", true},
		{"update", "agenttasks/status", true},
		{"approve", "approvals", false},
	}
	// Wait for RBAC to see the binding with a question one of the role's toolgate
	// rules answers yes, so that a missing permission below fails with its own name.
	i := slices.IndexFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, toolgatev1alpha1.GroupVersion.Group)
	})
	if i < 0 {
		t.Fatalf("config/rbac/role.yaml grants nothing on toolgate.dev (run make manifests)")
	}
	waitAllowed(t, "", user, nil, role.Rules[i].Verbs[0], role.Rules[i].Resources[0])
	for _, w := range want {
		if got := allowed(t, "", user, nil, w.verb, w.resource); got != w.allowed {
			t.Errorf("the controller may %s %s: %v; want %v (the role is generated from the reconcilers' +kubebuilder:rbac markers: run make manifests)", w.verb, w.resource, got, w.allowed)
		}
	}
}

// TestControllerIdentityMatchesDeployment checks that the one parameter object of
// config/admission names the controller's service account as config/default deploys
// it (namespace, name prefix, config/rbac's service account), and that every policy
// reads the controller from it and every binding names it, failing closed without
// it. A mismatch would refuse every status write of the deployed controller, or let
// an impostor through.
func TestControllerIdentityMatchesDeployment(t *testing.T) {
	objs, err := testenv.AdmissionObjects()
	if err != nil {
		t.Fatal(err)
	}
	var params *corev1.ConfigMap
	var policies int
	for _, obj := range objs {
		switch obj := obj.(type) {
		case *corev1.ConfigMap:
			if params != nil {
				t.Errorf("config/admission holds two ConfigMaps: %s and %s", params.Name, obj.Name)
			}
			params = obj
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			policies++
			if k := obj.Spec.ParamKind; k == nil || k.APIVersion != "v1" || k.Kind != "ConfigMap" {
				t.Errorf("policy %s has paramKind %+v; want the ConfigMap of admission-params.yaml", obj.Name, k)
			}
			var found bool
			for _, v := range obj.Spec.Variables {
				if v.Name == "controllerServiceAccount" {
					found = true
					if v.Expression != "params.data.controllerServiceAccount" {
						t.Errorf("policy %s names the controller %s; it must read params.data.controllerServiceAccount", obj.Name, v.Expression)
					}
				}
			}
			if !found {
				t.Errorf("policy %s has no controllerServiceAccount variable", obj.Name)
			}
		}
	}
	if policies == 0 || params == nil {
		t.Fatalf("config/admission holds %d ValidatingAdmissionPolicies and parameter object %v", policies, params)
	}
	if got := params.Data["controllerServiceAccount"]; got != controllerUser {
		t.Errorf("%s names the controller %q; config/default deploys it as %q", params.Name, got, controllerUser)
	}
	for _, obj := range objs {
		b, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		if !ok {
			continue
		}
		ref := b.Spec.ParamRef
		if ref == nil || ref.Name != params.Name || ref.Namespace != params.Namespace || ref.ParameterNotFoundAction == nil ||
			*ref.ParameterNotFoundAction != admissionregistrationv1.DenyAction {
			t.Errorf("binding %s has paramRef %+v; want %s/%s with parameterNotFoundAction Deny", b.Name, ref, params.Namespace, params.Name)
		}
	}
}

// TestPoliciesMatchTheVersionTheyRead: a policy reads field names of one version of
// the toolgate API, so it matches that version, with matchPolicy Equivalent so that
// a request through any other served version reaches it converted to it
// (TestDecisionThroughAnotherVersionIsRefused shows the attack).
func TestPoliciesMatchTheVersionTheyRead(t *testing.T) {
	objs, err := testenv.AdmissionObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		policy, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if !ok {
			continue
		}
		mc := policy.Spec.MatchConstraints
		if mc == nil || mc.MatchPolicy == nil || *mc.MatchPolicy != admissionregistrationv1.Equivalent {
			t.Errorf("policy %s: matchPolicy is not Equivalent", policy.Name)
			continue
		}
		for _, rule := range mc.ResourceRules {
			if !slices.Contains(rule.APIGroups, toolgatev1alpha1.GroupVersion.Group) {
				continue
			}
			if len(rule.APIGroups) != 1 || !slices.Equal(rule.APIVersions, []string{toolgatev1alpha1.GroupVersion.Version}) {
				t.Errorf("policy %s matches groups %v versions %v; want only %s", policy.Name, rule.APIGroups, rule.APIVersions, toolgatev1alpha1.GroupVersion)
			}
		}
	}
}

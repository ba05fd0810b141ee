package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// The confused deputy on credentials: the controller may read Secrets and sends the
// one a task names to the task's baseURL. A task may use only a Secret labelled as a
// model credential, and only an endpoint on the controller's allow-list.

// waiting waits until the task waits (Ready=False, Pending) with reason and returns
// the condition's message.
func (p *loopEnv) waiting(name, reason string) string {
	p.t.Helper()
	var msg string
	p.eventually(fmt.Sprintf("task %s waits with %s", name, reason), func() (bool, string) {
		task := p.getTask(name)
		c := meta.FindStatusCondition(task.Status.Conditions, v1.ConditionReady)
		if c == nil {
			return false, fmt.Sprintf("%+v", task.Status)
		}
		msg = c.Message
		return c.Status == metav1.ConditionFalse && c.Reason == reason && task.Status.Phase == v1.TaskPending, fmt.Sprintf("%+v", c)
	})
	return msg
}

// labelSecret sets or removes the model credentials label of a Secret.
func (p *loopEnv) labelSecret(name string, labelled bool) {
	p.t.Helper()
	value := `"` + v1.ModelCredentialsValue + `"`
	if !labelled {
		value = "null"
	}
	patch := []byte(`{"metadata":{"labels":{"` + v1.LabelModelCredentials + `":` + value + `}}}`)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: name}}
	if err := env.Client.Patch(context.Background(), secret, client.RawPatch(types.MergePatchType, patch)); err != nil {
		p.t.Fatal(err)
	}
}

// TestCredentialsOnlyFromLabelledSecrets: (a) a task naming a Secret that is not
// labelled as a model credential never sends it (the endpoint gets no request) and
// says which Secret, which label and why; the controller's cache does not even hold
// the Secret. (b) Labelling the Secret lets the task go on, with that key.
func TestCredentialsOnlyFromLabelledSecrets(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	server := fixtures.NewChatServer(t, answer("done", 10))
	// Not a model key at all: a Secret of the namespace the task's author wants sent.
	other := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: "deploy-token-key"},
		Data:       map[string][]byte{"apiKey": []byte(testAPIKey)},
	}
	if err := env.Client.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	p.modelTask("deploy-token", v1.ModeReadOnly, server)

	msg := p.waiting("deploy-token", ReasonCredentialsNotAllowed)
	mustContain(t, "refusal", msg, `Secret "deploy-token-key"`, v1.LabelModelCredentials+"=true",
		"kubectl label secret -n "+p.ns+" deploy-token-key", "any Secret of the namespace")
	mustNotContain(t, "refusal", msg, testAPIKey)
	// The refusal was written by the reconcile that would have sent the request.
	p.absent(p.reconciledNow("agenttask", p.getTask("deploy-token")), "a model request with an unlabelled Secret", func() bool { return len(server.Received()) > 0 })

	// The controller's own reads do not see the Secret: the cache holds only labelled ones.
	err := p.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(other), &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the controller's cache holds an unlabelled Secret (err %v)", err)
	}

	p.labelSecret("deploy-token-key", true)
	p.finished("deploy-token", v1.ConditionSucceeded, v1.ReasonCompleted)
	if got := server.Received(); len(got) != 1 || got[0].Authorization != "Bearer "+testAPIKey {
		t.Fatalf("requests after labelling: %+v", got)
	}
}

// TestCredentialsLabelRemovedStopsTheNextTurn: (e) a Secret labelled when turn 0 was
// asked and unlabelled before turn 1 is not used for turn 1; labelled again, it is.
func TestCredentialsLabelRemovedStopsTheNextTurn(t *testing.T) {
	p := newLoopEnv(t)
	p.start()
	server := fixtures.NewChatServer(t,
		toolCalls("Look first.", 10, chatCall{"c0", "bash", `{"command":"ls"}`}),
		answer("done", 10),
	)
	p.modelTask("revoked", v1.ModeReadOnly, server)
	if got := p.waitRequests(server, 1); got[0].Authorization != "Bearer "+testAPIKey {
		t.Fatalf("turn 0 was sent %q", got[0].Authorization)
	}
	p.labelSecret("revoked-key", false)
	p.runJob("revoked-t0-0", protocol.Result{ExitCode: 0}, "a.go\n")
	msg := p.waiting("revoked", ReasonCredentialsNotAllowed)
	mustContain(t, "refusal", msg, `Secret "revoked-key"`, v1.LabelModelCredentials)
	p.absent(p.reconciledNow("agenttask", p.getTask("revoked")), "a model request after the label was removed", func() bool { return len(server.Received()) > 1 })

	p.labelSecret("revoked-key", true)
	p.finished("revoked", v1.ConditionSucceeded, v1.ReasonCompleted)
	if n := len(server.Received()); n != 2 {
		t.Fatalf("%d model requests, want 2", n)
	}
}

// TestModelEndpointAllowList: (c) a task whose baseURL is not on the controller's
// allow-list never calls it (nor reads its Secret) and waits with
// EndpointNotAllowed naming the endpoint and the flag; (d) an endpoint on the list
// works. The two servers differ only in their port.
func TestModelEndpointAllowList(t *testing.T) {
	allowed := fixtures.NewChatServer(t, answer("allowed", 10))
	elsewhere := fixtures.NewChatServer(t, answer("should not be asked", 10))
	p := newLoopEnv(t)
	p.endpoints = agent.MustParseEndpoints(allowed.BaseURL())
	p.start()

	p.modelTask("elsewhere", v1.ModeReadOnly, elsewhere)
	p.modelTask("allowed", v1.ModeReadOnly, allowed)
	// userinfo in a baseURL is refused, and never repeated.
	p.modelTask("userinfo", v1.ModeReadOnly, allowed, func(task *v1.AgentTask) {
		task.Spec.Agent.Model.BaseURL = strings.Replace(allowed.BaseURL(), "http://", "http://bob:hunter2@", 1)
	})

	msg := p.waiting("elsewhere", ReasonEndpointNotAllowed)
	mustContain(t, "refusal", msg, `"`+elsewhere.BaseURL()+`"`, "--model-endpoints", allowed.BaseURL())
	msg = p.waiting("userinfo", ReasonEndpointNotAllowed)
	mustContain(t, "userinfo refusal", msg, "userinfo", "--model-endpoints")
	mustNotContain(t, "userinfo refusal", msg, "hunter2")

	if got := p.finished("allowed", v1.ConditionSucceeded, v1.ReasonCompleted); got.Status.Result != "allowed" {
		t.Fatalf("result %q", got.Status.Result)
	}
	p.absent(all(p.reconciledNow("agenttask", p.getTask("elsewhere")), p.reconciledNow("agenttask", p.getTask("userinfo"))),
		"a request to an endpoint not on the list", func() bool { return len(elsewhere.Received()) > 0 || len(allowed.Received()) > 1 })
	if n := len(allowed.Received()); n != 1 {
		t.Fatalf("%d requests to the allowed endpoint, want 1 (the userinfo task must not reach it)", n)
	}
}

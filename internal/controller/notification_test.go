package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/notify"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// githubToken is a token an agent put in a call's input: no message may carry it.
const githubToken = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"

// fastRetry keeps the tests' backoff short.
var fastRetry = notify.Retry{Base: 50 * time.Millisecond, Cap: 200 * time.Millisecond, MaxAttempts: 5}

// receiver is a webhook receiver: it answers the first fail requests 500, the rest
// 200, and keeps every request.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	fail int
	// always answers every request with this status, when not 0.
	always int
	got    []delivered
}

type delivered struct {
	header   http.Header
	body     []byte
	accepted bool
}

func newReceiver(t *testing.T, fail int) *receiver {
	t.Helper()
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		d := delivered{header: req.Header.Clone(), body: body}
		switch {
		case r.always != 0:
			w.WriteHeader(r.always)
			_, _ = w.Write([]byte("receiver down for maintenance"))
		case r.fail > 0:
			r.fail--
			w.WriteHeader(http.StatusInternalServerError)
		default:
			d.accepted = true
		}
		r.got = append(r.got, d)
	}))
	t.Cleanup(r.Close)
	return r
}

// requests are the requests so far, accepted ones only when accepted is set, of
// event only when it is not "".
func (r *receiver) requests(accepted bool, event v1.NotificationEvent) []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivered
	for _, d := range r.got {
		if (!accepted || d.accepted) && (event == "" || eventOf(d) == event) {
			out = append(out, d)
		}
	}
	return out
}

// eventOf reads the event of a delivery, in either shape.
func eventOf(d delivered) v1.NotificationEvent {
	var ce notify.CloudEvent
	if json.Unmarshal(d.body, &ce) == nil && ce.Data.Event != "" {
		return ce.Data.Event
	}
	var slack struct{ Text string }
	_ = json.Unmarshal(d.body, &slack)
	for _, e := range []v1.NotificationEvent{v1.EventRequested, v1.EventDecided, v1.EventExpired, v1.EventSuperseded} {
		if strings.HasPrefix(slack.Text, "Approval "+strings.ToLower(string(e))) {
			return e
		}
	}
	return ""
}

// notificationSecret creates a Secret, labelled for notifications when labelled.
func notificationSecret(t *testing.T, ns, name string, labelled bool, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if labelled {
		s.Labels = map[string]string{v1.LabelNotificationCredentials: "true"}
	}
	if err := env.Client.Create(t.Context(), s); err != nil {
		t.Fatalf("creating secret: %v", err)
	}
}

// notificationChannel creates a channel whose URL is in Secret NAME-url (key url)
// and, for CloudEvents, its key in NAME-key (key hmac).
func notificationChannel(t *testing.T, ns, name string, typ v1.NotificationChannelType, mutate ...func(*v1.NotificationChannel)) *v1.NotificationChannel {
	t.Helper()
	ch := &v1.NotificationChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.NotificationChannelSpec{
			Type: typ, URLSecretRef: v1.SecretKeyReference{Name: name + "-url", Key: "url"},
			ConsoleURL: "https://console.example.com/approvals",
		},
	}
	if typ == v1.ChannelCloudEvents {
		ch.Spec.SigningSecretRef = &v1.SecretKeyReference{Name: name + "-key", Key: "hmac"}
	}
	for _, m := range mutate {
		m(ch)
	}
	if err := env.Client.Create(t.Context(), ch); err != nil {
		t.Fatalf("creating channel: %v", err)
	}
	return ch
}

// startNotifier starts a manager with the Approval and notification reconcilers,
// watching the namespaces given; the first is where approvals are, the controller's
// own is cfg.Namespace.
func startNotifier(t *testing.T, cfg Notifications, approvals bool, namespaces ...string) (ctrl.Manager, func()) {
	t.Helper()
	mgr := newTestManager(t, namespaces...)
	opts := testOptions()
	opts.Notifications = cfg
	if approvals {
		if err := setupApproval(mgr, opts); err != nil {
			t.Fatal(err)
		}
	}
	if err := setupNotification(mgr, opts); err != nil {
		t.Fatal(err)
	}
	return mgr, testenv.RunManager(t, mgr)
}

func getApproval(t *testing.T, ns, name string) *v1.Approval {
	t.Helper()
	a := &v1.Approval{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
		t.Fatalf("getting approval: %v", err)
	}
	return a
}

func getChannel(t *testing.T, ns, name string) *v1.NotificationChannel {
	t.Helper()
	ch := &v1.NotificationChannel{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ch); err != nil {
		t.Fatalf("getting channel: %v", err)
	}
	return ch
}

// An asked call's life, announced: what the approver sees in Slack and in a
// signed CloudEvent, with the token of the call's input masked; each event
// delivered once, also after the controller restarts.
func TestNotificationsAnnounceAnApprovalsLife(t *testing.T) {
	p := startPipeline(t)
	slack, events := newReceiver(t, 0), newReceiver(t, 0)
	key := "hmac-key-of-the-receiver"
	notificationSecret(t, p.ns, "slack-url", true, map[string]string{"url": slack.URL + "/services/T0/B0/x"})
	notificationSecret(t, p.ns, "events-url", true, map[string]string{"url": events.URL + "/hook"})
	notificationSecret(t, p.ns, "events-key", true, map[string]string{"hmac": key})
	notificationChannel(t, p.ns, "slack", v1.ChannelSlack)
	notificationChannel(t, p.ns, "events", v1.ChannelCloudEvents)
	cfg := Notifications{Retry: fastRetry}
	_, stopNotifier := startNotifier(t, cfg, false, p.ns)

	p.task("fix", v1.ModeEdit)
	p.proposeAs("fix", 0, 0, v1.ToolBash, `{"command":"make build-release GITHUB_TOKEN=`+githubToken+`"}`,
		"see <https://evil.example|the docs>, <!channel>, token "+githubToken)
	a := p.approval("fix-t0-0")
	p.eventually("Requested announced on both channels", func() (bool, string) {
		return len(slack.requests(true, v1.EventRequested)) == 1 && len(events.requests(true, v1.EventRequested)) == 1, fmt.Sprint(len(slack.got), len(events.got))
	})

	// The CloudEvent: signed with the channel's key, what is asked in its data.
	d := events.requests(true, v1.EventRequested)[0]
	if err := notify.Verify([]byte(key), d.header.Get(notify.HeaderTimestamp), d.header.Get(notify.HeaderSignature), d.body, time.Now(), notify.DefaultMaxAge); err != nil {
		t.Fatalf("the CloudEvent's signature does not verify: %v", err)
	}
	if err := notify.Verify([]byte("another key"), d.header.Get(notify.HeaderTimestamp), d.header.Get(notify.HeaderSignature), d.body, time.Now(), notify.DefaultMaxAge); err == nil {
		t.Fatal("the CloudEvent verifies with another key")
	}
	if ct := d.header.Get("Content-Type"); ct != notify.CloudEventContentType {
		t.Errorf("content type %q", ct)
	}
	var ce notify.CloudEvent
	if err := json.Unmarshal(d.body, &ce); err != nil {
		t.Fatal(err)
	}
	m := ce.Data
	if ce.SpecVersion != "1.0" || ce.Type != "dev.toolgate.approval.requested" || ce.ID != string(a.UID)+".requested" || ce.Subject != "fix-t0-0" {
		t.Errorf("CloudEvent attributes: %+v", ce)
	}
	wantApprove := "kubectl toolgate approve fix-t0-0 -n " + p.ns
	if m.Goal != "make the failing test pass" || m.Tool != "bash" || !strings.Contains(m.Input, "make build-release") || m.ApproveCommand != wantApprove ||
		m.ExpiresAt != a.Spec.ExpiresAt.UTC().Format(time.RFC3339) || m.RequestedBy != testProposer || m.ConsoleURL != "https://console.example.com/approvals" ||
		!strings.Contains(m.Approvers, "approve verb") || m.Rule != "ModeDefault/Edit" || m.Category != string(v1.CategoryBuild) ||
		!strings.Contains(m.Walls, "none") || !strings.Contains(m.Network, "all egress denied") {
		t.Errorf("the CloudEvent's data: %+v", m)
	}
	if len(m.Parts) == 0 || m.Parts[0].Category == "" || !strings.Contains(m.Parts[0].Command, "make") {
		t.Errorf("the CloudEvent's parts: %+v", m.Parts)
	}

	// The Slack message: blocks, the same facts, the agent's text defused.
	s := slack.requests(true, v1.EventRequested)[0]
	var payload struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(s.body, &payload); err != nil || len(payload.Blocks) < 4 || payload.Blocks[0].Type != "header" {
		t.Fatalf("slack payload %s: %v", s.body, err)
	}
	text := strings.ReplaceAll(string(s.body), `\u0026`, "&")
	for _, want := range []string{"make the failing test pass", wantApprove, "https://console.example.com/approvals", "&lt;!channel&gt;", "make build-release"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Slack message lacks %q: %s", want, text)
		}
	}
	if strings.Contains(text, "<!channel>") || strings.Contains(text, "<https://evil") {
		t.Errorf("the Slack message lets the agent's text notify or link: %s", text)
	}

	p.decide("fix-t0-0", v1.DecisionDenied, "bob", "not today")
	p.eventually("Decided announced on both channels", func() (bool, string) {
		return len(slack.requests(true, v1.EventDecided)) == 1 && len(events.requests(true, v1.EventDecided)) == 1, fmt.Sprint(len(slack.got), len(events.got))
	})
	decided := events.requests(true, v1.EventDecided)[0]
	ce = notify.CloudEvent{}
	_ = json.Unmarshal(decided.body, &ce)
	if ce.Type != "dev.toolgate.approval.decided" || ce.Data.Outcome == nil || ce.Data.Outcome.Decision != "Denied" || ce.Data.Outcome.DecidedBy[0] != "bob" || ce.Data.ApproveCommand != "" {
		t.Errorf("the Decided event: %+v %+v", ce, ce.Data.Outcome)
	}

	// No message carries the token, nor any way to decide but the kubectl line.
	for _, r := range []*receiver{slack, events} {
		for _, d := range r.requests(false, "") {
			if strings.Contains(string(d.body), githubToken) || strings.Contains(string(d.body), "abcdefghijklmnop") {
				t.Fatalf("a message carries the input's token: %s", d.body)
			}
			// The only addresses are the console's and the agent's own (escaped).
			body := string(d.body)
			if links := strings.Count(body, "://"); links != strings.Count(body, "https://console.example.com/approvals")+strings.Count(body, "https://evil.example") {
				t.Fatalf("a message carries an address that is neither the console's nor the agent's text: %s", body)
			}
		}
	}

	// The Approval records each delivery once.
	p.eventually("the deliveries recorded on the approval", func() (bool, string) {
		st := getApproval(t, p.ns, "fix-t0-0").Status
		n := 0
		for _, rec := range st.Notifications {
			if rec.DeliveredAt != nil && rec.Attempts == 1 {
				n++
			}
		}
		return n == 4 && len(st.Notifications) == 4, fmt.Sprintf("%+v", st.Notifications)
	})
	// The channel counts its deliveries in its own status, written after the
	// Approval's record: waited for, not read once.
	p.eventually("the channel's status counting both deliveries", func() (bool, string) {
		ch := getChannel(t, p.ns, "events")
		return ch.Status.Delivered == 2 && meta.IsStatusConditionTrue(ch.Status.Conditions, v1.ConditionReady) && meta.IsStatusConditionTrue(ch.Status.Conditions, v1.ConditionDelivering), fmt.Sprintf("%+v", ch.Status)
	})

	// A controller started again reads the records and sends nothing again.
	stopNotifier()
	p.stop()
	before := len(slack.requests(false, "")) + len(events.requests(false, ""))
	mgr, _ := startNotifier(t, cfg, false, p.ns)
	absent(t, reconciledOnce(t, mgr, "notification", a), "a message sent again", func() bool {
		return len(slack.requests(false, ""))+len(events.requests(false, "")) != before
	})
}

// A receiver that fails twice and then accepts gets the message once, on the third
// attempt, with the same CloudEvent id each time; a channel in the controller's
// namespace hears every namespace's approvals, and one in another namespace none.
func TestNotificationRetriedUntilDeliveredOnce(t *testing.T) {
	ns, controllerNS, otherNS := env.Namespace(t), env.Namespace(t), env.Namespace(t)
	flaky, other := newReceiver(t, 2), newReceiver(t, 0)
	notificationSecret(t, controllerNS, "all-url", true, map[string]string{"url": flaky.URL})
	notificationSecret(t, controllerNS, "all-key", true, map[string]string{"hmac": "k"})
	notificationChannel(t, controllerNS, "all", v1.ChannelCloudEvents, func(ch *v1.NotificationChannel) { ch.Spec.Events = []v1.NotificationEvent{v1.EventRequested} })
	notificationSecret(t, otherNS, "theirs-url", true, map[string]string{"url": other.URL})
	notificationChannel(t, otherNS, "theirs", v1.ChannelSlack)
	decisions := newReceiver(t, 0)
	notificationSecret(t, ns, "decisions-url", true, map[string]string{"url": decisions.URL})
	notificationChannel(t, ns, "decisions", v1.ChannelSlack, func(ch *v1.NotificationChannel) { ch.Spec.Events = []v1.NotificationEvent{v1.EventDecided} })

	retries := testutil.ToFloat64(metrics.NotificationRetries.WithLabelValues("CloudEvents"))
	failures := testutil.ToFloat64(metrics.NotificationFailures.WithLabelValues("CloudEvents", "Requested"))
	startNotifier(t, Notifications{Namespace: controllerNS, Retry: fastRetry}, true, ns, controllerNS, otherNS)
	a := fixtures.PendingApproval(ns, "fix-t0-0", "agent", nil)
	if err := env.Client.Create(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the third attempt accepted", func() (bool, string) {
		return len(flaky.requests(true, "")) == 1, fmt.Sprint(len(flaky.requests(false, "")))
	})
	got := flaky.requests(false, "")
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3 (two refused, one accepted)", len(got))
	}
	ids := map[string]bool{}
	for _, d := range got {
		var ce notify.CloudEvent
		_ = json.Unmarshal(d.body, &ce)
		ids[ce.ID] = true
	}
	if len(ids) != 1 || !ids[string(getApproval(t, ns, "fix-t0-0").UID)+".requested"] {
		t.Errorf("the attempts carry ids %v, want the approval's UID.requested on each", ids)
	}
	eventually(t, "the delivery recorded after three attempts", func() (bool, string) {
		st := getApproval(t, ns, "fix-t0-0").Status
		return len(st.Notifications) == 1 && st.Notifications[0].Attempts == 3 && st.Notifications[0].DeliveredAt != nil &&
			st.Notifications[0].Channel == controllerNS+"/all", fmt.Sprintf("%+v", st.Notifications)
	})
	// The channel's status and the metrics are written after the Approval's
	// record: waited for, not read once.
	eventually(t, "the channel's status and the metrics counting three attempts", func() (bool, string) {
		ch := getChannel(t, controllerNS, "all")
		retried := testutil.ToFloat64(metrics.NotificationRetries.WithLabelValues("CloudEvents")) - retries
		failed := testutil.ToFloat64(metrics.NotificationFailures.WithLabelValues("CloudEvents", "Requested")) - failures
		return ch.Status.Delivered == 1 && ch.Status.FailedAttempts == 2 && meta.IsStatusConditionTrue(ch.Status.Conditions, v1.ConditionDelivering) && retried == 2 && failed == 2,
			fmt.Sprintf("channel %+v; retries counted %v, failures %v (want 2 and 2)", ch.Status, retried, failed)
	})

	// Deciding it moves its state again: the namespace's channel for decisions
	// hears it in the same reconcile that would send Requested again, and the
	// channel of another namespace hears nothing, ever.
	decided := getApproval(t, ns, "fix-t0-0")
	decided.Spec.Votes = append(decided.Spec.Votes, v1.ApprovalVote{User: "bob", Decision: v1.DecisionApproved})
	if err := env.Client.Update(t.Context(), decided); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the approval approved", func() (bool, string) {
		st := getApproval(t, ns, "fix-t0-0").Status.State
		return st == v1.ApprovalStateApproved, string(st)
	})
	decidedAnnounced := moment{name: "Decided announced", passed: func() (bool, string) {
		return len(decisions.requests(true, v1.EventDecided)) == 1, fmt.Sprint(len(decisions.requests(false, "")))
	}}
	absent(t, decidedAnnounced, "a second message, or one to another namespace's channel", func() bool {
		return len(flaky.requests(false, "")) != 3 || len(other.requests(false, "")) != 0
	})
}

// A receiver that never accepts gets MaxAttempts attempts and no more; its channel
// says why (Delivering False) and the metrics count it. A channel whose Secret is
// not labelled for notifications never reaches its URL: the controller does not
// read the Secret.
func TestNotificationFailuresAreBoundedAndShown(t *testing.T) {
	ns := env.Namespace(t)
	down, unlabelled := newReceiver(t, 0), newReceiver(t, 0)
	down.always = http.StatusServiceUnavailable
	notificationSecret(t, ns, "down-url", true, map[string]string{"url": down.URL})
	notificationChannel(t, ns, "down", v1.ChannelSlack)
	notificationSecret(t, ns, "unlabelled-url", false, map[string]string{"url": unlabelled.URL})
	notificationChannel(t, ns, "unlabelled", v1.ChannelSlack)
	notificationSecret(t, ns, "ftp-url", true, map[string]string{"url": "ftp://hooks.example/secret-path"})
	notificationChannel(t, ns, "ftp", v1.ChannelSlack)

	retry := notify.Retry{Base: 20 * time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 3}
	failures := testutil.ToFloat64(metrics.NotificationFailures.WithLabelValues("Slack", "Requested"))
	givenUp := testutil.ToFloat64(metrics.NotificationsGivenUp.WithLabelValues("Slack"))
	startNotifier(t, Notifications{Retry: retry}, true, ns)
	if err := env.Client.Create(t.Context(), fixtures.PendingApproval(ns, "fix-t0-0", "agent", nil)); err != nil {
		t.Fatal(err)
	}
	records := func() map[string]v1.NotificationRecord {
		out := map[string]v1.NotificationRecord{}
		for _, rec := range getApproval(t, ns, "fix-t0-0").Status.Notifications {
			out[strings.TrimPrefix(rec.Channel, ns+"/")] = rec
		}
		return out
	}
	eventually(t, "every channel given up", func() (bool, string) {
		recs := records()
		for _, name := range []string{"down", "unlabelled", "ftp"} {
			if recs[name].Attempts != 3 {
				return false, fmt.Sprintf("%+v", recs)
			}
		}
		return true, ""
	})
	recs := records()
	mustContain(t, "down's record", recs["down"].LastError, "given up after 3 attempts: the receiver answered 503 Service Unavailable")
	if strings.Contains(recs["down"].LastError, "maintenance") {
		t.Errorf("the receiver's answer is shown on the approval: %s", recs["down"].LastError)
	}
	mustContain(t, "unlabelled's record", recs["unlabelled"].LastError, "spec.urlSecretRef: Secret "+ns+"/unlabelled-url not found, or not labelled toolgate.dev/notification-credentials=true")
	mustContain(t, "ftp's record", recs["ftp"].LastError, `the URL's scheme is "ftp"; it must be http or https`)
	if strings.Contains(recs["ftp"].LastError, "secret-path") {
		t.Errorf("an error repeats the webhook URL: %s", recs["ftp"].LastError)
	}
	if n := len(down.requests(false, "")); n != 3 {
		t.Errorf("the receiver got %d attempts, want 3", n)
	}
	if n := len(unlabelled.requests(false, "")); n != 0 {
		t.Errorf("the URL of an unlabelled Secret got %d requests", n)
	}

	eventually(t, "the channels' conditions", func() (bool, string) {
		var seen []string
		ok := true
		for name, want := range map[string][2]string{
			"down":       {v1.ReasonChannelReady, v1.ReasonDeliveryFailed},
			"unlabelled": {v1.ReasonSecretUnavailable, v1.ReasonDeliveryFailed},
			"ftp":        {v1.ReasonURLInvalid, v1.ReasonDeliveryFailed},
		} {
			ch := getChannel(t, ns, name)
			ready := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionReady)
			delivering := meta.FindStatusCondition(ch.Status.Conditions, v1.ConditionDelivering)
			if ready == nil || delivering == nil || ready.Reason != want[0] || delivering.Reason != want[1] || delivering.Status != metav1.ConditionFalse || ch.Status.FailedAttempts != 3 {
				ok = false
			}
			seen = append(seen, fmt.Sprintf("%s: %+v", name, ch.Status))
		}
		return ok, strings.Join(seen, "; ")
	})
	mustContain(t, "down's Delivering", meta.FindStatusCondition(getChannel(t, ns, "down").Status.Conditions, v1.ConditionDelivering).Message, "503")
	if d := testutil.ToFloat64(metrics.NotificationFailures.WithLabelValues("Slack", "Requested")) - failures; d != 9 {
		t.Errorf("failures counted %v, want 9", d)
	}
	if d := testutil.ToFloat64(metrics.NotificationsGivenUp.WithLabelValues("Slack")) - givenUp; d != 3 {
		t.Errorf("given up counted %v, want 3", d)
	}
}

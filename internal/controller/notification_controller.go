package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/approval"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/metrics"
	"github.com/toolgate/toolgate/internal/notify"
)

// +kubebuilder:rbac:groups=toolgate.dev,resources=notificationchannels,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolgate.dev,resources=notificationchannels/status,verbs=get;update;patch

// Notifications configure how Approvals are announced to NotificationChannels.
type Notifications struct {
	// Namespace is the controller's own: its channels announce the approvals of
	// every namespace. Empty: channels announce their own namespace's only.
	Namespace string
	// Workers is how many Approvals are announced at once; zero means
	// DefaultNotificationWorkers.
	Workers int
	// Timeout bounds one delivery attempt; zero means DefaultNotificationTimeout.
	Timeout time.Duration
	// Retry bounds the attempts of a delivery; the zero value means
	// notify.DefaultRetry.
	Retry notify.Retry
}

// Defaults of Notifications.
const (
	DefaultNotificationWorkers = 2
	DefaultNotificationTimeout = 10 * time.Second
)

func (n Notifications) orDefault() Notifications {
	if n.Workers < 1 {
		n.Workers = DefaultNotificationWorkers
	}
	if n.Timeout <= 0 {
		n.Timeout = DefaultNotificationTimeout
	}
	if n.Retry.MaxAttempts < 1 || n.Retry.Base <= 0 || n.Retry.Cap <= 0 {
		n.Retry = notify.DefaultRetry
	}
	return n
}

// NotificationReconciler announces each event of an Approval (notify.EventOf) to
// the channels of its namespace and of the controller's, once per channel and
// event. It is a controller of its own, with its own queue and workers: the
// pipeline never waits for a receiver, and a slow or failing one holds back only
// announcements. What it delivered is recorded on the Approval
// (status.notifications): a delivered event is not sent again, after a restart
// either, and a failed one is tried again with backoff until its attempts run out.
type NotificationReconciler struct {
	client.Client
	// Secrets reads the Secrets labelled v1.LabelNotificationCredentials and no
	// other.
	Secrets client.Reader
	HTTP    *http.Client
	Config  Notifications
	Now     func() time.Time
}

func setupNotification(mgr ctrl.Manager, opts Options) error {
	cfg := opts.Notifications.orDefault()
	secrets, err := notificationSecrets(mgr)
	if err != nil {
		return err
	}
	r := &NotificationReconciler{
		Client: mgr.GetClient(), Secrets: secrets, Config: cfg, Now: opts.clock(),
		HTTP: &http.Client{
			Timeout: cfg.Timeout,
			// A redirect could lead the message anywhere; a webhook answers itself.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.Approval{}, builder.WithPredicates(approvalStateChanged)).
		Watches(&v1.NotificationChannel{}, handler.EnqueueRequestsFromMapFunc(r.pendingApprovals), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: cfg.Workers}).
		Named("notification").
		Complete(r)
}

// notificationSecrets is a cache of its own that holds only the Secrets labelled
// v1.LabelNotificationCredentials=true: the manager's cache selects Secrets by
// another label (CacheOptions), and one selector cannot take either.
func notificationSecrets(mgr ctrl.Manager) (client.Reader, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), DefaultTransform: trimCached,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{v1.LabelNotificationCredentials: "true"})},
		},
	})
	if err != nil {
		return nil, err
	}
	return c, mgr.Add(c)
}

// approvalStateChanged passes a new Approval and a change of its state: an event
// to announce. Its own writes (the delivery records) change no state; retries come
// from RequeueAfter.
var approvalStateChanged = predicate.TypedFuncs[client.Object]{
	UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
		old, oldOK := e.ObjectOld.(*v1.Approval)
		now, nowOK := e.ObjectNew.(*v1.Approval)
		return !oldOK || !nowOK || old.Status.State != now.Status.State
	},
	DeleteFunc: func(event.TypedDeleteEvent[client.Object]) bool { return false },
}

// pendingApprovals wakes the approvals a new or changed channel may announce: those
// waiting for a decision in its scope.
func (r *NotificationReconciler) pendingApprovals(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1.ApprovalList
	var opts []client.ListOption
	if obj.GetNamespace() != r.Config.Namespace {
		opts = append(opts, client.InNamespace(obj.GetNamespace()))
	}
	if err := r.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the approvals a notification channel announces", "channel", klog.KObj(obj))
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Status.State == v1.ApprovalStatePending {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// announcement is one attempt's result, reported on the channel after the Approval
// recorded it.
type announcement struct {
	channel  *v1.NotificationChannel
	approval string
	rec      v1.NotificationRecord
	err      error
	// unusable is the Ready reason when the channel's Secrets or URL are unusable.
	unusable string
}

// Reconcile announces the Approval's current event to every channel that wants it
// and has not had it.
func (r *NotificationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &v1.Approval{}
	if err := r.Get(ctx, req.NamespacedName, a); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	outcome, ok := notify.EventOf(a)
	if !ok || !a.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	channels, err := r.channels(ctx, a.Namespace, outcome.Event)
	if err != nil || len(channels) == 0 {
		return ctrl.Result{}, err
	}
	now := r.Now()
	var due []*v1.NotificationChannel
	var wait time.Duration
	room := v1.MaxNotificationRecords - len(a.Status.Notifications)
	for _, ch := range channels {
		rec := record(a, ch, outcome.Event)
		if rec == nil && notify.Before(a, outcome.Event, ch.CreationTimestamp.Time) {
			continue
		}
		if rec == nil {
			if room == 0 {
				ctrl.LoggerFrom(ctx).Info("not announcing to a channel: the approval records as many deliveries as it may", "channel", klog.KObj(ch), "event", outcome.Event, "limit", v1.MaxNotificationRecords)
				continue
			}
			room--
		}
		ok, w := r.Config.Retry.Due(rec, now)
		if ok {
			due = append(due, ch)
		}
		wait = sooner(wait, w)
	}
	if len(due) == 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	goal, parts := r.context(ctx, a)
	var done []announcement
	for _, ch := range due {
		d := r.deliver(ctx, a, ch, outcome.Event, goal, parts, now)
		done = append(done, d)
		if d.err != nil && d.rec.Attempts < r.Config.Retry.MaxAttempts {
			wait = sooner(wait, r.Config.Retry.Wait(d.rec.Attempts))
		}
	}
	recs := make([]v1.NotificationRecord, len(done))
	for i, d := range done {
		recs[i] = d.rec
	}
	if err := approval.RecordNotifications(ctx, r.Client, a, recs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	for _, d := range done {
		r.report(ctx, d, outcome.Event)
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// sooner is the shorter of two waits, zero meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}

// channels are the channels of ns and of the controller's namespace that announce
// event.
func (r *NotificationReconciler) channels(ctx context.Context, ns string, event v1.NotificationEvent) ([]*v1.NotificationChannel, error) {
	scopes := []string{ns}
	if r.Config.Namespace != "" && r.Config.Namespace != ns {
		scopes = append(scopes, r.Config.Namespace)
	}
	var out []*v1.NotificationChannel
	for _, scope := range scopes {
		var list v1.NotificationChannelList
		if err := r.List(ctx, &list, client.InNamespace(scope)); err != nil {
			return nil, err
		}
		for i := range list.Items {
			if notify.Wants(&list.Items[i], event) {
				out = append(out, &list.Items[i])
			}
		}
	}
	return out, nil
}

func channelKey(ch *v1.NotificationChannel) string { return ch.Namespace + "/" + ch.Name }

// record is the Approval's delivery record of event to ch, nil when none.
func record(a *v1.Approval, ch *v1.NotificationChannel, event v1.NotificationEvent) *v1.NotificationRecord {
	for i := range a.Status.Notifications {
		if rec := &a.Status.Notifications[i]; rec.Channel == channelKey(ch) && rec.Event == event {
			return rec
		}
	}
	return nil
}

// context is the task's goal and the call's parts, as far as they can be read: a
// message goes out without them rather than not at all.
func (r *NotificationReconciler) context(ctx context.Context, a *v1.Approval) (string, []v1.CommandPart) {
	var goal string
	task := &v1.AgentTask{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.TaskRef.Name}, task); err == nil {
		goal = task.Spec.Goal
	}
	intent := &v1.ToolIntent{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.IntentRef.Name}, intent); err == nil && intent.Status.Decision != nil {
		return goal, intent.Status.Decision.Parts
	}
	return goal, nil
}

// deliver makes one attempt to send the Approval's event to ch.
func (r *NotificationReconciler) deliver(ctx context.Context, a *v1.Approval, ch *v1.NotificationChannel, event v1.NotificationEvent,
	goal string, parts []v1.CommandPart, now time.Time) announcement {
	rec := v1.NotificationRecord{Channel: channelKey(ch), Event: event}
	if prev := record(a, ch, event); prev != nil {
		rec = *prev
	}
	rec.Attempts++
	at := metav1.NewTime(now)
	rec.LastAttemptAt = &at
	d := announcement{channel: ch, approval: a.Namespace + "/" + a.Name}
	target, reason, err := r.target(ctx, ch)
	if err != nil {
		d.unusable, d.err = reason, err
	} else {
		msg, _ := notify.Build(a, goal, parts, ch.Spec.ConsoleURL)
		d.err = notify.Post(ctx, r.HTTP, target, msg, now)
	}
	if d.err == nil {
		rec.DeliveredAt, rec.LastError = &at, ""
	} else {
		rec.LastError = clipError(d.err.Error())
		if rec.Attempts >= r.Config.Retry.MaxAttempts {
			rec.LastError = clipError(fmt.Sprintf("given up after %d attempts: %s", rec.Attempts, d.err))
		}
	}
	d.rec = rec
	return d
}

func clipError(s string) string {
	// An HTTP client's error names the URL, and a webhook's URL is its secret
	// (Slack's and Teams' are gitleaks rules).
	s = mask.Secrets(s)
	if len(s) > 1000 {
		return s[:1000] + "…"
	}
	return s
}

// target reads the channel's Secrets. Its errors name the Secret and key and say
// what to do, never what the Secret holds; the reason is the channel's Ready
// reason.
func (r *NotificationReconciler) target(ctx context.Context, ch *v1.NotificationChannel) (notify.Target, string, error) {
	t := notify.Target{Type: ch.Spec.Type}
	raw, err := r.secretValue(ctx, ch.Namespace, ch.Spec.URLSecretRef, "spec.urlSecretRef")
	if err != nil {
		return t, v1.ReasonSecretUnavailable, err
	}
	url := strings.TrimSpace(string(raw))
	if err := notify.ParseURL(url); err != nil {
		return t, v1.ReasonURLInvalid, fmt.Errorf("spec.urlSecretRef: Secret %s/%s key %s: %w", ch.Namespace, ch.Spec.URLSecretRef.Name, ch.Spec.URLSecretRef.Key, err)
	}
	t.URL = url
	if ch.Spec.Type == v1.ChannelCloudEvents {
		if ch.Spec.SigningSecretRef == nil {
			return t, v1.ReasonSecretUnavailable, errors.New("spec.signingSecretRef is required with type CloudEvents")
		}
		if t.SigningKey, err = r.secretValue(ctx, ch.Namespace, *ch.Spec.SigningSecretRef, "spec.signingSecretRef"); err != nil {
			return t, v1.ReasonSecretUnavailable, err
		}
	}
	return t, "", nil
}

func (r *NotificationReconciler) secretValue(ctx context.Context, ns string, ref v1.SecretKeyReference, field string) ([]byte, error) {
	s := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s: Secret %s/%s not found, or not labelled %s=true (the controller reads no other Secret for notifications)", field, ns, ref.Name, v1.LabelNotificationCredentials)
		}
		return nil, fmt.Errorf("%s: reading Secret %s/%s: %w", field, ns, ref.Name, err)
	}
	v := s.Data[ref.Key]
	if len(v) == 0 {
		return nil, fmt.Errorf("%s: Secret %s/%s has no key %s, or it is empty", field, ns, ref.Name, ref.Key)
	}
	return v, nil
}

// report counts an attempt the Approval recorded and shows it on the channel.
func (r *NotificationReconciler) report(ctx context.Context, d announcement, event v1.NotificationEvent) {
	typ := string(d.channel.Spec.Type)
	if d.rec.Attempts > 1 {
		metrics.NotificationRetries.WithLabelValues(typ).Inc()
	}
	log := ctrl.LoggerFrom(ctx).WithValues("channel", klog.KObj(d.channel), "event", event, "attempt", d.rec.Attempts)
	if d.err == nil {
		metrics.NotificationsSent.WithLabelValues(typ, string(event)).Inc()
		log.V(2).Info("notification delivered")
	} else {
		metrics.NotificationFailures.WithLabelValues(typ, string(event)).Inc()
		if d.rec.Attempts >= r.Config.Retry.MaxAttempts {
			metrics.NotificationsGivenUp.WithLabelValues(typ).Inc()
		}
		log.Info("notification not delivered", "error", d.rec.LastError)
	}
	key := client.ObjectKeyFromObject(d.channel)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ch := &v1.NotificationChannel{}
		if err := r.Get(ctx, key, ch); err != nil {
			return err
		}
		setChannelStatus(&ch.Status, ch.Generation, d, r.Now())
		return r.Status().Update(ctx, ch)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "recording the announcement on the notification channel")
	}
}

// setChannelStatus adds one attempt to a channel's status: its counts and its
// Ready and Delivering conditions.
func setChannelStatus(st *v1.NotificationChannelStatus, generation int64, d announcement, now time.Time) {
	st.ObservedGeneration = generation
	ready := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonChannelReady, ObservedGeneration: generation,
		Message: "the channel's Secrets are readable and its URL valid"}
	if d.unusable != "" {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, d.unusable, d.rec.LastError
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	delivering := metav1.Condition{Type: v1.ConditionDelivering, Status: metav1.ConditionTrue, Reason: v1.ReasonDelivered, ObservedGeneration: generation,
		Message: fmt.Sprintf("%s of Approval %s delivered", d.rec.Event, d.approval)}
	if d.err != nil {
		st.FailedAttempts++
		delivering.Status, delivering.Reason = metav1.ConditionFalse, v1.ReasonDeliveryFailed
		delivering.Message = fmt.Sprintf("attempt %d to announce %s of Approval %s failed: %s", d.rec.Attempts, d.rec.Event, d.approval, d.rec.LastError)
	} else {
		st.Delivered++
		t := metav1.NewTime(now)
		st.LastDeliveryTime = &t
	}
	meta.SetStatusCondition(&st.Conditions, delivering)
}

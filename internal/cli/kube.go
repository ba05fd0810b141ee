package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/archive/body"
)

// scheme knows the core and toolgate types.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1.AddToScheme(s))
	return s
}()

// cluster is a connection to the API server named by the kubectl flags.
type cluster struct {
	// client reads and writes toolgate objects (uncached).
	client client.Client
	// core reads pods/log; authentication asks SelfSubjectReview. They are the two
	// typed clients of client-go the plugin needs: the whole clientset would link
	// every API group's client into the binary (docs/cli.md, "Size").
	core           corev1client.CoreV1Interface
	authentication authenticationv1client.AuthenticationV1Interface
	// namespace from --namespace, else the kubeconfig context's, else "default".
	namespace string
	// archive reads what the cluster no longer holds (archive.go).
	archive *archiveReader
}

// connect builds the clients from --kubeconfig, --context, --namespace and the other
// kubectl flags.
func (o *Options) connect() (*cluster, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	authentication, err := authenticationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &cluster{client: c, core: core, authentication: authentication, namespace: ns, archive: &archiveReader{cfg: cfg, namespace: ns, errOut: o.Streams.ErrOut}}, nil
}

// whoAmI asks the API server for the caller's user name (authentication.k8s.io/v1
// SelfSubjectReview): the name the admission policies compare decidedBy and
// requestedBy with, whatever the kubeconfig calls the user.
func (c *cluster) whoAmI(ctx context.Context) (string, error) {
	name, _, err := c.whoAmIWithGroups(ctx)
	return name, err
}

// whoAmIWithGroups is whoAmI with the caller's groups, as the admission policies see
// them (request.userInfo.groups).
func (c *cluster) whoAmIWithGroups(ctx context.Context) (string, []string, error) {
	review, err := c.authentication.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("asking the API server who you are (SelfSubjectReview): %w", apiError(err))
	}
	name := review.Status.UserInfo.Username
	if name == "" {
		return "", nil, errors.New("the API server's SelfSubjectReview returned no user name; toolgate needs one to record who decided or asked")
	}
	return name, review.Status.UserInfo.Groups, nil
}

// admissionDenial matches the API server's message for a ValidatingAdmissionPolicy
// refusal, with or without the binding's name.
var admissionDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'(?: with binding '[^']+')? denied request: ([\s\S]*)$`)

// apiError turns an API error into what a person needs: for an admission policy's
// refusal, the policy's name and its own message; for other API errors, the server's
// message without client-side wrapping.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	msg := status.Status().Message
	if m := admissionDenial.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("refused by admission policy %s: %s", m[1], m[2])
	}
	if msg == "" {
		return err
	}
	return errors.New(msg)
}

// taskObjects are a task and everything recorded about it.
type taskObjects struct {
	task *v1.AgentTask
	// archivedTask is the task's record when the task is read from the archive
	// (deleted from the cluster): its turn records and completion checks are there.
	archivedTask *body.Task
	intents      []v1.ToolIntent
	approvals    []v1.Approval
	executions   []v1.Execution
}

// loadTask reads a task, its intents and their approvals and executions; with
// children, what the cluster no longer holds is read from the archive (a task
// deleted from the cluster, its deleted calls).
func (c *cluster) loadTask(ctx context.Context, name string, withChildren bool) (*taskObjects, error) {
	task := &v1.AgentTask{}
	var archived *body.Task
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, task); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, apiError(err)
		}
		if !withChildren {
			return nil, fmt.Errorf("AgentTask %q not found in namespace %q (use -n to pick the namespace)", name, c.namespace)
		}
		if task, archived, err = c.archive.task(ctx, name); err != nil {
			return nil, err
		}
		if task == nil {
			c.archive.noteAbsent()
			return nil, fmt.Errorf("AgentTask %q not found in namespace %q, in the cluster or its archive (use -n to pick the namespace)", name, c.namespace)
		}
	}
	out := &taskObjects{task: task, archivedTask: archived}
	var intents v1.ToolIntentList
	if err := c.client.List(ctx, &intents, client.InNamespace(c.namespace)); err != nil {
		return nil, apiError(err)
	}
	for _, in := range intents.Items {
		if in.Spec.TaskRef.Name == name {
			out.intents = append(out.intents, in)
		}
	}
	if !withChildren {
		return out, nil
	}
	var approvals v1.ApprovalList
	if err := c.client.List(ctx, &approvals, client.InNamespace(c.namespace)); err != nil {
		return nil, apiError(err)
	}
	for _, a := range approvals.Items {
		if a.Spec.TaskRef.Name == name {
			out.approvals = append(out.approvals, a)
		}
	}
	var executions v1.ExecutionList
	if err := c.client.List(ctx, &executions, client.InNamespace(c.namespace)); err != nil {
		return nil, apiError(err)
	}
	for _, e := range executions.Items {
		if e.Spec.TaskRef.Name == name {
			out.executions = append(out.executions, e)
		}
	}
	c.mergeArchived(ctx, out)
	return out, nil
}

package reliability

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/failpoint"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/fixtures"
)

// managerBinary is cmd/manager built with the failpoints tag, and a kubeconfig for
// envtest's admin that it reads.
type managerBinary struct {
	path, kubeconfig string
}

var (
	builtMu sync.Mutex
	built   managerBinary
)

// failpointManager builds the manager with -tags failpoints into dir and writes the
// kubeconfig there, unless the files of an earlier call still exist: the subtests of
// one test share them. dir is a TempDir of the top-level test, so a later top-level
// test (or -count) builds again, from Go's build cache.
func failpointManager(t *testing.T, dir string) managerBinary {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	if built.path != "" {
		if _, err := os.Stat(built.path); err == nil {
			return built
		}
	}
	bin, err := testenv.BuildManager(dir, "failpoints")
	if err != nil {
		t.Fatal(err)
	}
	path, err := env.AdminKubeconfig("reliability-admin", dir)
	if err != nil {
		t.Fatal(err)
	}
	built = managerBinary{path: bin, kubeconfig: path}
	return built
}

// managerProcess is one run of the manager binary as a subprocess.
type managerProcess struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	err    error // cmd.Wait's result, set before exited is closed
}

// startProcess runs the manager binary with the test's images, spentJobTTL, no
// metrics or probe ports, and TOOLGATE_FAILPOINT=failpointSpec when it is not empty. Its stderr (the
// controller's log) is kept for panics and shown with -v when the test fails.
func startProcess(t *testing.T, m managerBinary, failpointSpec string, flags ...string) *managerProcess {
	t.Helper()
	args := append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--runner-image=" + testRunnerImage, "--default-sandbox-image=" + testSandboxImage,
		"--spent-job-ttl=" + spentJobTTL.String()}, flags...)
	cmd := exec.Command(m.path, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+m.kubeconfig)
	if failpointSpec != "" {
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+failpointSpec)
	}
	p := &managerProcess{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the manager: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	// Whatever happens to the test, no manager outlives it: a second one would race
	// the next subtest's (split brain is tested on purpose elsewhere).
	t.Cleanup(func() { p.stop(t) })
	return p
}

// exitCode waits up to timeout for the process to end and returns its exit code, or
// -1 and false when it is still running.
func (p *managerProcess) exitCode(timeout time.Duration) (int, bool) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return -1, false
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode(), true
	}
	if p.err != nil {
		return -1, true
	}
	return 0, true
}

// stop ends the process as Kubernetes would end a pod (SIGTERM, then SIGKILL) and
// fails the test when its log reports a panic.
func (p *managerProcess) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if _, ok := p.exitCode(15 * time.Second); !ok {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.wantNoPanic(t)
}

// wantNoPanic fails the test with every line of the process's log that reports a
// panic (a recovered one in a reconciler included).
func (p *managerProcess) wantNoPanic(t *testing.T) {
	t.Helper()
	for _, line := range p.stderr.panics() {
		t.Errorf("the manager process panicked: %s", line)
	}
}

// tail is the end of the process's log, for a failure message.
func (p *managerProcess) tail() string {
	p.stderr.mu.Lock()
	defer p.stderr.mu.Unlock()
	s := p.stderr.buf.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// approveAsked plays the people deciding: until the test ends it approves every
// pending Approval of ns, except those of the intents named in deny, which it
// denies. It runs across kills, as people do not wait for the controller.
func approveAsked(t *testing.T, ns string, deny map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var list v1.ApprovalList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err == nil {
				for i := range list.Items {
					a := &list.Items[i]
					if a.Status.State != v1.ApprovalStatePending || len(a.Spec.Votes) > 0 {
						continue
					}
					patch := client.MergeFrom(a.DeepCopy())
					a.Spec.Votes = fixtures.Votes(v1.DecisionApproved, "bob", "")
					if deny[a.Spec.IntentRef.Name] {
						a.Spec.Votes[0].Decision = v1.DecisionDenied
					}
					_ = env.Client.Patch(ctx, a, patch)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

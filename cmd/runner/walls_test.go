package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/runner"
)

// The runner proves a call's walls before its tool starts (internal/runner/walls.go).
// These tests give the real runner binary local stand-ins for its probe targets, as
// the pod spec gives it the real ones: a listener plays an API server or kubelet that
// a wall lets through, port 1 of the loopback one that the wall refuses.

// listen starts a TCP listener that accepts (and closes) every connection and
// counts them; it is closed when the test ends.
func listen(t *testing.T) (host, port string, accepted *atomic.Int32, l net.Listener) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	accepted = &atomic.Int32{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	host, port, _ = net.SplitHostPort(l.Addr().String())
	return host, port, accepted, l
}

// answerDNS starts a UDP server that answers every datagram (its own bytes, flagged
// as a response), as a DNS server the wall lets through does.
func answerDNS(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n > 2 {
				buf[2] |= 0x80
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().String()
}

func noNetwork(inv *protocol.Invocation) {}

func allowList(network v1alpha1.NetworkSpec) func(*protocol.Invocation) {
	network.Mode = v1alpha1.NetworkAllowList
	return func(inv *protocol.Invocation) { inv.Walls.Network = network }
}

// expectNotRun asserts that the call was refused naming its wall, and that its
// command never ran.
func expectNotRun(t *testing.T, ws string, o outcome, msgParts ...string) {
	t.Helper()
	for _, part := range msgParts {
		expectKind(t, o, protocol.KindException, part)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the command ran")
	}
	if _, err := os.Stat(filepath.Join(ws, ".toolgate")); err == nil {
		t.Error("the runner wrote into the workspace of a call it did not run")
	}
	if len(o.stdout) != 0 {
		t.Errorf("output of a call not run: %q", o.stdout)
	}
}

func TestCallIsNotRunWhenTheNetworkWallIsOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		walls  func(*protocol.Invocation)
		env    func(t *testing.T) (env []string, reached string)
		saying string
	}{
		{"no network, API server reachable", noNetwork, func(t *testing.T) ([]string, string) {
			host, port, _, _ := listen(t)
			return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port},
				"a TCP connection to the API server at " + net.JoinHostPort(host, port) + " succeeded"
		}, "though this call has no network"},
		{"no network, kubelet reachable", noNetwork, func(t *testing.T) ([]string, string) {
			_, port, _, _ := listen(t)
			return []string{protocol.KubeletPortEnv + "=" + port},
				"a TCP connection to the node's kubelet at 127.0.0.1:" + port + " succeeded"
		}, "though this call has no network"},
		{"no network, DNS answers", noNetwork, func(t *testing.T) ([]string, string) {
			addr := answerDNS(t)
			return []string{protocol.DNSServerEnv + "=" + addr}, "the DNS server at " + addr + " answered a DNS query"
		}, "though this call has no network"},
		{"allow-list without the node, kubelet reachable", allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "10.1.0.0/16"}}}), func(t *testing.T) ([]string, string) {
			_, port, _, _ := listen(t)
			return []string{protocol.KubeletPortEnv + "=" + port},
				"a TCP connection to the node's kubelet at 127.0.0.1:" + port + " succeeded"
		}, "though this call's egress list does not allow it"},
		{"allow-list of the node on another port, kubelet reachable", allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "127.0.0.1/32", Ports: []int32{1}}}}), func(t *testing.T) ([]string, string) {
			_, port, _, _ := listen(t)
			return []string{protocol.KubeletPortEnv + "=" + port}, "a TCP connection to the node's kubelet at 127.0.0.1:" + port + " succeeded"
		}, "egress list does not allow it"},
		{"allow-list without cluster DNS, DNS answers", allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "10.1.0.0/16", Ports: []int32{443}}}}), func(t *testing.T) ([]string, string) {
			addr := answerDNS(t)
			return []string{protocol.DNSServerEnv + "=" + addr}, "the DNS server at " + addr + " answered"
		}, "egress list does not allow it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws, _ := newWorkspace(t, nil)
			env, reached := tc.env(t)
			// The open wall is a listener of this test process, which a busy machine
			// may not schedule within the default probe timeout.
			env = append(env, runner.ProbeTimeoutEnv+"=10s")
			o := invoke(t, ws, "bash", map[string]any{"command": "touch ran"}, tc.walls, invokeOpts{env: env})
			expectNotRun(t, ws, o, "not run: the network wall does not hold: "+reached, tc.saying,
				"the cluster's NetworkPolicy enforcement is off, or not yet applied to this pod")
		})
	}
}

// A call whose walls the runner cannot try (the pod gave it no target, or one it
// cannot read) is not run: the runner fails closed rather than run unproven.
func TestCallIsNotRunWhenItsWallsCannotBeProven(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		saying string
	}{
		{"no API server address", []string{"KUBERNETES_SERVICE_HOST="}, "the runner's environment has no KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"},
		{"no node address", []string{protocol.NodeIPEnv + "="}, "the runner's environment has no " + protocol.NodeIPEnv},
		{"a node address that is none", []string{protocol.NodeIPEnv + "=node-1"}, protocol.NodeIPEnv + ` "node-1" is not an IP address`},
		{"a kubelet port that is none", []string{protocol.KubeletPortEnv + "=0"}, protocol.KubeletPortEnv + ` "0" is not a port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := newWorkspace(t, nil)
			o := invoke(t, ws, "bash", map[string]any{"command": "touch ran"}, noNetwork, invokeOpts{env: tc.env})
			expectNotRun(t, ws, o, "not run: the network wall cannot be proven: "+tc.saying)
		})
	}
}

func TestCallRunsWhenTheNetworkWallHolds(t *testing.T) {
	// [100::1] is in the discard-only prefix 100::/64 (RFC 6666): nothing answers it,
	// as a wall that drops packets.
	dropped := []string{"KUBERNETES_SERVICE_HOST=100::1", "KUBERNETES_SERVICE_PORT=443",
		protocol.NodeIPEnv + "=100::1", protocol.KubeletPortEnv + "=10250", protocol.DNSServerEnv + "=[100::1]:53"}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (env []string, walls func(*protocol.Invocation))
	}{
		{"no network, every probe refused", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			return nil, noNetwork
		}},
		{"no network, every probe dropped", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			return dropped, noNetwork
		}},
		{"allow-list of the node's kubelet, kubelet reachable", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			_, port, _, _ := listen(t)
			p, _ := strconv.Atoi(port)
			return []string{protocol.KubeletPortEnv + "=" + port},
				allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "127.0.0.0/8", Ports: []int32{443, int32(p)}}}})
		}},
		{"allow-list with an egress rule, API server reachable", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			host, port, _, _ := listen(t)
			return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port},
				allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "10.1.0.0/16", Ports: []int32{443}}}})
		}},
		{"allow-list with cluster DNS, DNS answers", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			return []string{protocol.DNSServerEnv + "=" + answerDNS(t)}, allowList(v1alpha1.NetworkSpec{ClusterDNS: true})
		}},
		{"allow-list of every port somewhere, DNS answers", func(t *testing.T) ([]string, func(*protocol.Invocation)) {
			return []string{protocol.DNSServerEnv + "=" + answerDNS(t)}, allowList(v1alpha1.NetworkSpec{Egress: []v1alpha1.EgressRule{{CIDR: "10.1.0.0/16"}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := newWorkspace(t, nil)
			env, walls := tc.setup(t)
			o := invoke(t, ws, "bash", map[string]any{"command": "touch ran; echo ran"}, walls, invokeOpts{env: env})
			if o.res.ErrorKind != "" || string(o.stdout) != "ran\n" {
				t.Fatalf("result %+v, output %q", o.res, o.stdout)
			}
		})
	}
}

// A new pod may run before the enforcer fenced it: the runner waits, trying again,
// and runs the call once the wall closes.
func TestCallWaitsForTheNetworkWallToClose(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	host, port, accepted, l := listen(t)
	o := invoke(t, ws, "bash", map[string]any{"command": "touch ran; echo ran"}, noNetwork, invokeOpts{
		env: []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port},
		whileRun: func(*exec.Cmd) {
			// The fence comes up once the runner has found the wall open.
			for deadline := time.Now().Add(runner.WallWait); accepted.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			_ = l.Close()
		},
	})
	if accepted.Load() == 0 {
		t.Fatal("the runner never tried the API server")
	}
	if o.res.ErrorKind != "" || string(o.stdout) != "ran\n" {
		t.Fatalf("result %+v, output %q", o.res, o.stdout)
	}
	if o.res.WallCheckMs <= 0 || o.res.WallCheckMs > o.res.DurationMs {
		t.Errorf("wallCheckMs %d of durationMs %d: the wait is not accounted", o.res.WallCheckMs, o.res.DurationMs)
	}
}

// A call whose walls say read-only runs only on a workspace mounted read-only.
func TestCallIsNotRunOnAWritableWorkspaceItMayOnlyRead(t *testing.T) {
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	readOnly := func(inv *protocol.Invocation) { inv.Walls.ReadOnlyWorkspace = true }
	for _, tc := range []struct {
		tool  string
		input map[string]any
	}{
		{"bash", map[string]any{"command": "touch ran"}},
		{"read_file", map[string]any{"path": "a.txt"}},
		{"write_file", map[string]any{"path": "ran", "content": "x"}},
	} {
		o := invoke(t, ws, tc.tool, tc.input, readOnly)
		expectNotRun(t, ws, o, "not run: the workspace wall does not hold: this call may only read the workspace, but "+ws+" is mounted writable")
	}
}

// On a read-only mount (a bind mount in a mount namespace of the runner's own) the
// same call runs.
func TestCallRunsOnAReadOnlyWorkspace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is not installed")
	}
	if out, err := exec.Command("unshare", "--mount", "--map-root-user", "true").CombinedOutput(); err != nil {
		t.Skipf("no mount namespace of its own: %v %s", err, out)
	}
	ws, _ := newWorkspace(t, map[string]string{"a.txt": "hello\n"})
	inv, _ := json.Marshal(protocol.Invocation{ExecutionName: "ro-1", Tool: "read_file", Input: json.RawMessage(`{"path":"a.txt"}`),
		TimeoutSeconds: 30, MaxOutputBytes: 4096, Walls: protocol.Walls{ReadOnlyWorkspace: true}})
	term := filepath.Join(t.TempDir(), "termination-log")
	cmd := exec.Command("unshare", "--mount", "--map-root-user", "--", "sh", "-c",
		`mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -workspace "$1" -termination-log "$3"`,
		"sh", ws, runnerBin, term)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), protocol.InvocationEnv + "=" + string(inv)}, heldTargets...)
	out, err := cmd.Output()
	res := checkTerminationMessage(t, term)
	if err != nil || res.ErrorKind != "" || string(out) != "     1\thello\n" {
		t.Fatalf("runner: %v, result %+v, output %q", err, res, out)
	}
}

// `runner exec`, a session's call, proves its walls too.
func TestSessionCallIsNotRunWhenTheNetworkWallIsOpen(t *testing.T) {
	ws, _ := newWorkspace(t, nil)
	host, port, _, _ := listen(t)
	line, _ := json.Marshal(bashInvocation("call-open", "touch ran", 4096))
	cmd := exec.Command(runnerBin, protocol.ExecCommand)
	cmd.Env = append(append([]string{"TOOLGATE_WORKSPACE=" + ws, "PATH=/usr/bin:/bin", outsideSessionEnv + "=1"}, heldTargets...),
		"KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
	// stdin stays open for the whole call, as the controller keeps it.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close() }()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	sc := bufio.NewScanner(&stderr)
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	res, decodeErr := protocol.DecodeResult([]byte(last))
	if decodeErr != nil {
		t.Fatalf("runner exec: %v, stderr %q", err, stderr.String())
	}
	o := outcome{res: res, stdout: stdout.Bytes()}
	expectNotRun(t, ws, o, "not run: the network wall does not hold: a TCP connection to the API server at "+net.JoinHostPort(host, port)+" succeeded")
	if code := cmd.ProcessState.ExitCode(); code != protocol.ExitFailed || strings.TrimSpace(stdout.String()) != "" {
		t.Errorf("exit code %d, output %q", code, stdout.String())
	}
}

package runner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

// The runner proves a call's walls (protocol.Invocation.Walls, built from the same
// sandbox spec as the pod's NetworkPolicy and volume mounts) before the tool starts,
// and refuses to run the tool, with an Exception naming the wall, when one does not
// hold. A NetworkPolicy is only words on a cluster whose CNI enforces none, and
// even an enforcing CNI may fence a new pod a moment after it started; the runner
// then fails closed instead of running open.
//
//   - Network (bash only: the other tools are the runner's own code, which opens no
//     connection). The pod gives the runner its targets through its own
//     environment, set by the pod spec and the kubelet, never by the tool:
//     KUBERNETES_SERVICE_HOST/PORT (the API server's Service, which the kubelet
//     sets in every pod), protocol.NodeIPEnv (the node's address, from the downward
//     API's status.hostIP) and the nameservers of /etc/resolv.conf. The API server and
//     the kubelet (port DefaultKubeletPort) always listen, so a TCP connection that
//     is made means the wall is open; refused, unreachable or timed out means it
//     holds. A DNS query that gets any answer means DNS is open. The probes run in
//     parallel, each for at most ProbeTimeout.
//   - With egress AllowList, only what the list cannot allow is tried (planProbes).
//   - When the network wall does not hold, the runner tries again, backing off, for
//     up to WallWait: the enforcer may not have fenced a new pod yet. A wall that
//     holds costs one round of probes: well under a millisecond where the enforcer
//     rejects (an ICMP unreachable, as kube-router does), one ProbeTimeout where it
//     drops packets.
//   - Workspace: when the walls say read-only, the workspace's mount must be
//     read-only (statfs ST_RDONLY); a mount does not change, so there is no wait.
//
// protocol.KubeletPortEnv and protocol.DNSServerEnv override the kubelet's port and
// the nameservers, and ProbeTimeoutEnv lengthens a probe, for tests; a pod spec never
// sets them.

// Environment variables of the runner (never of the tool) that name its probe
// targets, besides protocol.NodeIPEnv, KubeletPortEnv and DNSServerEnv, which the
// pod spec and the tests name too.
const (
	// ProbeTimeoutEnv lengthens ProbeTimeout (a Go duration; a shorter one is
	// ignored), for tests whose open wall is a listener of a busy test process:
	// an answer that comes after the probe gave up would be taken for a wall.
	ProbeTimeoutEnv = "TOOLGATE_PROBE_TIMEOUT"
	// apiServerHostEnv and apiServerPortEnv are the kubernetes Service's address,
	// which the kubelet sets in every container.
	apiServerHostEnv = "KUBERNETES_SERVICE_HOST"
	apiServerPortEnv = "KUBERNETES_SERVICE_PORT"
)

const (
	// DefaultKubeletPort is the port the kubelet listens on, on every node.
	DefaultKubeletPort = 10250
	// ProbeTimeout bounds one probe. Inside a cluster a connection that is let
	// through is made in about a millisecond; a probe that gets no answer within
	// this is taken for a wall that drops packets.
	ProbeTimeout = 100 * time.Millisecond
	// WallWait bounds how long the runner waits for a network wall to close before
	// it refuses the call: the enforcer may fence a new pod a moment after it
	// started, and an enforcer on a busy node (kube-router syncing its rules) has
	// been seen to take more than 10 s. It fits in the grace a Job's deadline (60 s)
	// and a session call's exec (30 s) give the runner beyond the tool's timeout.
	WallWait = 20 * time.Second
	// resolvConfPath lists the pod's nameservers.
	resolvConfPath = "/etc/resolv.conf"
	// defaultProbeName is the name a DNS probe asks for when resolv.conf has no
	// search domain: one the cluster's DNS server answers itself.
	defaultProbeName = "kubernetes.default.svc.cluster.local"
)

// Names of the walls, as a refusal names them.
const (
	WallNetwork   = "network"
	WallWorkspace = "workspace"
)

// wallBroken is the Exception of a call not run because a wall does not hold.
func wallBroken(wall, format string, args ...any) error {
	return exceptionf("not run: the %s wall does not hold: %s", wall, fmt.Sprintf(format, args...))
}

// wallUnproven is the Exception of a call not run because the runner could not try
// a wall.
func wallUnproven(wall, format string, args ...any) error {
	return exceptionf("not run: the %s wall cannot be proven: %s", wall, fmt.Sprintf(format, args...))
}

// wallConfig is what proving walls takes: Config's fields with their defaults.
type wallConfig struct {
	environ    []string
	resolvConf string
	wait       time.Duration
	timeout    time.Duration
}

func (c Config) walls() wallConfig {
	w := wallConfig{environ: c.Environ, resolvConf: c.ResolvConf, wait: c.WallWait, timeout: c.ProbeTimeout}
	if w.resolvConf == "" {
		w.resolvConf = resolvConfPath
	}
	if w.wait <= 0 {
		w.wait = WallWait
	}
	if w.timeout <= 0 {
		w.timeout = ProbeTimeout
	}
	for _, kv := range c.Environ {
		if v, ok := strings.CutPrefix(kv, ProbeTimeoutEnv+"="); ok {
			if d, err := time.ParseDuration(v); err == nil && d > w.timeout {
				w.timeout = d
			}
		}
	}
	return w
}

// proveWalls returns nil when every wall of inv holds, else the Exception that
// refuses the call.
func proveWalls(ctx context.Context, cfg wallConfig, inv protocol.Invocation, ws *Workspace) error {
	if inv.Walls.ReadOnlyWorkspace {
		if err := workspaceReadOnly(ws); err != nil {
			return err
		}
	}
	if inv.Tool != string(v1alpha1.ToolBash) {
		return nil
	}
	targets, err := readTargets(cfg)
	if err != nil {
		return wallUnproven(WallNetwork, "%v", err)
	}
	plan, err := planProbes(inv.Walls.Network, targets)
	if err != nil {
		return wallUnproven(WallNetwork, "%v", err)
	}
	return waitForFence(ctx, cfg, inv.Walls.Network, plan)
}

// workspaceReadOnly proves that the workspace's mount is read-only.
func workspaceReadOnly(ws *Workspace) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(ws.fd, &st); err != nil {
		return wallUnproven(WallWorkspace, "statfs of the workspace %s: %v", ws.given, err)
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return wallBroken(WallWorkspace, "this call may only read the workspace, but %s is mounted writable (its volume mount is not read-only)", ws.given)
	}
	return nil
}

// probeTargets are what the pod gives the runner to try; empty when it gives none.
type probeTargets struct {
	// apiServer is the kubernetes Service's host:port.
	apiServer string
	// nodeIP is the node's address; kubeletPort the kubelet's port on it.
	nodeIP      net.IP
	kubeletPort int
	// dnsServers are host:port of the nameservers; dnsName a name they answer.
	dnsServers []string
	dnsName    string
}

// readTargets reads the probe targets from the runner's environment and resolv.conf.
func readTargets(cfg wallConfig) (probeTargets, error) {
	env := map[string]string{}
	for _, kv := range cfg.environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	t := probeTargets{kubeletPort: DefaultKubeletPort, dnsName: defaultProbeName}
	if host, port := env[apiServerHostEnv], env[apiServerPortEnv]; host != "" && port != "" {
		t.apiServer = net.JoinHostPort(host, port)
	}
	if v := env[protocol.NodeIPEnv]; v != "" {
		if t.nodeIP = net.ParseIP(v); t.nodeIP == nil {
			return t, fmt.Errorf("%s %q is not an IP address", protocol.NodeIPEnv, v)
		}
	}
	if v := env[protocol.KubeletPortEnv]; v != "" {
		port, err := strconv.Atoi(v)
		if err != nil || port < 1 || port > 65535 {
			return t, fmt.Errorf("%s %q is not a port", protocol.KubeletPortEnv, v)
		}
		t.kubeletPort = port
	}
	resolv, err := os.ReadFile(cfg.resolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return t, fmt.Errorf("reading %s: %v", cfg.resolvConf, err)
	}
	var servers []string
	servers, t.dnsName = parseResolvConf(resolv)
	for _, s := range servers {
		t.dnsServers = append(t.dnsServers, net.JoinHostPort(s, "53"))
	}
	if v := env[protocol.DNSServerEnv]; v != "" {
		t.dnsServers = []string{v}
	}
	return t, nil
}

// parseResolvConf returns the nameservers of a resolv.conf and the name a DNS
// probe asks for: its first search domain, which in a pod is the cluster DNS's
// own zone (NAMESPACE.svc.CLUSTER-DOMAIN), so that the server answers it without
// asking further.
func parseResolvConf(data []byte) (servers []string, name string) {
	name = defaultProbeName
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if net.ParseIP(strings.SplitN(fields[1], "%", 2)[0]) != nil {
				servers = append(servers, fields[1])
			}
		case "search", "domain":
			name = strings.TrimSuffix(fields[1], ".")
		}
	}
	return servers, name
}

// probe kinds.
const (
	probeTCP = "tcp"
	probeDNS = "dns"
)

// target is one probe: a destination the call's walls must keep it from.
type target struct {
	kind string // probeTCP or probeDNS
	what string // what it is, for the refusal: "the API server"
	addr string // host:port
	name string // the name a DNS probe asks for
}

// planProbes is what must be tried to prove the network wall: nothing may be
// reached. With mode None that is the API server, the node's kubelet and the DNS
// server. With AllowList only what the list cannot allow:
//
//   - the node's kubelet, unless an egress rule allows its address and port;
//   - the API server's Service only when the list has no egress rule at all: a
//     connection to a Service is translated to one of its endpoints before the
//     NetworkPolicy sees it, and the runner cannot know whether a rule allows the
//     API server's endpoints (the node's address, or one outside the cluster);
//   - the DNS server unless clusterDNS allows it or a rule allows every port: the
//     rules' ports are TCP ports, so only a rule without ports lets UDP through,
//     and it may be the one that covers the DNS pods' addresses.
//
// A list that allows all of these (clusterDNS, a rule without ports over the
// node's address) leaves nothing to try: the runner cannot then tell a cluster
// that enforces the list from one that enforces nothing, and the call runs on the
// NetworkPolicy alone. It fails when a target it needs is not given.
func planProbes(network v1alpha1.NetworkSpec, t probeTargets) ([]target, error) {
	var rules []egressRule
	switch network.Mode {
	case "", v1alpha1.NetworkNone:
	case v1alpha1.NetworkAllowList:
		var err error
		if rules, err = parseEgress(network.Egress); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("network mode %q is not None or AllowList", network.Mode)
	}
	allowList := network.Mode == v1alpha1.NetworkAllowList
	var plan []target
	if !allowList || len(rules) == 0 {
		if t.apiServer == "" {
			return nil, fmt.Errorf("the runner's environment has no %s and %s (the kubelet sets them in every container), so it cannot try the API server", apiServerHostEnv, apiServerPortEnv)
		}
		plan = append(plan, target{kind: probeTCP, what: "the API server", addr: t.apiServer})
	}
	if t.nodeIP == nil {
		return nil, fmt.Errorf("the runner's environment has no %s (the pod spec sets it from status.hostIP), so it cannot try the node's kubelet", protocol.NodeIPEnv)
	}
	if !allowsTCP(rules, t.nodeIP, t.kubeletPort) {
		plan = append(plan, target{kind: probeTCP, what: "the node's kubelet", addr: net.JoinHostPort(t.nodeIP.String(), strconv.Itoa(t.kubeletPort))})
	}
	if !network.ClusterDNS && !slices.ContainsFunc(rules, func(r egressRule) bool { return len(r.ports) == 0 }) {
		if len(t.dnsServers) == 0 {
			return nil, fmt.Errorf("%s names no nameserver, so the runner cannot try DNS", resolvConfPath)
		}
		for _, s := range t.dnsServers {
			plan = append(plan, target{kind: probeDNS, what: "the DNS server", addr: s, name: t.dnsName})
		}
	}
	return plan, nil
}

// egressRule is a parsed v1alpha1.EgressRule.
type egressRule struct {
	block *net.IPNet
	ports []int32
}

func parseEgress(egress []v1alpha1.EgressRule) ([]egressRule, error) {
	rules := make([]egressRule, 0, len(egress))
	for i, e := range egress {
		_, block, err := net.ParseCIDR(e.CIDR)
		if err != nil {
			return nil, fmt.Errorf("egress[%d].cidr %q is not a CIDR block: %v", i, e.CIDR, err)
		}
		rules = append(rules, egressRule{block: block, ports: e.Ports})
	}
	return rules, nil
}

// allowsTCP reports whether a rule allows TCP to ip:port.
func allowsTCP(rules []egressRule, ip net.IP, port int) bool {
	for _, r := range rules {
		if r.block.Contains(ip) && (len(r.ports) == 0 || slices.Contains(r.ports, int32(port))) {
			return true
		}
	}
	return false
}

// waitForFence probes the plan until nothing is reached, for up to cfg.wait, and
// returns the Exception naming what was reached when that does not happen.
func waitForFence(ctx context.Context, cfg wallConfig, network v1alpha1.NetworkSpec, plan []target) error {
	if len(plan) == 0 {
		return nil
	}
	start := time.Now()
	pause := 50 * time.Millisecond
	for {
		open := probeAll(ctx, plan, cfg.timeout)
		if ctx.Err() != nil {
			return exceptionf("not run: the call was stopped while the runner proved its walls: %s", stopCause(ctx))
		}
		if len(open) == 0 {
			return nil
		}
		waited := time.Since(start)
		if waited+pause > cfg.wait {
			though := "though this call has no network"
			if network.Mode == v1alpha1.NetworkAllowList {
				though = "though this call's egress list does not allow it"
			}
			return wallBroken(WallNetwork, "%s, %s (the cluster's NetworkPolicy enforcement is off, or not yet applied to this pod: the runner tried for %s)",
				strings.Join(open, "; "), though, waited.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// probeAll runs the probes in parallel and says, in plan order, what was reached
// (or could not be tried).
func probeAll(ctx context.Context, plan []target, timeout time.Duration) []string {
	found := make([]string, len(plan))
	var wg sync.WaitGroup
	for i, t := range plan {
		wg.Go(func() { found[i] = probe(ctx, t, timeout) })
	}
	wg.Wait()
	return slices.DeleteFunc(found, func(s string) bool { return s == "" })
}

// probe tries one target: "" when the wall kept the call from it, else what
// happened.
func probe(ctx context.Context, t target, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reached bool
	var err error
	switch t.kind {
	case probeTCP:
		reached, err = probeTCPConnect(ctx, t.addr)
	default:
		reached, err = probeDNSQuery(ctx, t.addr, t.name)
	}
	switch {
	case reached && t.kind == probeTCP:
		return fmt.Sprintf("a TCP connection to %s at %s succeeded", t.what, t.addr)
	case reached:
		return fmt.Sprintf("%s at %s answered a DNS query", t.what, t.addr)
	case err != nil && !fenced(err):
		return fmt.Sprintf("trying %s at %s failed in a way that shows no wall (%v)", t.what, t.addr, err)
	}
	return ""
}

// fenced reports whether err is what a wall does to a connection: refuse it (an
// ICMP unreachable, a TCP reset), drop it (no answer in time), or block it locally.
func fenced(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func probeTCPConnect(ctx context.Context, addr string) (bool, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	_ = conn.Close()
	return true, nil
}

// probeDNSQuery sends one query over UDP and reports whether anything answered.
func probeDNSQuery(ctx context.Context, addr, name string) (bool, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	var id [2]byte
	_, _ = rand.Read(id[:])
	if _, err := conn.Write(dnsQuery(binary.BigEndian.Uint16(id[:]), name)); err != nil {
		return false, err
	}
	buf := make([]byte, 512)
	if _, err := conn.Read(buf); err != nil {
		return false, err
	}
	return true, nil
}

// dnsQuery is a DNS query (RFC 1035) for the A record of name, recursion desired.
func dnsQuery(id uint16, name string) []byte {
	msg := binary.BigEndian.AppendUint16(nil, id)
	msg = append(msg, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for label := range strings.SplitSeq(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 {
			continue
		}
		msg = append(msg, byte(len(label)))
		msg = append(msg, label...)
	}
	return append(msg, 0, 0, 1, 0, 1) // root; type A, class IN
}

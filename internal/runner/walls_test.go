package runner

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/protocol"
)

func TestPlanProbes(t *testing.T) {
	all := probeTargets{
		apiServer: "10.96.0.1:443", nodeIP: net.ParseIP("172.18.0.2"), kubeletPort: DefaultKubeletPort,
		dnsServers: []string{"10.96.0.10:53"}, dnsName: "ns.svc.cluster.local",
	}
	api := "tcp the API server 10.96.0.1:443"
	node := "tcp the node's kubelet 172.18.0.2:10250"
	dns := "dns the DNS server 10.96.0.10:53"
	allow := func(dnsToo bool, rules ...v1alpha1.EgressRule) v1alpha1.NetworkSpec {
		return v1alpha1.NetworkSpec{Mode: v1alpha1.NetworkAllowList, Egress: rules, ClusterDNS: dnsToo}
	}
	for _, tc := range []struct {
		name    string
		network v1alpha1.NetworkSpec
		targets func(*probeTargets)
		want    []string
		err     string
	}{
		{name: "no network: everything", network: v1alpha1.NetworkSpec{}, want: []string{api, node, dns}},
		{name: "mode None: everything", network: v1alpha1.NetworkSpec{Mode: v1alpha1.NetworkNone}, want: []string{api, node, dns}},
		{name: "allow-list with no rule is no network", network: allow(false), want: []string{api, node, dns}},
		{name: "cluster DNS only: no DNS probe", network: allow(true), want: []string{api, node}},
		{name: "a rule: no API server probe (its endpoints are unknown)", network: allow(false, v1alpha1.EgressRule{CIDR: "10.0.0.0/8", Ports: []int32{443}}), want: []string{node, dns}},
		{name: "a rule over the node on another port", network: allow(false, v1alpha1.EgressRule{CIDR: "172.18.0.0/16", Ports: []int32{443}}), want: []string{node, dns}},
		{name: "a rule over the node on the kubelet's port", network: allow(false, v1alpha1.EgressRule{CIDR: "172.18.0.0/16", Ports: []int32{10250}}), want: []string{dns}},
		{name: "a rule without ports lets UDP through: no DNS probe", network: allow(false, v1alpha1.EgressRule{CIDR: "192.0.2.0/24"}), want: []string{node}},
		{name: "nothing left to try", network: allow(true, v1alpha1.EgressRule{CIDR: "0.0.0.0/0"}), want: nil},
		{name: "IPv6 node", network: allow(false, v1alpha1.EgressRule{CIDR: "fd00::/8", Ports: []int32{10250}}),
			targets: func(t *probeTargets) { t.nodeIP = net.ParseIP("fd00::2") }, want: []string{dns}},
		{name: "no API server address", network: v1alpha1.NetworkSpec{}, targets: func(t *probeTargets) { t.apiServer = "" }, err: "no KUBERNETES_SERVICE_HOST"},
		{name: "no API server address needed", network: allow(false, v1alpha1.EgressRule{CIDR: "10.0.0.0/8", Ports: []int32{443}}),
			targets: func(t *probeTargets) { t.apiServer = "" }, want: []string{node, dns}},
		{name: "no node address", network: allow(true, v1alpha1.EgressRule{CIDR: "0.0.0.0/0"}), targets: func(t *probeTargets) { t.nodeIP = nil }, err: "no TOOLGATE_NODE_IP"},
		{name: "no nameserver", network: v1alpha1.NetworkSpec{}, targets: func(t *probeTargets) { t.dnsServers = nil }, err: "names no nameserver"},
		{name: "a bad CIDR", network: allow(false, v1alpha1.EgressRule{CIDR: "10.0.0.0"}), err: `egress[0].cidr "10.0.0.0" is not a CIDR block`},
		{name: "an unknown mode", network: v1alpha1.NetworkSpec{Mode: "Open"}, err: `network mode "Open" is not None or AllowList`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			targets := all
			if tc.targets != nil {
				tc.targets(&targets)
			}
			plan, err := planProbes(tc.network, targets)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range plan {
				got = append(got, p.kind+" "+p.what+" "+p.addr)
				if p.kind == probeDNS && p.name != "ns.svc.cluster.local" {
					t.Errorf("DNS probe asks for %q", p.name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	servers, name := parseResolvConf([]byte("# a pod's\nsearch team-a.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\nnameserver not-an-ip\noptions ndots:5\n"))
	if !slices.Equal(servers, []string{"10.96.0.10", "fe80::1%eth0"}) || name != "team-a.svc.cluster.local" {
		t.Errorf("servers %q, name %q", servers, name)
	}
	if servers, name := parseResolvConf(nil); servers != nil || name != defaultProbeName {
		t.Errorf("empty: servers %q, name %q", servers, name)
	}
}

func TestReadTargets(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.96.0.10\nsearch ns.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := wallConfig{resolvConf: resolv, environ: []string{"KUBERNETES_SERVICE_HOST=fd00::1", "KUBERNETES_SERVICE_PORT=443", protocol.NodeIPEnv + "=172.18.0.2", "PATH=/bin"}}
	got, err := readTargets(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.apiServer != "[fd00::1]:443" || !got.nodeIP.Equal(net.ParseIP("172.18.0.2")) || got.kubeletPort != DefaultKubeletPort ||
		!slices.Equal(got.dnsServers, []string{"10.96.0.10:53"}) || got.dnsName != "ns.svc.cluster.local" {
		t.Errorf("targets %+v", got)
	}
	cfg.environ = append(cfg.environ, protocol.KubeletPortEnv+"=8443", protocol.DNSServerEnv+"=127.0.0.1:5353")
	if got, err = readTargets(cfg); err != nil || got.kubeletPort != 8443 || !slices.Equal(got.dnsServers, []string{"127.0.0.1:5353"}) {
		t.Errorf("overridden targets %+v (%v)", got, err)
	}
	for _, bad := range []string{protocol.NodeIPEnv + "=node-1", protocol.KubeletPortEnv + "=0"} {
		if _, err := readTargets(wallConfig{resolvConf: resolv, environ: []string{bad}}); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
}

func TestDNSQuery(t *testing.T) {
	got := dnsQuery(0xbeef, "ns.svc.")
	want := []byte{0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 2, 'n', 's', 3, 's', 'v', 'c', 0, 0, 1, 0, 1}
	if !slices.Equal(got, want) {
		t.Errorf("query %x, want %x", got, want)
	}
}

// A call stopped while the runner waits for its fence says so, not that a wall is
// open.
func TestWaitForFenceStopped(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = waitForFence(ctx, wallConfig{wait: WallWait, timeout: ProbeTimeout}, v1alpha1.NetworkSpec{},
		[]target{{kind: probeTCP, what: "the API server", addr: l.Addr().String()}})
	if err == nil || !strings.Contains(err.Error(), "not run: the call was stopped while the runner proved its walls") {
		t.Errorf("error %v", err)
	}
}

// A probe that fails in a way no wall makes (here an address no socket takes) is
// no proof that the wall holds: the call is refused, saying what happened.
func TestWaitForFenceRefusesAProbeThatShowsNoWall(t *testing.T) {
	plan := []target{{kind: probeDNS, what: "the DNS server", addr: "127.0.0.1:70000", name: defaultProbeName}}
	err := waitForFence(context.Background(), wallConfig{wait: 200 * time.Millisecond, timeout: ProbeTimeout}, v1alpha1.NetworkSpec{}, plan)
	if err == nil || !strings.Contains(err.Error(), "not run: the network wall does not hold: trying the DNS server at 127.0.0.1:70000 failed in a way that shows no wall") {
		t.Errorf("error %v", err)
	}
}

// BenchmarkProveWalls is the cost of the check in the common case, every wall
// holding, for a bash call with no network: three probes in parallel.
//   - refused: the targets answer with a refusal (an ICMP unreachable or a reset),
//     as kube-router's firewall does;
//   - dropped: nothing answers (a wall that drops packets), so each probe lasts
//     ProbeTimeout.
func BenchmarkProveWalls(b *testing.B) {
	ws, err := OpenWorkspace(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ws.Close() }()
	inv := protocol.Invocation{Tool: string(v1alpha1.ToolBash)}
	for _, bc := range []struct {
		name    string
		environ []string
	}{
		{"refused", []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", protocol.NodeIPEnv + "=127.0.0.1", protocol.KubeletPortEnv + "=1", protocol.DNSServerEnv + "=127.0.0.1:1"}},
		{"dropped", []string{"KUBERNETES_SERVICE_HOST=100::1", "KUBERNETES_SERVICE_PORT=443", protocol.NodeIPEnv + "=100::1", protocol.DNSServerEnv + "=[100::1]:53"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := Config{Environ: bc.environ}.walls()
			for b.Loop() {
				if err := proveWalls(context.Background(), cfg, inv, ws); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ProbeTimeoutEnv may only lengthen a probe: a shorter one would let a slow answer
// through an open wall be taken for a wall that holds.
func TestProbeTimeoutEnvOnlyLengthens(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"1ms": ProbeTimeout, "-5s": ProbeTimeout, "soon": ProbeTimeout, "5s": 5 * time.Second,
	} {
		if got := (Config{Environ: []string{ProbeTimeoutEnv + "=" + v}}).walls().timeout; got != want {
			t.Errorf("%s=%s: probe timeout %s, want %s", ProbeTimeoutEnv, v, got, want)
		}
	}
}

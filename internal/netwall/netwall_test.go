package netwall

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
)

// policy builds a NetworkPolicy for the tests.
type policy struct{ np networkingv1.NetworkPolicy }

func np(name string) *policy {
	return &policy{np: networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}}
}

func (p *policy) selects(s metav1.LabelSelector) *policy { p.np.Spec.PodSelector = s; return p }

func (p *policy) types(t ...networkingv1.PolicyType) *policy { p.np.Spec.PolicyTypes = t; return p }

func (p *policy) egress(rules ...networkingv1.NetworkPolicyEgressRule) *policy {
	p.np.Spec.Egress = append(p.np.Spec.Egress, rules...)
	return p
}

func (p *policy) ingress(rules ...networkingv1.NetworkPolicyIngressRule) *policy {
	p.np.Spec.Ingress = append(p.np.Spec.Ingress, rules...)
	return p
}

func (p *policy) obj() networkingv1.NetworkPolicy { return p.np }

func to(peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{To: peers}
}

func on(rule networkingv1.NetworkPolicyEgressRule, ports ...networkingv1.NetworkPolicyPort) networkingv1.NetworkPolicyEgressRule {
	rule.Ports = ports
	return rule
}

func block(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func port(proto corev1.Protocol, n int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(n))}
}

func portRangeOf(n, end int32) networkingv1.NetworkPolicyPort {
	p := port(corev1.ProtocolTCP, n)
	p.EndPort = ptr.To(end)
	return p
}

func named(name string) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromString(name))}
}

func matchLabels(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

var (
	everyPod    = metav1.LabelSelector{}
	egressOnly  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	bothTypes   = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	ingressOnly = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	allowAll    = networkingv1.NetworkPolicyEgressRule{}
	dnsAnywhere = on(allowAll, port(corev1.ProtocolUDP, 53), port(corev1.ProtocolTCP, 53))
	kubeDNS     = networkingv1.NetworkPolicyPeer{
		NamespaceSelector: matchLabels(corev1.LabelMetadataName, metav1.NamespaceSystem),
		PodSelector:       matchLabels("k8s-app", "kube-dns"),
	}
	notToolgate = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1.LabelNetwork, Operator: metav1.LabelSelectorOpDoesNotExist}}}
)

// ownPolicy is toolgate's own policy for walls, as the controller makes it.
func ownPolicy(t *testing.T, walls v1.NetworkSpec) *networkingv1.NetworkPolicy {
	t.Helper()
	own, err := executor.BuildProfileNetworkPolicy("ns", v1.SandboxProfile{Network: walls})
	if err != nil {
		t.Fatal(err)
	}
	return own
}

// podOf is the labels of a Job's pod behind walls.
func podOf(walls v1.NetworkSpec) map[string]string {
	return executor.Labels(&v1.Execution{
		ObjectMeta: metav1.ObjectMeta{Name: "t-t0-0", Namespace: "ns"},
		Spec: v1.ExecutionSpec{
			TaskRef: v1.LocalObjectReference{Name: "t"}, IntentRef: v1.LocalObjectReference{Name: "t-t0-0"},
			Sandbox: v1.SandboxProfile{Network: walls},
		},
	})
}

func TestBreaches(t *testing.T) {
	none := v1.NetworkSpec{Mode: v1.NetworkNone}
	allowList := v1.NetworkSpec{Mode: v1.NetworkAllowList, ClusterDNS: true, Egress: []v1.EgressRule{
		{CIDR: "10.0.0.0/8", Ports: []int32{443, 80}},
		{CIDR: "192.168.1.0/24"},
	}}
	noDNS := v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443}}}}
	otherWalls := v1.NetworkSpec{Mode: v1.NetworkAllowList, Egress: []v1.EgressRule{{CIDR: "0.0.0.0/0"}}}

	cases := []struct {
		name     string
		walls    v1.NetworkSpec
		policies []networkingv1.NetworkPolicy
		want     []string // the policies in the way
		why      string   // in the first one's why
	}{
		{
			name:     "allow-all egress baseline opens no network",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("allow-egress").selects(everyPod).types(egressOnly...).egress(allowAll).obj()},
			want:     []string{"allow-egress"},
			why:      "its podSelector {} selects every pod, and its egress rule 1 allows traffic to anywhere on every port",
		},
		{
			name:     "DNS for every pod opens no network",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("allow-dns").selects(everyPod).types(egressOnly...).egress(dnsAnywhere).obj()},
			want:     []string{"allow-dns"},
			why:      "egress rule 1 allows traffic to anywhere on UDP/53, TCP/53",
		},
		{
			name:     "DNS anywhere is wider than the cluster's DNS",
			walls:    allowList,
			policies: []networkingv1.NetworkPolicy{np("allow-dns").selects(everyPod).types(egressOnly...).egress(dnsAnywhere).obj()},
			want:     []string{"allow-dns"},
		},
		{
			name:  "deny-all isolates only",
			walls: none,
			policies: []networkingv1.NetworkPolicy{
				np("deny-all").selects(everyPod).types(bothTypes...).obj(),
				np("deny-egress").selects(everyPod).types(egressOnly...).obj(),
			},
		},
		{
			name:     "a baseline that excludes toolgate's pods (DoesNotExist)",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("allow-egress").selects(notToolgate).types(egressOnly...).egress(allowAll).obj()},
		},
		{
			name:  "matchLabels and matchExpressions that miss the pod",
			walls: none,
			policies: []networkingv1.NetworkPolicy{
				np("web").selects(*matchLabels("app", "web")).types(egressOnly...).egress(allowAll).obj(),
				np("in").selects(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1.LabelTask, Operator: metav1.LabelSelectorOpIn, Values: []string{"other"}}}}).types(egressOnly...).egress(allowAll).obj(),
			},
		},
		{
			name:  "matchExpressions that hit the pod",
			walls: none,
			policies: []networkingv1.NetworkPolicy{
				np("notin").selects(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1.LabelTask, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"other"}}}}).types(egressOnly...).egress(allowAll).obj(),
				np("exists").selects(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1.LabelNetwork, Operator: metav1.LabelSelectorOpExists}}}).types(egressOnly...).egress(allowAll).obj(),
			},
			want: []string{"exists", "notin"},
			why:  "its podSelector toolgate.dev/network selects the pod",
		},
		{
			name:  "a selector that cannot be read selects the pod",
			walls: none,
			policies: []networkingv1.NetworkPolicy{
				np("bogus").selects(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}).types(egressOnly...).egress(allowAll).obj(),
			},
			want: []string{"bogus"},
			why:  "cannot be read",
		},
		{
			name:     "egress rules of a policy of type Ingress only are not enforced",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("ingress-only").selects(everyPod).types(ingressOnly...).egress(allowAll).obj()},
		},
		{
			name:     "no policy types and egress rules: egress is governed",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("untyped").selects(everyPod).egress(allowAll).obj()},
			want:     []string{"untyped"},
		},
		{
			name:     "no policy types and no rules: ingress isolated only",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("untyped").selects(everyPod).obj()},
		},
		{
			name:     "no policy types and an ingress rule",
			walls:    none,
			policies: []networkingv1.NetworkPolicy{np("untyped").selects(everyPod).ingress(networkingv1.NetworkPolicyIngressRule{}).obj()},
			want:     []string{"untyped"},
			why:      "its ingress rule 1 lets anyone connect to the pod on every port",
		},
		{
			name:  "ingress from a namespaceSelector-only peer",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{np("from-monitoring").selects(everyPod).types(ingressOnly...).ingress(networkingv1.NetworkPolicyIngressRule{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: matchLabels("team", "monitoring")}},
				Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, 9090)},
			}).obj()},
			want: []string{"from-monitoring"},
			why:  "its ingress rule 1 lets every pod of namespaces team=monitoring connect to the pod on TCP/9090",
		},
		{
			name:  "egress to a namespaceSelector-only peer",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{np("to-team").selects(everyPod).types(egressOnly...).egress(
				to(networkingv1.NetworkPolicyPeer{NamespaceSelector: matchLabels("team", "x")}),
			).obj()},
			want: []string{"to-team"},
			why:  "allows traffic to every pod of namespaces team=x on every port",
		},
		{
			name:  "egress to pods of this namespace",
			walls: none,
			policies: []networkingv1.NetworkPolicy{np("to-db").selects(everyPod).types(egressOnly...).egress(
				on(to(networkingv1.NetworkPolicyPeer{PodSelector: matchLabels("app", "db")}), port(corev1.ProtocolTCP, 5432)),
			).obj()},
			want: []string{"to-db"},
			why:  "allows traffic to pods app=db of this namespace on TCP/5432",
		},
		{
			name:  "an ipBlock and port inside the allow-list",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("inside").selects(everyPod).types(egressOnly...).egress(
					on(to(block("10.1.0.0/16")), port(corev1.ProtocolTCP, 443)),
					on(to(block("10.2.3.4/32"), block("10.9.0.0/16", "10.9.1.0/24")), port(corev1.ProtocolTCP, 80), port(corev1.ProtocolTCP, 443)),
					to(block("192.168.1.128/25")),
					on(to(block("192.168.1.7/32")), portRangeOf(8000, 8080)),
				).obj(),
			},
		},
		{
			name:  "a port the allow-list does not list",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("ssh").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/16")), port(corev1.ProtocolTCP, 22))).obj(),
			},
			want: []string{"ssh"},
			why:  "allows traffic to ipBlock 10.1.0.0/16 on TCP/22",
		},
		{
			name:  "every port of a block the allow-list limits to some",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("all-ports").selects(everyPod).types(egressOnly...).egress(to(block("10.1.0.0/16"))).obj(),
			},
			want: []string{"all-ports"},
		},
		{
			name:  "UDP on a listed TCP port",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("udp").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/16")), port(corev1.ProtocolUDP, 443))).obj(),
			},
			want: []string{"udp"},
		},
		{
			name:  "a port range the allow-list does not cover in one rule",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("range").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/16")), portRangeOf(80, 443))).obj(),
			},
			want: []string{"range"},
			why:  "TCP/80-443",
		},
		{
			name:  "a named port",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("named").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/16")), named("https"))).obj(),
			},
			want: []string{"named"},
		},
		{
			name:  "a block wider than the allow-list's",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("wider").selects(everyPod).types(egressOnly...).egress(to(block("192.168.0.0/16"))).obj(),
				np("internet").selects(everyPod).types(egressOnly...).egress(on(to(block("0.0.0.0/0")), port(corev1.ProtocolTCP, 443))).obj(),
				np("v6").selects(everyPod).types(egressOnly...).egress(on(to(block("::/0")), port(corev1.ProtocolTCP, 443))).obj(),
				np("bad-cidr").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/99")), port(corev1.ProtocolTCP, 443))).obj(),
			},
			want: []string{"bad-cidr", "internet", "v6", "wider"},
		},
		{
			name:  "one peer of a rule outside the allow-list",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("mixed").selects(everyPod).types(egressOnly...).egress(on(to(block("10.1.0.0/16"), block("8.8.8.8/32")), port(corev1.ProtocolTCP, 443))).obj(),
			},
			want: []string{"mixed"},
		},
		{
			name:  "the cluster's DNS, allowed by clusterDNS",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("dns").selects(everyPod).types(egressOnly...).egress(on(to(kubeDNS), port(corev1.ProtocolUDP, 53))).obj(),
				np("dns-narrower").selects(everyPod).types(egressOnly...).egress(on(to(networkingv1.NetworkPolicyPeer{
					NamespaceSelector: matchLabels(corev1.LabelMetadataName, metav1.NamespaceSystem),
					PodSelector:       matchLabels("k8s-app", "kube-dns", "zone", "a"),
				}), port(corev1.ProtocolTCP, 53))).obj(),
			},
		},
		{
			name:  "DNS pods of this namespace are not the cluster's",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				np("dns-here").selects(everyPod).types(egressOnly...).egress(on(to(networkingv1.NetworkPolicyPeer{PodSelector: matchLabels("k8s-app", "kube-dns")}), port(corev1.ProtocolUDP, 53))).obj(),
				np("dns-wider").selects(everyPod).types(egressOnly...).egress(on(to(networkingv1.NetworkPolicyPeer{
					NamespaceSelector: matchLabels(corev1.LabelMetadataName, metav1.NamespaceSystem),
				}), port(corev1.ProtocolUDP, 53))).obj(),
				np("dns-other-port").selects(everyPod).types(egressOnly...).egress(on(to(kubeDNS), port(corev1.ProtocolTCP, 8080))).obj(),
			},
			want: []string{"dns-here", "dns-other-port", "dns-wider"},
		},
		{
			name:  "the cluster's DNS without clusterDNS",
			walls: noDNS,
			policies: []networkingv1.NetworkPolicy{
				np("dns").selects(everyPod).types(egressOnly...).egress(on(to(kubeDNS), port(corev1.ProtocolUDP, 53))).obj(),
			},
			want: []string{"dns"},
		},
		{
			name:  "toolgate's own policies",
			walls: allowList,
			policies: []networkingv1.NetworkPolicy{
				*ownPolicy(t, allowList),
				*ownPolicy(t, none),       // selects the pods of other walls only
				*ownPolicy(t, otherWalls), // the same
			},
		},
		{
			name:  "a policy under toolgate's name that is not its spec",
			walls: none,
			policies: func() []networkingv1.NetworkPolicy {
				p := ownPolicy(t, none)
				p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{allowAll}
				return []networkingv1.NetworkPolicy{*p}
			}(),
			want: []string{ownPolicy(t, none).Name},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Breaches(podOf(tc.walls), ownPolicy(t, tc.walls), tc.policies)
			var names []string
			for _, b := range got {
				names = append(names, b.Policy)
				if b.Why == "" || strings.Contains(b.Why, "\n") {
					t.Errorf("%s: why %q is not one line", b.Policy, b.Why)
				}
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Fatalf("policies in the way (-want +got):\n%s\n%+v", diff, got)
			}
			if tc.why != "" && !strings.Contains(got[0].Why, tc.why) {
				t.Errorf("why %q does not say %q", got[0].Why, tc.why)
			}
		})
	}
}

// Every rule toolgate itself makes for some walls lies inside those walls: a
// policy that copies them under another name opens nothing.
func TestOwnRulesStayInside(t *testing.T) {
	for _, walls := range []v1.NetworkSpec{
		{Mode: v1.NetworkNone},
		{Mode: v1.NetworkAllowList, ClusterDNS: true, Egress: []v1.EgressRule{{CIDR: "10.0.0.0/8", Ports: []int32{443, 80}}, {CIDR: "2001:db8::/32"}}},
	} {
		own, err := executor.BuildProfileNetworkPolicy("ns", v1.SandboxProfile{Network: walls})
		if err != nil {
			t.Fatal(err)
		}
		copied := own.DeepCopy()
		copied.Name = "copy"
		if got := Breaches(podOf(walls), own, []networkingv1.NetworkPolicy{*copied}); len(got) != 0 {
			t.Errorf("walls %+v: a copy of toolgate's own policy is in the way: %+v", walls, got)
		}
	}
}

// Package netwall decides whether a sandbox pod's network walls hold against the
// other NetworkPolicies of its namespace.
//
// toolgate fences every sandbox pod with a NetworkPolicy of its own
// (executor.BuildProfileNetworkPolicy): no ingress, and only the egress of the
// pod's walls. But NetworkPolicies add up: a pod may send and receive whatever any
// policy that selects it allows. A namespace's "allow all egress" or "allow DNS
// for every pod" baseline selects toolgate's pods too, and opens a channel out of a
// call that was to have no network. Breaches finds such policies.
//
// The decision is pure: it takes the pod's labels and the policies and reads
// nothing. Where it cannot prove that a rule stays inside the walls (a selector it
// cannot read, a named port, a peer it cannot compare), the rule counts as opening
// them: it fails closed.
package netwall

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Breach is a NetworkPolicy that opens a pod's walls.
type Breach struct {
	// Policy is the NetworkPolicy's name.
	Policy string
	// Why says in one line how it selects the pod and what it allows beyond the
	// walls.
	Why string
}

// Breaches returns the NetworkPolicies among policies (those of the pod's
// namespace) that select a pod labelled podLabels and allow it traffic its walls do
// not, by name. own is toolgate's NetworkPolicy for the pod's walls, as
// executor.BuildProfileNetworkPolicy builds it: its egress rules are all the walls
// allow, and they allow no ingress. A policy of own's name and spec is the pod's
// fence, not a breach.
//
// Kubernetes' rules: a policy applies to the pods its podSelector matches (an empty
// selector matches every pod). It governs egress when its policyTypes include
// Egress, or name no type and it has egress rules; ingress when its policyTypes
// include Ingress or name no type. A governed direction with no rules only isolates
// the pod, which opens nothing. An egress rule allows traffic to any of its peers
// (every destination when it has none) on any of its ports (every port when it has
// none); it opens the walls unless each of its peers and ports lies inside one of
// own's egress rules. Any ingress rule opens them.
func Breaches(podLabels map[string]string, own *networkingv1.NetworkPolicy, policies []networkingv1.NetworkPolicy) []Breach {
	var out []Breach
	for i := range policies {
		p := &policies[i]
		if p.Name == own.Name && equality.Semantic.DeepEqual(p.Spec, own.Spec) {
			continue
		}
		selection, selects := selectsPod(&p.Spec.PodSelector, podLabels)
		if !selects {
			continue
		}
		var opens []string
		if governs(&p.Spec, networkingv1.PolicyTypeEgress) {
			for j, rule := range p.Spec.Egress {
				if !egressWithin(rule, own.Spec.Egress) {
					opens = append(opens, fmt.Sprintf("its egress rule %d allows traffic to %s on %s", j+1, peersText(rule.To, "anywhere"), portsText(rule.Ports)))
				}
			}
		}
		if governs(&p.Spec, networkingv1.PolicyTypeIngress) {
			for j, rule := range p.Spec.Ingress {
				opens = append(opens, fmt.Sprintf("its ingress rule %d lets %s connect to the pod on %s", j+1, peersText(rule.From, "anyone"), portsText(rule.Ports)))
			}
		}
		if len(opens) > 0 {
			out = append(out, Breach{Policy: p.Name, Why: selection + ", and " + strings.Join(opens, "; ")})
		}
	}
	slices.SortFunc(out, func(a, b Breach) int { return strings.Compare(a.Policy, b.Policy) })
	return out
}

// selectsPod says whether a policy's podSelector selects the pod, and how, in
// words. A selector that cannot be read is taken to select it.
func selectsPod(selector *metav1.LabelSelector, podLabels map[string]string) (string, bool) {
	s, err := metav1.LabelSelectorAsSelector(selector)
	switch {
	case err != nil:
		return fmt.Sprintf("its podSelector cannot be read (%v), so it is taken to select the pod", err), true
	case s.Empty():
		return "its podSelector {} selects every pod", true
	case s.Matches(labels.Set(podLabels)):
		return fmt.Sprintf("its podSelector %s selects the pod", s), true
	}
	return "", false
}

// governs says whether the policy governs the direction typ.
func governs(spec *networkingv1.NetworkPolicySpec, typ networkingv1.PolicyType) bool {
	if len(spec.PolicyTypes) > 0 {
		return slices.Contains(spec.PolicyTypes, typ)
	}
	// The API server fills policyTypes in on create; a spec without them governs
	// ingress, and egress when it has egress rules.
	return typ == networkingv1.PolicyTypeIngress || len(spec.Egress) > 0
}

// egressWithin says whether every destination and port rule allows is allowed by
// one of allowed: each of its peers (anywhere, when it lists none) with each of
// its ports (every port, when it lists none).
func egressWithin(rule networkingv1.NetworkPolicyEgressRule, allowed []networkingv1.NetworkPolicyEgressRule) bool {
	peers := []*networkingv1.NetworkPolicyPeer{nil} // nil: anywhere
	if len(rule.To) > 0 {
		peers = peers[:0]
		for i := range rule.To {
			peers = append(peers, &rule.To[i])
		}
	}
	ports := []*networkingv1.NetworkPolicyPort{nil} // nil: every port
	if len(rule.Ports) > 0 {
		ports = ports[:0]
		for i := range rule.Ports {
			ports = append(ports, &rule.Ports[i])
		}
	}
	for _, peer := range peers {
		for _, port := range ports {
			if !slices.ContainsFunc(allowed, func(a networkingv1.NetworkPolicyEgressRule) bool {
				return peerAllowed(peer, a.To) && portAllowed(port, a.Ports)
			}) {
				return false
			}
		}
	}
	return true
}

// peerAllowed says whether peer (nil: anywhere) lies inside one of to (every
// destination, when to is empty).
func peerAllowed(peer *networkingv1.NetworkPolicyPeer, to []networkingv1.NetworkPolicyPeer) bool {
	if len(to) == 0 {
		return true
	}
	if peer == nil {
		return false
	}
	return slices.ContainsFunc(to, func(a networkingv1.NetworkPolicyPeer) bool { return peerInside(peer, &a) })
}

// peerInside says whether every endpoint peer names is one a names too: an
// ipBlock inside a's (with no exceptions in a's), or pods a's selectors select
// whatever their labels (each of a's selectors holds only requirements peer's has).
func peerInside(peer, a *networkingv1.NetworkPolicyPeer) bool {
	if a.IPBlock != nil {
		return peer.IPBlock != nil && peer.PodSelector == nil && peer.NamespaceSelector == nil &&
			len(a.IPBlock.Except) == 0 && cidrInside(peer.IPBlock.CIDR, a.IPBlock.CIDR)
	}
	if peer.IPBlock != nil {
		return false
	}
	return namespacesInside(peer.NamespaceSelector, a.NamespaceSelector) && podsInside(peer.PodSelector, a.PodSelector)
}

// namespacesInside compares namespaceSelectors: nil is the policy's own namespace
// (the same one for both: they are policies of one namespace).
func namespacesInside(s, a *metav1.LabelSelector) bool {
	switch {
	case a == nil:
		return s == nil
	case s == nil:
		return isEmpty(a) // the policy's namespace is one of every namespace
	}
	return narrower(s, a)
}

// podsInside compares podSelectors: nil is every pod.
func podsInside(s, a *metav1.LabelSelector) bool {
	switch {
	case a == nil:
		return true
	case s == nil:
		return isEmpty(a)
	}
	return narrower(s, a)
}

// narrower says whether s provably selects no more than a: every requirement of a
// is one of s's (s may add more, which only narrow it).
func narrower(s, a *metav1.LabelSelector) bool {
	for k, v := range a.MatchLabels {
		if got, ok := s.MatchLabels[k]; !ok || got != v {
			return false
		}
	}
	for _, req := range a.MatchExpressions {
		if !slices.ContainsFunc(s.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
			return equality.Semantic.DeepEqual(r, req)
		}) {
			return false
		}
	}
	return true
}

func isEmpty(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// cidrInside says whether block lies inside within (same address family, a
// prefix at least as long, and its network inside within's).
func cidrInside(block, within string) bool {
	b, err := netip.ParsePrefix(block)
	if err != nil {
		return false
	}
	w, err := netip.ParsePrefix(within)
	if err != nil {
		return false
	}
	b, w = b.Masked(), w.Masked()
	return b.Addr().Is4() == w.Addr().Is4() && b.Bits() >= w.Bits() && w.Contains(b.Addr())
}

// portAllowed says whether port (nil: every port of every protocol) lies inside
// one of ports (every port, when ports is empty).
func portAllowed(port *networkingv1.NetworkPolicyPort, ports []networkingv1.NetworkPolicyPort) bool {
	if len(ports) == 0 {
		return true
	}
	if port == nil {
		return false
	}
	return slices.ContainsFunc(ports, func(a networkingv1.NetworkPolicyPort) bool { return portInside(port, &a) })
}

// portInside says whether port's protocol is a's and its port or range lies inside
// a's. A named port is inside only the same name: what it resolves to depends on
// the destination pod.
func portInside(port, a *networkingv1.NetworkPolicyPort) bool {
	if protocol(port) != protocol(a) {
		return false
	}
	switch {
	case a.Port == nil:
		return true // every port of the protocol
	case port.Port == nil:
		return false
	case a.Port.Type == intstr.String || port.Port.Type == intstr.String:
		return a.EndPort == nil && port.EndPort == nil && a.Port.Type == port.Port.Type && a.Port.StrVal == port.Port.StrVal
	}
	lo, hi := portRange(port)
	aLo, aHi := portRange(a)
	return aLo <= lo && hi <= aHi
}

// protocol is the port's protocol: TCP when unset.
func protocol(port *networkingv1.NetworkPolicyPort) corev1.Protocol {
	if port.Protocol == nil {
		return corev1.ProtocolTCP
	}
	return *port.Protocol
}

// portRange is a numbered port's first and last port.
func portRange(port *networkingv1.NetworkPolicyPort) (int32, int32) {
	lo := port.Port.IntVal
	if port.EndPort != nil && *port.EndPort > lo {
		return lo, *port.EndPort
	}
	return lo, lo
}

// peersText says what peers name; none is everyone (what).
func peersText(peers []networkingv1.NetworkPolicyPeer, none string) string {
	if len(peers) == 0 {
		return none
	}
	parts := make([]string, 0, len(peers))
	for _, p := range peers {
		parts = append(parts, peerText(p))
	}
	return strings.Join(parts, ", ")
}

func peerText(p networkingv1.NetworkPolicyPeer) string {
	if b := p.IPBlock; b != nil {
		if len(b.Except) > 0 {
			return fmt.Sprintf("ipBlock %s (except %s)", b.CIDR, strings.Join(b.Except, ", "))
		}
		return "ipBlock " + b.CIDR
	}
	pods := "every pod"
	if p.PodSelector != nil && !isEmpty(p.PodSelector) {
		pods = "pods " + metav1.FormatLabelSelector(p.PodSelector)
	}
	switch {
	case p.NamespaceSelector == nil:
		return pods + " of this namespace"
	case isEmpty(p.NamespaceSelector):
		return pods + " of every namespace"
	}
	return pods + " of namespaces " + metav1.FormatLabelSelector(p.NamespaceSelector)
}

// portsText says what ports name; none is every port.
func portsText(ports []networkingv1.NetworkPolicyPort) string {
	if len(ports) == 0 {
		return "every port"
	}
	parts := make([]string, 0, len(ports))
	for i := range ports {
		p := &ports[i]
		switch {
		case p.Port == nil:
			parts = append(parts, fmt.Sprintf("%s (every port)", protocol(p)))
		case p.EndPort != nil:
			parts = append(parts, fmt.Sprintf("%s/%s-%d", protocol(p), p.Port, *p.EndPort))
		default:
			parts = append(parts, fmt.Sprintf("%s/%s", protocol(p), p.Port))
		}
	}
	return strings.Join(parts, ", ")
}

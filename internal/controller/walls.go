package controller

import (
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/netwall"
)

// EventWallsWidened: another NetworkPolicy of the namespace selects the call's pod
// and allows it traffic its network walls deny; the call is not run.
const EventWallsWidened = "WallsWidened"

// wallsWidened refuses to run a call in pod (its description: "session pod x",
// "the pod of Job y"), labelled podLabels, when a NetworkPolicy of its namespace
// other than own (toolgate's fence for the pod's walls) selects the pod and allows
// it more (netwall.Breaches): NetworkPolicies add up, and the pod would get
// whatever any of them allows. The policies are read from the cache, which holds
// every NetworkPolicy (CacheOptions); a change to any of them wakes the calls that
// have not ended (executionsBehind).
func wallsWidened(ctx context.Context, c client.Reader, own *networkingv1.NetworkPolicy, pod string, podLabels map[string]string) (*refusal, error) {
	var policies networkingv1.NetworkPolicyList
	if err := c.List(ctx, &policies, client.InNamespace(own.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the NetworkPolicies of namespace %s: %w", own.Namespace, err)
	}
	breaches := netwall.Breaches(podLabels, own, policies.Items)
	if len(breaches) == 0 {
		return nil, nil
	}
	return &refusal{reason: EventWallsWidened, condition: v1.ReasonWallsWidened, err: wallsWidenedError(own, pod, breaches)}, nil
}

// wallsWidenedError says which policies open the walls of pod (its description),
// how, and what an admin does about it.
func wallsWidenedError(own *networkingv1.NetworkPolicy, pod string, breaches []netwall.Breach) error {
	walls := "no network at all"
	if len(own.Spec.Egress) > 0 {
		walls = "only the egress of its task's allow-list"
	}
	names := make([]string, 0, len(breaches))
	whys := make([]string, 0, len(breaches))
	for _, b := range breaches {
		names = append(names, b.Policy)
		whys = append(whys, b.Policy+": "+b.Why)
	}
	which, opens, it := "NetworkPolicy "+names[0], "opens", "it"
	if len(names) > 1 {
		which, opens, it = "NetworkPolicies "+strings.Join(names, ", "), "open", "each of them"
	}
	return fmt.Errorf("%s in namespace %s %s the network walls of %s (%s): %s. NetworkPolicies add up, and a pod gets whatever any policy that selects it allows. "+
		"Exclude toolgate's sandbox pods from %s (add {key: %s, operator: DoesNotExist} to its spec.podSelector.matchExpressions) or delete %s, then propose the call again",
		which, own.Namespace, opens, pod, walls, strings.Join(whys, "; "), it, v1.LabelNetwork, it)
}

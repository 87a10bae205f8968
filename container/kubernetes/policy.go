package kubernetes

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rtsandbox/rtsandbox/container"
)

// PolicyName is the name of the workers' NetworkPolicy.
const PolicyName = "rtsandbox-workers"

// RoleServe is the container.RoleLabel value of serve's own Pods when
// serve runs in the cluster (deploy/kubernetes' Deployment sets it): the
// broker behind the Service workers dial, which WorkerPolicy admits.
const RoleServe = "serve"

// WorkerPolicy is the NetworkPolicy of every worker Pod of o's
// installation, sealed and session: no ingress at all (the turn arrives by
// attach, through the kubelet, not the Pod network), and egress only to
// the broker over TCP; not even DNS, since the worker is given the
// broker's address, not a name. The broker is allowed as two peers:
// o.Broker's address on its port, and the namespace's RoleServe Pods on
// o.ListenPort. Whether a policy sees a Service's address before or after
// the Service proxy translates it to a Pod's is left undefined by the
// NetworkPolicy API, and the plugins in wide use see it after: with the
// address alone, a worker whose broker is behind a ClusterIP (as
// deploy/kubernetes puts it) would be refused by every plugin that
// enforces the policy. The policy takes effect only where the cluster's
// network plugin enforces policies: the engine cannot see whether it does
// (docs/kubernetes.md).
func WorkerPolicy(o Options) (*networkingv1.NetworkPolicy, error) {
	o, err := o.check()
	if err != nil {
		return nil, err
	}
	addr := o.Broker.Addr()
	tcp := func(port uint16) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(port))
		return []networkingv1.NetworkPolicyPort{{Protocol: new(corev1.ProtocolTCP), Port: &p}}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: o.Namespace,
			Labels: map[string]string{container.InstallationLabel: o.Installation}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: workerSelector(o.Installation),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(addr, addr.BitLen()).String()}}},
				Ports: tcp(o.Broker.Port()),
			}, {
				To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{
					MatchLabels: map[string]string{container.RoleLabel: RoleServe}}}},
				Ports: tcp(o.ListenPort),
			}},
		},
	}, nil
}

// workerSelector selects the installation's worker Pods of both roles.
func workerSelector(installation string) metav1.LabelSelector {
	return metav1.LabelSelector{
		MatchLabels: map[string]string{container.InstallationLabel: installation},
		MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: container.RoleLabel, Operator: metav1.LabelSelectorOpIn,
			Values: []string{container.RoleTurn, container.RoleSession},
		}},
	}
}

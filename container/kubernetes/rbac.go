package kubernetes

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
)

// API groups of agent-sandbox's resources.
const (
	SandboxGroup    = "agents.x-k8s.io"
	ExtensionsGroup = "extensions.agents.x-k8s.io"
)

// Permissions are exactly the verbs the engine uses in its namespace, per
// resource: what deploy/kubernetes' Role grants and what `rtsandbox
// doctor` asks the API server about (SelfSubjectAccessReview). With
// warmPool, the agent-sandbox resources of Claims too; with sessions, what
// the session engine (Sessions) adds to the sealed engine's verbs
// (deploy/kubernetes-sessions' Role).
//
//   - pods: create (a turn's Pod, a channel's), get and watch (follow
//     it), list (reap), delete (by UID after the turn, or to recreate);
//   - pods/attach: create and get (the turn's stdin and the reply; the
//     WebSocket attach is a GET, the SPDY one a POST);
//   - pods/log: get (sessions: the last lines of a channel's worker);
//   - networkpolicies: get, create, update (the workers' policy at start);
//   - sandboxtemplates, sandboxwarmpools: get, create, update (the pool
//     at start);
//   - sandboxclaims: create, get, watch (a turn's claim), list (reap),
//     delete (after the turn);
//   - sandboxes: get (the claimed Sandbox's Pod name).
func Permissions(warmPool, sessions bool) []rbacv1.PolicyRule {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "delete", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/attach"}, Verbs: []string{"create", "get"}},
	}
	if sessions {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}})
	}
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create", "get", "update"}})
	if warmPool {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{ExtensionsGroup}, Resources: []string{"sandboxclaims"}, Verbs: []string{"create", "delete", "get", "list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{ExtensionsGroup}, Resources: []string{"sandboxtemplates", "sandboxwarmpools"}, Verbs: []string{"create", "get", "update"}},
			rbacv1.PolicyRule{APIGroups: []string{SandboxGroup}, Resources: []string{"sandboxes"}, Verbs: []string{"get"}},
		)
	}
	for _, r := range rules {
		slices.Sort(r.Verbs)
	}
	return rules
}

// ClusterReads are the reads `rtsandbox doctor` makes beyond the
// namespace (deploy/kubernetes' ClusterRole rtsandbox-read): the
// installation's own namespace, and the RuntimeClasses a runtime maps to.
// The engine itself never needs them.
func ClusterReads(namespace string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{namespace}, Verbs: []string{"get"}},
		{APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}, Verbs: []string{"get"}},
	}
}

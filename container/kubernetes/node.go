package kubernetes

import corev1 "k8s.io/api/core/v1"

// nodeLost reports a Pod whose node stopped answering. The engine follows
// its Pods, not their nodes (watching nodes would need a ClusterRole):
// when a node's kubelet stops reporting, the node controller marks the
// node not ready and flips each of its Pods' Ready condition to False,
// leaving ContainersReady as the kubelet last set it. The kubelet never
// reports Ready False beside ContainersReady True for a Pod without
// readiness gates, which the engine's Pods never have, so the pair is the
// node controller's word that the worker can no longer be vouched for: a
// turn fails then, and a channel's worker is down, rather than at a
// deadline or when the Pod is evicted minutes later. It is heard one
// node-monitor grace period (40 s by default) after the node went silent.
func nodeLost(pod *corev1.Pod) bool {
	return podCondition(pod, corev1.PodReady) == corev1.ConditionFalse &&
		podCondition(pod, corev1.ContainersReady) == corev1.ConditionTrue
}

// podCondition is the status of pod's condition of type t, "" when the
// Pod has none.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

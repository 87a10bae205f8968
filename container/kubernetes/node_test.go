package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeLost(t *testing.T) {
	cond := func(ready, containers corev1.ConditionStatus) *corev1.Pod {
		pod := &corev1.Pod{}
		if ready != "" {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: ready})
		}
		if containers != "" {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: containers})
		}
		return pod
	}
	for _, c := range []struct {
		name       string
		ready, ctr corev1.ConditionStatus
		want       bool
	}{
		{"running and ready", corev1.ConditionTrue, corev1.ConditionTrue, false},
		{"marked by the node controller", corev1.ConditionFalse, corev1.ConditionTrue, true},
		{"the kubelet: a container not ready", corev1.ConditionFalse, corev1.ConditionFalse, false},
		{"no conditions yet", "", "", false},
		{"ready unknown", corev1.ConditionUnknown, corev1.ConditionTrue, false},
	} {
		if got := nodeLost(cond(c.ready, c.ctr)); got != c.want {
			t.Errorf("%s: nodeLost = %v; want %v", c.name, got, c.want)
		}
	}
}

package k8stest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUndoTable: the script deletes the rules added to chains that
// existed, then flushes and deletes the chains added; a built-in chain
// whose policy changed is never flushed (it would take the rules of
// whoever else uses it), and an unchanged table needs no script.
func TestUndoTable(t *testing.T) {
	before := []string{":INPUT ACCEPT", ":FORWARD DROP", ":DOCKER -", "-A FORWARD -j DOCKER"}
	now := []string{":INPUT ACCEPT", ":FORWARD ACCEPT", ":DOCKER -", ":KUBE-A -", ":KUBE-B -",
		`-A INPUT -m comment --comment "kube-router netpol - X" -j KUBE-A`, "-A FORWARD -j DOCKER",
		"-A KUBE-A -j KUBE-B", "-A KUBE-B -j REJECT"}
	want := []string{`-D INPUT -m comment --comment "kube-router netpol - X" -j KUBE-A`,
		"-F KUBE-A", "-F KUBE-B", "-X KUBE-A", "-X KUBE-B"}
	if diff := cmp.Diff(want, undoTable(before, now)); diff != "" {
		t.Errorf("undoTable (-want +got):\n%s", diff)
	}
	if got := undoTable(before, before); len(got) != 0 {
		t.Errorf("undoTable of an unchanged table = %q; want nothing", got)
	}
}

package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The real tier's network policy enforcer (kube-router's network policy
// controller) and Service proxy (kube-proxy, iptables mode) change the
// host's firewall: chains and rules of the filter, nat and mangle tables,
// for IPv4 and IPv6, the nftables tables those live in, and IP sets. The
// host's record keeps all of it, so that Stop undoes it and the
// before/after comparison proves it did. Their own clean-up commands are
// not the way back: kube-router v2.1.0's --cleanup-config leaves the
// policy controller's chains in place (it cleans up with an uninitialised
// controller), and one generic undo covers both.

// firewallTables are the tables recorded, as "command table".
var firewallTables = []string{"iptables filter", "iptables nat", "iptables mangle",
	"ip6tables filter", "ip6tables nat", "ip6tables mangle"}

// recordFirewall fills s's firewall fields; tools is the real tier's
// tools directory, whose ipset lists the IP sets.
func recordFirewall(s *hostState, tools string) error {
	s.Firewall = map[string][]string{}
	for _, t := range firewallTables {
		rules, err := tableRules(t)
		if err != nil {
			return err
		}
		s.Firewall[t] = rules
	}
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return fmt.Errorf("nft list tables: %w", err)
	}
	s.NFTables = nil
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if t, ok := strings.CutPrefix(line, "table "); ok {
			s.NFTables = append(s.NFTables, t) // "family name"
		}
	}
	slices.Sort(s.NFTables)
	s.IPSets, err = ipSets(tools)
	return err
}

// tableRules is a table ("command table") as iptables-save prints it,
// without its comments, header and COMMIT, and without the chains' packet
// counters, which change with any traffic.
func tableRules(t string) ([]string, error) {
	cmd, table, _ := strings.Cut(t, " ")
	out, err := exec.Command(cmd+"-save", "-t", table).Output()
	if err != nil {
		return nil, fmt.Errorf("%s-save -t %s: %w", cmd, table, err)
	}
	var rules []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || line[0] == '#' || line[0] == '*' || line == "COMMIT" {
			continue
		}
		if line[0] == ':' {
			if i := strings.LastIndex(line, " ["); i > 0 {
				line = line[:i]
			}
		}
		rules = append(rules, line)
	}
	return rules, nil
}

// ipset runs the tools' ipset (Debian's, unpacked with its library).
func ipset(tools string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(tools, "bin", "ipset"), args...)
	cmd.Env = append(os.Environ(), libEnv(tools))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ipset %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// ipSets lists the names of the host's IP sets.
func ipSets(tools string) ([]string, error) {
	out, err := ipset(tools, "list", "-n")
	if err != nil {
		return nil, err
	}
	sets := strings.Fields(string(out))
	slices.Sort(sets)
	return sets, nil
}

// undoFirewall removes what the firewall gained since before. In each
// table, one iptables-restore that changes nothing else deletes the rules
// added to chains that existed, then flushes the chains added and deletes
// them (flushed first, so that one may refer to another). Then the IP
// sets added go, which no rule refers to any more, and the nftables
// tables added, now empty.
func undoFirewall(before, now hostState, tools string) error {
	var errs []error
	for _, t := range firewallTables {
		if script := undoTable(before.Firewall[t], now.Firewall[t]); len(script) > 0 {
			cmd, table, _ := strings.Cut(t, " ")
			restore := exec.Command(cmd+"-restore", "--noflush")
			restore.Stdin = strings.NewReader("*" + table + "\n" + strings.Join(script, "\n") + "\nCOMMIT\n")
			if out, err := restore.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s-restore (%s): %v: %s", cmd, table, err, bytes.TrimSpace(out)))
			}
		}
	}
	for _, s := range now.IPSets {
		if !slices.Contains(before.IPSets, s) {
			if _, err := ipset(tools, "destroy", s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, t := range now.NFTables {
		if !slices.Contains(before.NFTables, t) {
			family, name, _ := strings.Cut(t, " ")
			if out, err := exec.Command("nft", "delete", "table", family, name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table %s %s: %v: %s", family, name, err, bytes.TrimSpace(out)))
			}
		}
	}
	return errors.Join(errs...)
}

// undoTable is the iptables-restore script that takes a table's rules
// from now back to before: "-D" for each rule added to a chain that
// existed, "-F" and then "-X" for each chain added. Chains are compared by
// name: a built-in chain whose policy changed is no chain added (it is
// left to the comparison to report, never flushed).
func undoTable(before, now []string) []string {
	var added []string
	old := chainNames(before)
	for _, c := range chainNames(now) {
		if !slices.Contains(old, c) {
			added = append(added, c)
		}
	}
	var script []string
	for _, line := range now { // rules: "-A CHAIN SPEC"
		rule, ok := strings.CutPrefix(line, "-A ")
		if ok && !slices.Contains(before, line) && !slices.Contains(added, strings.Fields(rule)[0]) {
			script = append(script, "-D "+rule)
		}
	}
	for _, c := range added {
		script = append(script, "-F "+c)
	}
	for _, c := range added {
		script = append(script, "-X "+c)
	}
	return script
}

// chainNames are the chains a table's rules declare (":NAME POLICY").
func chainNames(rules []string) []string {
	var names []string
	for _, line := range rules {
		if decl, ok := strings.CutPrefix(line, ":"); ok {
			names = append(names, strings.Fields(decl)[0])
		}
	}
	return names
}

// libEnv is the environment entry that finds the tools' shared libraries
// (libipset), for ipset and what runs it.
func libEnv(tools string) string { return "LD_LIBRARY_PATH=" + filepath.Join(tools, "lib") }

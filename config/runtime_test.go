package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// TestParseRuntime: sandbox.runtime is the sealed turns' runtime and the
// session profiles' default; a session profile may name its own; Runtimes
// lists what the channels in use run under, each once.
func TestParseRuntime(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		sealed   string
		profiles map[string]string // profile → RuntimeOf
		want     []string          // Runtimes
	}{
		{"default-is-runc", withTools, "runc", map[string]string{DefaultProfile: "runc"}, []string{"runc"}},
		{"sandbox-runsc", withTools + "sandbox: {runtime: runsc}\n", "runsc", map[string]string{DefaultProfile: "runsc"}, []string{"runsc"}},
		{"session-profile-inherits-sandbox",
			withTools + "sandbox: {runtime: runsc}\nprofiles: {s: {mode: session}}\ndefault_profile: s\n",
			"runsc", map[string]string{"s": "runsc"}, []string{"runsc"}},
		{"session-profile-own-runtime",
			withTools + "profiles: {s: {mode: session, runtime: runsc}}\nchannels_profile: {'http:lab': s}\n",
			"runc", map[string]string{"s": "runsc", DefaultProfile: "runc"}, []string{"runc", "runsc"}},
		{"session-profile-back-to-runc",
			withTools + "sandbox: {runtime: runsc}\nprofiles: {s: {mode: session, runtime: runc}}\ndefault_profile: s\n",
			"runsc", map[string]string{"s": "runc"}, []string{"runc", "runsc"}},
		// A profile no channel uses needs no runtime of the engine.
		{"unused-profile-not-listed",
			withTools + "profiles: {s: {mode: session, runtime: runsc}}\n",
			"runc", map[string]string{"s": "runsc"}, []string{"runc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			if got := c.SealedRuntime(); got != tt.sealed {
				t.Errorf("SealedRuntime = %q; want %q", got, tt.sealed)
			}
			got := map[string]string{}
			for name := range tt.profiles {
				p, _ := c.Profile(name)
				got[name] = c.RuntimeOf(p)
			}
			if diff := cmp.Diff(tt.profiles, got); diff != "" {
				t.Errorf("RuntimeOf (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, c.Runtimes()); diff != "" {
				t.Errorf("Runtimes (-want +got):\n%s", diff)
			}
		})
	}
}

// The PID floor applies only to what runs under runsc: runc keeps the
// reference's minimum of 8, and a runsc profile no channel uses is not
// checked.
func TestParseRunscPIDsOnlyWhereUsed(t *testing.T) {
	for _, in := range []string{
		minimal + "sandbox: {limits: {pids: 8}}\n",
		minimal + "sandbox: {runtime: runsc, limits: {pids: 64}}\n",
		withTools + "profiles: {s: {mode: session, runtime: runsc}}\nsession: {limits: {pids: 32}}\n",
		withTools + "sandbox: {runtime: runsc}\nprofiles: {s: {mode: session, runtime: runc}}\ndefault_profile: s\nsession: {limits: {pids: 32}}\n",
	} {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%q) = %v; want no error", in, err)
		}
	}
}

// A hand-built Config (no runtime written anywhere) runs runc.
func TestRuntimeHandBuiltConfig(t *testing.T) {
	c := &Config{ChannelProfiles: map[rtsandbox.ChannelKey]string{"http:x": DefaultProfile}}
	if diff := cmp.Diff([]string{"runc"}, c.Runtimes()); diff != "" {
		t.Errorf("Runtimes (-want +got):\n%s", diff)
	}
}

// runtimeErrorTests: every refusal names the key and the rule; nothing but
// runc and runsc reaches the engine. FuzzParse is seeded with them.
var runtimeErrorTests = func() []errorTest {
	const oneOf = `must be one of ["runc" "runsc"]`
	return []errorTest{
		{"sandbox-runtime-unknown", minimal + "sandbox: {runtime: kata}\n", []string{"sandbox.runtime: " + oneOf}},
		{"sandbox-runtime-case", minimal + "sandbox: {runtime: RUNSC}\n", []string{"sandbox.runtime: " + oneOf}},
		{"sandbox-runtime-shim", minimal + "sandbox: {runtime: io.containerd.runsc.v1}\n", []string{"sandbox.runtime: " + oneOf}},
		{"sandbox-runtime-not-string", minimal + "sandbox: {runtime: [runsc]}\n", []string{"sandbox.runtime: must be a string"}},
		{"profile-runtime-unknown", withTools + "profiles: {s: {mode: session, runtime: kata}}\n", []string{"profiles.s.runtime: " + oneOf}},
		{"sealed-profile-runtime", withTools + "profiles: {default: {mode: sealed, runtime: runsc}}\n",
			[]string{"profiles.default.runtime: is only used with mode: session (sealed turns run under sandbox.runtime)"}},
		// gVisor's own threads count against the container's PID limit: a
		// small one would fail every turn at its start.
		{"runsc-sealed-pids", minimal + "sandbox: {runtime: runsc, limits: {pids: 32}}\n",
			[]string{"sandbox.limits.pids: must be at least 64 while sandbox.runtime is runsc (gVisor's own threads count against the limit)"}},
		{"runsc-session-pids", withTools + "profiles: {s: {mode: session, runtime: runsc}}\ndefault_profile: s\nsession: {limits: {pids: 32}}\n",
			[]string{`session.limits.pids: must be at least 64 while the runtime of profile "s" is runsc (gVisor's own threads count against the limit)`}},
	}
}()

func TestParseRuntimeErrors(t *testing.T) { checkParseErrors(t, runtimeErrorTests) }

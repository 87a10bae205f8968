// `rtsandbox doctor`: checks an installation before it serves, and the
// same checks at `serve` start.
//
// The contract: every check prints ok, warn or fail, and a one-line fix
// when it is not ok. doctor exits 0 when no check failed, 1 when one did,
// 2 for usage and config errors. serve runs the same checks (never the
// online ones) once it holds the state directory, refuses to start when
// one fails, naming the checks and their fixes, and rebuilds a missing or
// stale worker image instead of failing on it. The checks read; they write
// nothing but the image that serve rebuilds. See docs/operations.md.

package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// dockerTimeout bounds each question to the Docker daemon.
const dockerTimeout = 15 * time.Second

// status is a check's verdict.
type status int

const (
	statusOK status = iota
	statusWarn
	statusFail
)

func (s status) String() string {
	return [...]string{"ok", "warn", "fail"}[s]
}

// check is one finding: what was checked, what was found and, unless ok,
// the one-line fix.
type Check struct {
	status    status
	name, msg string
	fix       string
	// repairable: a failure that serve repairs at start (a missing or
	// stale worker image) instead of refusing.
	repairable bool
}

func ok(name, format string, a ...any) Check {
	return Check{status: statusOK, name: name, msg: fmt.Sprintf(format, a...)}
}

func warn(name, fix, format string, a ...any) Check {
	return Check{status: statusWarn, name: name, msg: fmt.Sprintf(format, a...), fix: fix}
}

func fail(name, fix, format string, a ...any) Check {
	return Check{status: statusFail, name: name, msg: fmt.Sprintf(format, a...), fix: fix}
}

func repairable(c Check) Check {
	c.repairable = true
	return c
}

func (c Check) String() string {
	s := fmt.Sprintf("%-4s  %-18s %s", c.status, c.name, c.msg)
	if c.status != statusOK && c.fix != "" {
		s += "\n      fix: " + c.fix
	}
	return s
}

// runChecks runs the offline checks. Without surfaces it leaves out what
// only the chat surfaces read (the HTTP and Discord tokens): turn and chat
// never serve them.
func runChecks(ctx context.Context, cfg *config.Config, getenv env, surfaces bool) []Check {
	var checks []Check
	if cfg.IsKubernetes() {
		checks = kubeChecks(ctx, cfg)
	} else {
		checks = dockerChecks(ctx, ImageTag(cfg))
		checks = append(checks, runtimeChecks(ctx, cfg.Runtimes())...)
	}
	checks = append(checks, userCheck(cfg, os.Geteuid()), poolCheck(cfg), stateDirCheck(cfg.StateDir, os.Geteuid()))
	checks = append(checks, dbChecks(ctx, cfg.StateDir)...)
	checks = append(checks, credentialChecks(cfg, getenv, surfaces)...)
	if c, ok := tokenCheck(cfg, getenv); ok && surfaces {
		checks = append(checks, c)
	}
	if surfaces {
		checks = append(checks, portChecks(cfg)...)
	}
	if c, ok := diskCheck(cfg, session.ProbeDisk()); ok {
		checks = append(checks, c)
	}
	return checks
}

// Failed returns the failed checks, or nil.
func Failed(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if c.status == statusFail {
			out = append(out, c)
		}
	}
	return out
}

// Summary is the last line of a doctor run.
func Summary(checks []Check) string {
	var n [3]int
	for _, c := range checks {
		n[c.status]++
	}
	if n[statusFail] == 0 {
		return fmt.Sprintf("doctor: no check failed (%d ok, %d warn)", n[statusOK], n[statusWarn])
	}
	return fmt.Sprintf("doctor: %d check(s) failed (%d ok, %d warn)", n[statusFail], n[statusOK], n[statusWarn])
}

// StartChecks is the doctor at serve start. Any failed check refuses the
// start, with every failure and its fix in the error; only then, a
// missing or stale worker image is rebuilt (and logged), so a start that
// is refused anyway builds nothing. Warnings go to the log.
func StartChecks(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger) error {
	say := func(msg string) { log.Warn("worker image rebuilt at start", "detail", msg) }
	return startChecks(ctx, cfg, runChecks(ctx, cfg, getenv, true), log, say)
}

// TurnChecks are serve's start checks for the commands that run turns in
// this process (turn, chat): all of them but the chat surfaces' tokens.
// say reports an image rebuild to the operator at the terminal.
func TurnChecks(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, say func(string)) error {
	return startChecks(ctx, cfg, runChecks(ctx, cfg, getenv, false), log, say)
}

func startChecks(ctx context.Context, cfg *config.Config, checks []Check, log *slog.Logger, say func(string)) error {
	var bad []Check
	for _, c := range checks {
		switch {
		case c.status == statusWarn:
			log.Warn("start check warning", "check", c.name, "detail", c.msg, "fix", c.fix)
		case c.status == statusFail && !c.repairable:
			bad = append(bad, c)
		}
	}
	if bad != nil {
		return refusal(bad)
	}
	for _, c := range checks {
		if c.repairable {
			if err := RefreshImage(ctx, ImageTag(cfg), say); err != nil {
				return refusal([]Check{fail(c.name, imageFix, "%v", err)})
			}
		}
	}
	log.Info("start checks passed", "checks", len(checks))
	return nil
}

// ErrStartRefused matches the error of a start that failed its checks.
var ErrStartRefused = errors.New("refusing to start")

// refusal is serve's error for failed start checks.
func refusal(bad []Check) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d start check(s) failed (rtsandbox doctor --config FILE runs them alone):", len(bad))
	for _, c := range bad {
		b.WriteString("\n" + c.String())
	}
	return fmt.Errorf("%w: %s", ErrStartRefused, b.String())
}

const (
	dockerCheckName = "docker"
	imageCheckName  = "worker image"
)

// dockerChecks checks the daemon and then the worker image on it.
func dockerChecks(ctx context.Context, tag string) []Check {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return []Check{dockerFail(err), imageNotChecked(tag)}
	}
	defer closeClient()
	vctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	v, err := e.cli.ServerVersion(vctx, client.ServerVersionOptions{})
	if err != nil {
		return []Check{dockerFail(fmt.Errorf("%s: %w", e.cli.DaemonHost(), err)), imageNotChecked(tag)}
	}
	d := ok(dockerCheckName, "Docker Engine %s (API %s) at %s", v.Version, v.APIVersion, e.cli.DaemonHost())
	return []Check{d, imageCheck(ctx, e, tag)}
}

func dockerFail(err error) Check {
	return fail(dockerCheckName, "start the Docker daemon, or point DOCKER_HOST at its socket; this user must be allowed to use it (root or the docker group)",
		"Docker is unreachable: %v", err)
}

func imageNotChecked(tag string) Check {
	return warn(imageCheckName, "fix the docker Check first", "%s not checked: Docker is unreachable", tag)
}

// imageFix is the fix for a missing or stale image.
const imageFix = "rtsandbox image build --config FILE (serve, turn, chat and demo also rebuild it at start)"

// imageCheck compares the image's worker label with this binary's worker.
// A missing or stale image fails, repairable; a foreign one (no label of
// this project, under a tag other than the default) fails for good, so
// serve refuses to start before anything is built.
func imageCheck(ctx context.Context, e *engine, tag string) Check {
	worker, source, err := workerimage.WorkerBinary(ctx)
	if err != nil {
		return fail(imageCheckName, "build with `make build` (it embeds the worker) or install rtsandbox-worker next to rtsandbox", "%v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	c, err := workerimage.Compare(lctx, e, tag, worker)
	switch {
	case err != nil:
		return fail(imageCheckName, imageFix, "%v", err)
	case c.State == workerimage.Missing:
		return repairable(fail(imageCheckName, imageFix, "%s is not built yet", tag))
	case c.State == workerimage.Stale:
		return repairable(fail(imageCheckName, imageFix, "%s holds another worker (%s), not this binary's (sha256 %s, %s)",
			tag, shortDigest(c.Have), short(c.Want), source))
	case c.State == workerimage.Foreign && ownTag(tag):
		return repairable(fail(imageCheckName, imageFix, "%s holds an image without rtsandbox's labels, not this binary's worker (sha256 %s, %s)",
			tag, short(c.Want), source))
	case c.State == workerimage.Foreign:
		// Not repairable: serve refuses to start rather than replace an
		// image of the operator's that sandbox.image names by mistake.
		return fail(imageCheckName, fmt.Sprintf("name a tag of the worker's own in %s, or replace the image on purpose with `rtsandbox image build --tag %s`", ImageKey, tag),
			"%s: %s is not an image rtsandbox built (no %s label); rtsandbox rebuilds only its own images or the default tag %s, so it leaves this one alone",
			ImageKey, tag, workerimage.LabelWorkerSHA256, config.DefaultImage)
	}
	return ok(imageCheckName, "%s holds this binary's worker (sha256 %s, %s)", tag, short(c.Want), source)
}

// userCheck mirrors the sandbox's rule: a root host names a non-root
// worker user; any other host runs the worker as itself.
func userCheck(cfg *config.Config, euid int) Check {
	const name = "worker user"
	egid := os.Getegid()
	own := fmt.Sprintf("%d:%d", euid, egid)
	sb := cfg.Sandbox
	switch {
	case euid == 0 && sb.UID == 0:
		return fail(name, `add sandbox.user: "65534:65534" (any non-root UID:GID) to the config`,
			"rtsandbox runs as root and sandbox.user is not set; the worker is never root")
	case euid != 0 && sb.UID != 0 && (sb.UID != euid || sb.GID != egid):
		return fail(name, fmt.Sprintf("remove sandbox.user, or set it to %q", own),
			"sandbox.user %s: a host not running as root runs the worker as itself (%s)", sb.User, own)
	case sb.UID != 0:
		return ok(name, "the worker runs as %s", sb.User)
	}
	return ok(name, "the worker runs as %s (this user)", own)
}

// poolCheck reports the warm pool serve keeps for sealed turns: its size
// and whether it was derived, and on Kubernetes the agent-sandbox warm
// pool beneath it. It never fails; the sizes are checked by the config.
func poolCheck(cfg *config.Config) Check {
	const name = "warm pool"
	n, derived := PoolSize(cfg)
	var msg string
	switch {
	case n == 0:
		msg = "off (sandbox.pool.size 0): every sealed turn starts its container"
	case derived:
		msg = fmt.Sprintf("%d sealed worker(s) started ahead (derived from max_turns and memory; set sandbox.pool.size to change it)", n)
	default:
		msg = fmt.Sprintf("%d sealed worker(s) started ahead (sandbox.pool.size)", n)
	}
	if cfg.IsKubernetes() {
		msg += "; " + kubePoolLine(cfg.Kubernetes.SealedPool)
	}
	return ok(name, "%s", msg)
}

// kubePoolLine is the cluster-side supply the runtime's warm workers and
// cold turns draw on: the agent-sandbox warm pool, or a Pod each.
func kubePoolLine(sealedPool int) string {
	if sealedPool > 0 {
		return fmt.Sprintf("workers come from the agent-sandbox warm pool %s of %d (kubernetes.pool.sealed)", SealedPoolName, sealedPool)
	}
	return "workers start in a Pod of their own (kubernetes.pool.sealed 0)"
}

// stateDirCheck checks the state directory as privdir does, without
// following a link at its path, and names the fix for what is wrong.
func stateDirCheck(dir string, euid int) Check {
	const name = "state_dir"
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return warn(name, "nothing to do: serve, turn and chat create it", "%s does not exist yet; it is created 0700 at first start", dir)
	case err != nil:
		return fail(name, "make the state_dir's parent readable by this user", "%s: %v", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fail(name, "point state_dir at the real directory, not a link to it", "%s is a symbolic link", dir)
	case !fi.IsDir():
		return fail(name, "point state_dir at a directory", "%s is not a directory", dir)
	}
	if err := privdir.Check(dir, euid); err == nil {
		return ok(name, "%s is private (mode %04o, owned by uid %d)", dir, fi.Mode().Perm(), euid)
	}
	owner := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = int(st.Uid)
	}
	fix := fmt.Sprintf("chmod 700 %s", dir)
	if owner != euid {
		fix = fmt.Sprintf("chown %d %s && chmod 700 %s (or choose a state_dir of your own)", euid, dir, dir)
	}
	return fail(name, fix, "%s is not private to this user: mode %04o, owner uid %d; it must be 0700 and owned by uid %d",
		dir, fi.Mode().Perm(), owner, euid)
}

// credential is one variable the config names.
type credential struct {
	key  string // the config key, such as model.api_key_env
	name config.EnvVar
	fix  string // "" for the generic fix
}

// credentials lists every credential variable cfg names, in file order
// (config.Credentials), with the Discord token's own fix.
func credentials(cfg *config.Config) []credential {
	var out []credential
	for _, c := range cfg.Credentials() {
		cr := credential{key: c.Key, name: c.Var}
		if c.Key == "discord.token_env" {
			cr.fix = fmt.Sprintf("set %s to the bot token from the Discord developer portal, or remove the discord: section", c.Var)
		}
		out = append(out, cr)
	}
	return out
}

// credentialChecks checks that every named variable is set; the value is
// never printed.
func credentialChecks(cfg *config.Config, getenv env, surfaces bool) []Check {
	var out []Check
	for _, c := range credentials(cfg) {
		if c.name == "" || !surfaces && surfaceKey(c.key) {
			continue
		}
		if c.name.Lookup(getenv) != "" {
			out = append(out, ok(c.key, "%s is set", c.name))
			continue
		}
		fix := c.fix
		if fix == "" {
			fix = fmt.Sprintf("set %s in the environment rtsandbox runs in (export %s=…)", c.name, c.name)
		}
		// getenv cannot tell an empty variable from an absent one, and
		// either is refused: say both.
		out = append(out, fail(c.key, fix, "%s is unset or empty", c.name))
	}
	return out
}

// surfaceKey reports whether a credential key is a chat surface's token.
func surfaceKey(key string) bool {
	return strings.HasPrefix(key, "http.") || strings.HasPrefix(key, "discord.")
}

// tokenCheck compares the HTTP guest and owner tokens when both are set;
// ok is false when there is nothing to compare (an unset token already
// fails its credential check).
func tokenCheck(cfg *config.Config, getenv env) (Check, bool) {
	const name = "http tokens"
	h := cfg.HTTP
	if h == nil || h.OwnerTokenEnv == "" {
		return Check{}, false
	}
	guest, owner := h.TokenEnv.Lookup(getenv), h.OwnerTokenEnv.Lookup(getenv)
	switch {
	case guest == "" || owner == "":
		return Check{}, false
	case guest == owner:
		return fail(name, fmt.Sprintf("give %s its own random value (such as the output of openssl rand -hex 32)", h.OwnerTokenEnv),
			"%s and %s hold the same token: every guest bridge could run owner commands", h.TokenEnv, h.OwnerTokenEnv), true
	}
	return ok(name, "%s and %s differ", h.TokenEnv, h.OwnerTokenEnv), true
}

// Checks runs the offline checks, and with online the online ones too.
// What serve repairs at start (a missing or stale worker image) is a
// warning here, not a failure: the installation is ready to serve.
func Checks(ctx context.Context, cfg *config.Config, getenv env, online bool) []Check {
	checks := append(runChecks(ctx, cfg, getenv, true), skillsChecks(cfg)...) // serve reads skills at start on its own
	for i, c := range checks {
		if c.repairable {
			checks[i] = warn(c.name, c.fix, "%s; serve, turn and chat build it at start", c.msg)
		}
	}
	if online {
		checks = append(checks, onlineChecks(ctx, cfg, getenv)...)
	}
	return checks
}

// DoctorHelp is `rtsandbox doctor -h`: what the checks look at.
const DoctorHelp = `usage: rtsandbox doctor --config FILE [--online]

Checks what serve needs: Docker and its version, the worker image built
from this binary's worker, the state directory (0700, owned by you), the
memory and usage databases in it (PRAGMA quick_check), the worker user, the warm pool's size, every credential variable the config names, distinct guest
and owner tokens, the Discord token, the skills directories of session
profiles, and with session profiles in use the disk bound (session.disk)
each channel's workspace gets on this host, and that http.listen and
metrics.listen are free. --online also asks the model and MCP
endpoints one request each, without spending tokens. Exit 0 when no
check fails, 1 otherwise. serve runs the same checks at start.

flags:
`

package config

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Each rule returns the text of the broken rule, or "" when s is fine.

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func envVarRule(s string) string {
	if !envVarName.MatchString(s) {
		return "must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$"
	}
	return ""
}

func toolNameRule(s string) string {
	if !rtsandbox.ValidToolName(s) {
		return "must match ^[a-z][a-z0-9_]{0,47}$"
	}
	return ""
}

// mcpToolNameRule is the rule of an MCP tool's name: the model APIs'
// function-name rule, so that a real server's tool names pass (the worker
// maps each to a model-facing name).
func mcpToolNameRule(s string) string {
	if !rtsandbox.ValidMCPToolName(s) {
		return "must match ^[a-zA-Z0-9_-]{1,128}$"
	}
	return ""
}

func builtinRule(s string) string {
	if s != BuiltinClock {
		return fmt.Sprintf("must be %q, the only built-in tool", BuiltinClock)
	}
	return ""
}

// stateDirRule refuses "/" because the state directory holds private
// per-service files; the root directory is never dedicated to them.
func stateDirRule(s string) string {
	switch {
	case !filepath.IsAbs(s):
		return "must be an absolute path"
	case filepath.Clean(s) == "/":
		return "must not be the root directory"
	case hasControl(s):
		return "must not contain control characters"
	}
	return ""
}

// notBlank follows the reference: the model name is sent upstream exactly
// as written, but whitespace alone is refused.
func notBlank(s string) string {
	if strings.TrimSpace(s) == "" {
		return "must not be blank"
	}
	return ""
}

func modelAPIRule(s string) string {
	if s != rtsandbox.ModelAPIOpenAI && s != rtsandbox.ModelAPIAnthropic {
		return fmt.Sprintf("must be %q or %q", rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic)
	}
	return ""
}

func thinkingRule(s string) string {
	if !modelapi.ThinkingLevel(s).Valid() {
		return fmt.Sprintf("must be one of %q", modelapi.Levels())
	}
	return ""
}

// imageRule keeps the image from being read as a docker option or split
// into several arguments (docs/limits.md, "Sealed turns": "--privileged" as the image).
func imageRule(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case strings.HasPrefix(s, "-"):
		return "must not start with '-'"
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "must not contain whitespace or control characters"
	}
	return ""
}

// userRule refuses root: the worker must run as a non-root user, and a
// host that runs as root must name one here.
func userRule(s string) string {
	if s == "" {
		return ""
	}
	if _, _, ok := splitUser(s); !ok {
		return `must be "UID:GID" with decimal ids from 1 to 2147483647 (root is refused)`
	}
	return ""
}

// ParseUser parses a worker user "UID:GID" by the rule of sandbox.user:
// decimal ids from 1 to 2147483647, so root is refused. Commands that take
// a user flag use it, so the rule is written once.
func ParseUser(s string) (uid, gid int, err error) {
	uid, gid, ok := splitUser(s)
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a non-root \"UID:GID\" (decimal ids from 1 to 2147483647)", s)
	}
	return uid, gid, nil
}

// splitUser parses "UID:GID". The upper bound keeps ids away from the
// reserved (uid_t)-1 and fits every platform's int.
func splitUser(s string) (uid, gid int, ok bool) {
	u, g, found := strings.Cut(s, ":")
	uid, okU := positiveID(u)
	gid, okG := positiveID(g)
	return uid, gid, found && okU && okG
}

func positiveID(s string) (int, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false // no sign, no spaces, no other bases
	}
	n, err := strconv.ParseInt(s, 10, 32)
	return int(n), err == nil && n > 0
}

// timeZoneRule accepts IANA names only. "Local" is refused: it would mean
// the host's zone, which an empty value already says explicitly.
func timeZoneRule(s string) string {
	if s == "" {
		return ""
	}
	if _, err := time.LoadLocation(s); err != nil || s == "Local" {
		return "must be an IANA time zone name such as Europe/Berlin"
	}
	return ""
}

// endpoint reads the upstream URL at key and checks it with the one
// endpoint rule (upstream.ParseEndpoint, docs/broker.md, "Upstream endpoints: one rule"): the credential
// is added by the host, so the URL itself must carry none, and cleartext
// is allowed only when the operator opted in for tests. A refusal names
// the key and the rule.
func (p *parser) endpoint(o object, key string, req bool) upstream.Endpoint {
	var e upstream.Endpoint
	p.text(o, key, req, func(s string) string {
		var err error
		e, err = upstream.ParseEndpoint(s, p.allowHTTP)
		return p.endpointText(err)
	})
	return e
}

// endpointText is the operator's text for a refusal of the endpoint rule.
func (p *parser) endpointText(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, upstream.ErrEndpointSyntax):
		return "must be a valid URL"
	case errors.Is(err, upstream.ErrEndpointHost):
		return "must name a host"
	case p.allowHTTP:
		return "must be an http or https URL without user info or fragment"
	}
	return "must be an https URL without user info or fragment (set allow_http: true for loopback testing)"
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// runtimeRule wants a runtime the engine may be asked for
// (container.ValidRuntime, without the empty default).
func runtimeRule(s string) string {
	if s == "" || !container.ValidRuntime(s) {
		return fmt.Sprintf("must be one of %q", container.Runtimes())
	}
	return ""
}

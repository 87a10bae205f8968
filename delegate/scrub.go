package delegate

import (
	"regexp"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// Masks of ScrubDiagnostic, applied in this order.
var (
	pemRE      = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`)
	userinfoRE = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s]*@`) // greedy: up to the last @ of the authority, so a password holding "@" is masked whole
	authRE     = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization["']?\s*[:=]\s*["']?)[^"'\r\n]+`)
	headerRE   = regexp.MustCompile(`(?i)\b((?:set-cookie|cookie|x-api-key|x-auth-token|x-access-token)["']?\s*[:=]\s*["']?)[^"'\r\n]+`)
	schemeRE   = regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)([A-Za-z0-9._~+/=\-]+)`)
	shapeRE    = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9_]{16,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}|sk-[A-Za-z0-9_\-]{16,}|xox[abposr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35})`)
	jwtRE      = regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*`)
	assignRE   = regexp.MustCompile(`(?i)(["']?)([A-Za-z0-9_.\-]*(?:token|secret|password|passwd|api[_\-]?key|credential)[A-Za-z0-9_.\-]*)(["']?\s*[:=]\s*["']?)([^\s"',;&]+)`)
	settingRE  = regexp.MustCompile(`(?i)(?:policy|policies|limit|limits|length|max|min|url|uri|name|names|count|size|type|path|file|env|ttl|expiry|expires|expires_at|id|header)$`)
	numericRE  = regexp.MustCompile(`^[0-9]+$`)
)

const redacted = "[redacted]"

// ScrubDiagnostic makes an error message fit for a chat channel:
// it examines only the first max(4·max, 4096) characters, masks URL user
// info, authorization and credential header values, bearer/basic/token
// credentials, well-known token shapes, JWTs, PEM private keys and
// secret-named assignments, turns control characters other than tab and
// newline into spaces, trims, and cuts to max−1 characters plus "…".
// Characters are UTF-16 units; max = NoLimit keeps everything.
func ScrubDiagnostic(text string, limit int) string {
	if limit != NoLimit {
		text = rtsandbox.PrefixUTF16(text, max(4*limit, 4096))
	}
	text = pemRE.ReplaceAllString(text, redacted)
	text = userinfoRE.ReplaceAllString(text, "${1}"+redacted+"@")
	text = authRE.ReplaceAllString(text, "${1}"+redacted)
	text = headerRE.ReplaceAllString(text, "${1}"+redacted)
	text = schemeRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := schemeRE.FindStringSubmatch(m)
		if sub[3] == redacted || !credentialLike(sub[3]) {
			return m
		}
		return sub[1] + sub[2] + redacted
	})
	text = shapeRE.ReplaceAllString(text, redacted)
	text = jwtRE.ReplaceAllString(text, redacted)
	text = assignRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := assignRE.FindStringSubmatch(m)
		name, value := strings.ToLower(sub[2]), sub[4]
		if settingRE.MatchString(name) || value == redacted || strings.HasPrefix(value, "[redacted") {
			return m
		}
		isToken := strings.Contains(name, "token")
		other := strings.Contains(name, "secret") || strings.Contains(name, "passw") ||
			strings.Contains(name, "key") || strings.Contains(name, "credential")
		if isToken && !other {
			if !strings.Contains(strings.ReplaceAll(name, "tokens", ""), "token") || numericRE.MatchString(value) {
				return m
			}
		}
		return sub[1] + sub[2] + sub[3] + redacted
	})
	text = strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	text = strings.TrimSpace(text)
	if limit != NoLimit && rtsandbox.UTF16Len(text) > limit {
		text = rtsandbox.PrefixUTF16(text, limit-1) + "…"
	}
	return text
}

// credentialLike is the reference's test for a value after bearer, basic
// or token: digits, symbols, inner capitals, or at least 32 characters.
func credentialLike(v string) bool {
	if len(v) >= 32 || strings.ContainsAny(v, "0123456789._~+/=-") {
		return true
	}
	for i, r := range v {
		if i > 0 && r >= 'A' && r <= 'Z' {
			return true
		}
	}
	return false
}

package safefetch

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// target is an admitted URL (docs/web.md): http or https, no credentials, host
// canonicalised the WHATWG way, fragment removed.
type target struct {
	scheme   string   // "http" or "https"
	host     string   // serialised: ASCII domain, dotted IPv4, or "[v6]"
	port     int      // -1 when absent or the scheme's default
	segments []string // path segments, percent-encoded
	query    string   // percent-encoded, without '?'
	hasQuery bool
	creds    bool     // a non-empty username or password was present
	u        *url.URL // href parsed by net/url, set by admit
}

// href serialises t as the WHATWG href (without fragment or userinfo).
func (t *target) href() string {
	var b strings.Builder
	b.WriteString(t.scheme)
	b.WriteString("://")
	b.WriteString(t.host)
	if t.port >= 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(t.port))
	}
	for _, s := range t.segments {
		b.WriteByte('/')
		b.WriteString(s)
	}
	if t.hasQuery {
		b.WriteByte('?')
		b.WriteString(t.query)
	}
	return b.String()
}

// hostname is the host without IPv6 brackets.
func (t *target) hostname() string {
	return strings.TrimSuffix(strings.TrimPrefix(t.host, "["), "]")
}

// literal returns the host's address when the host is an IP literal.
func (t *target) literal() (netip.Addr, bool) {
	a, err := netip.ParseAddr(t.hostname())
	return a, err == nil
}

// admit applies docs/web.md to raw, resolved against base when base is not nil
// (a redirect's Location). It returns ErrInvalidURL or ErrScheme.
func admit(raw string, base *target) (*target, error) {
	t, err := parseURL(raw, base)
	if err != nil {
		return nil, err
	}
	if t.creds {
		return nil, ErrScheme
	}
	if t.port == 0 { // WHATWG accepts port 0; nothing can be fetched there
		return nil, ErrInvalidURL
	}
	// The request is built with net/url. Anything it cannot represent
	// exactly is refused rather than reinterpreted.
	u, err := url.Parse(t.href())
	if err != nil || u.Scheme != t.scheme || u.Hostname() != t.hostname() || u.User != nil || u.Opaque != "" {
		return nil, ErrInvalidURL
	}
	if p := u.Port(); (p == "") != (t.port < 0) || (p != "" && p != strconv.Itoa(t.port)) {
		return nil, ErrInvalidURL
	}
	t.u = u
	return t, nil
}

// parseURL is the WHATWG basic URL parser restricted to the special schemes
// http and https: any other scheme is ErrScheme without further parsing.
// base, when not nil, is an http(s) URL.
func parseURL(in string, base *target) (*target, error) {
	in = strings.TrimFunc(in, func(r rune) bool { return r <= 0x20 })
	if strings.ContainsAny(in, "\t\n\r") {
		in = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, in)
	}
	if scheme, rest, ok := splitScheme(in); ok {
		if scheme != "http" && scheme != "https" {
			return nil, ErrScheme
		}
		if base != nil && base.scheme == scheme && !strings.HasPrefix(rest, "//") {
			return parseRelative(scheme, rest, base) // "special relative or authority state"
		}
		return parseAuthority(scheme, strings.TrimLeft(rest, `/\`))
	}
	if base == nil {
		return nil, ErrInvalidURL
	}
	return parseRelative(base.scheme, in, base)
}

// splitScheme finds a scheme (ASCII alpha, then alphanumerics, '+', '-',
// '.') followed by ':'. The scheme is lowercased.
func splitScheme(in string) (scheme, rest string, ok bool) {
	if in == "" || !isAlpha(in[0]) {
		return "", "", false
	}
	for i := 1; i < len(in); i++ {
		c := in[i]
		switch {
		case c == ':':
			return strings.ToLower(in[:i]), in[i+1:], true
		case isAlpha(c) || isDigit(c) || c == '+' || c == '-' || c == '.':
		default:
			return "", "", false
		}
	}
	return "", "", false
}

// parseRelative is the relative state: in is resolved against base.
func parseRelative(scheme, in string, base *target) (*target, error) {
	t := &target{scheme: scheme, host: base.host, port: base.port}
	if in != "" && (in[0] == '/' || in[0] == '\\') {
		if len(in) > 1 && (in[1] == '/' || in[1] == '\\') {
			return parseAuthority(scheme, strings.TrimLeft(in, `/\`))
		}
		segs, rest := parsePath(nil, in[1:])
		t.segments = segs
		return t, parseQuery(t, rest)
	}
	t.segments = append([]string(nil), base.segments...)
	t.query, t.hasQuery = base.query, base.hasQuery
	switch {
	case in == "" || in[0] == '#':
		return t, nil
	case in[0] == '?':
		return t, parseQuery(t, in)
	}
	t.query, t.hasQuery = "", false
	if len(t.segments) > 0 {
		t.segments = t.segments[:len(t.segments)-1]
	}
	segs, rest := parsePath(t.segments, in)
	t.segments = segs
	return t, parseQuery(t, rest)
}

// parseAuthority parses "userinfo@host:port/path?query#fragment" once the
// slashes after the scheme are skipped.
func parseAuthority(scheme, in string) (*target, error) {
	end := strings.IndexAny(in, `/\?#`)
	if end < 0 {
		end = len(in)
	}
	auth, rest := in[:end], in[end:]
	t := &target{scheme: scheme, port: -1}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		// The last '@' ends the userinfo; earlier ones belong to it. The
		// first ':' separates username from password. Empty userinfo
		// ("@" or ":@") is not a credential.
		ui := auth[:at]
		t.creds = ui != "" && ui != ":"
		auth = auth[at+1:]
		if auth == "" {
			return nil, ErrInvalidURL
		}
	}
	hostPart, portPart, hasPort := splitHostPort(auth)
	if hostPart == "" {
		return nil, ErrInvalidURL
	}
	if hasPort && portPart != "" {
		p, ok := parsePort(portPart)
		if !ok {
			return nil, ErrInvalidURL
		}
		if p != defaultPort(scheme) {
			t.port = p
		}
	}
	host, err := parseHost(hostPart)
	if err != nil {
		return nil, err
	}
	t.host = host
	// Path start state: one leading '/' or '\' is consumed.
	if rest != "" && (rest[0] == '/' || rest[0] == '\\') {
		rest = rest[1:]
	}
	segs, rest := parsePath(nil, rest)
	t.segments = segs
	return t, parseQuery(t, rest)
}

// splitHostPort splits at the first ':' outside brackets.
func splitHostPort(s string) (host, port string, hasPort bool) {
	inBrackets := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			inBrackets = true
		case ']':
			inBrackets = false
		case ':':
			if !inBrackets {
				return s[:i], s[i+1:], true
			}
		}
	}
	return s, "", false
}

// parsePort accepts ASCII digits only, value 0–65535 (leading zeros allowed).
func parsePort(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
		if n > 65535 {
			return 0, false
		}
	}
	return n, true
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

// parsePath is the path state: segments are appended to segs until '?',
// '#' or the end; it returns the unparsed rest (starting at '?' or '#').
func parsePath(segs []string, s string) ([]string, string) {
	var buf strings.Builder
	for i := 0; ; i++ {
		eof := i >= len(s)
		var c byte
		if !eof {
			c = s[i]
		}
		if eof || c == '/' || c == '\\' || c == '?' || c == '#' {
			sep := !eof && (c == '/' || c == '\\')
			seg := buf.String()
			buf.Reset()
			switch {
			case isDoubleDot(seg):
				if len(segs) > 0 {
					segs = segs[:len(segs)-1]
				}
				if !sep {
					segs = append(segs, "")
				}
			case isSingleDot(seg):
				if !sep {
					segs = append(segs, "")
				}
			default:
				segs = append(segs, seg)
			}
			if !sep {
				return segs, s[i:]
			}
			continue
		}
		percentEncode(&buf, c, pathSet)
	}
}

// parseQuery handles "?query#fragment"; the fragment is dropped.
func parseQuery(t *target, rest string) error {
	if rest == "" || rest[0] == '#' {
		return nil
	}
	// rest[0] == '?'
	q := rest[1:]
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		percentEncode(&b, q[i], specialQuerySet)
	}
	t.query, t.hasQuery = b.String(), true
	return nil
}

func isSingleDot(s string) bool { return s == "." || strings.EqualFold(s, "%2e") }

func isDoubleDot(s string) bool {
	switch strings.ToLower(s) {
	case "..", ".%2e", "%2e.", "%2e%2e":
		return true
	}
	return false
}

const (
	pathSet         = 1 << iota // C0, space, " # < > ? ` { } and non-ASCII
	specialQuerySet             // C0, space, " # < > ' and non-ASCII
)

func percentEncode(b *strings.Builder, c byte, set int) {
	enc := c < 0x20 || c > 0x7e || c == ' ' || c == '"' || c == '#' || c == '<' || c == '>'
	switch set {
	case pathSet:
		enc = enc || c == '?' || c == '`' || c == '{' || c == '}'
	case specialQuerySet:
		enc = enc || c == '\''
	}
	if !enc {
		b.WriteByte(c)
		return
	}
	const hex = "0123456789ABCDEF"
	b.WriteByte('%')
	b.WriteByte(hex[c>>4])
	b.WriteByte(hex[c&15])
}

// parseHost is the WHATWG host parser for special schemes: a bracketed
// IPv6 literal, or a domain that is percent-decoded, IDNA-mapped (UTS #46),
// checked for forbidden code points and, when it ends in a number, parsed
// as an IPv4 address in any WHATWG spelling (decimal, octal, hex, 1–4
// parts, trailing dot). The result is the canonical serialisation.
func parseHost(in string) (string, error) {
	if strings.HasPrefix(in, "[") {
		if len(in) < 2 || !strings.HasSuffix(in, "]") {
			return "", ErrInvalidURL
		}
		inner := in[1 : len(in)-1]
		if strings.Contains(inner, "%") { // any zone identifier, encoded or raw
			return "", ErrInvalidURL
		}
		a, err := netip.ParseAddr(inner)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", ErrInvalidURL
		}
		return "[" + serializeIPv6(a) + "]", nil
	}
	domain := percentDecode(in)
	if !utf8.ValidString(domain) {
		domain = strings.ToValidUTF8(domain, "\uFFFD")
	}
	ascii, err := domainToASCII(domain)
	if err != nil {
		return "", err
	}
	for i := 0; i < len(ascii); i++ {
		if forbiddenDomainByte(ascii[i]) {
			return "", ErrInvalidURL
		}
	}
	if endsInNumber(ascii) {
		v4, ok := parseIPv4(ascii)
		if !ok {
			return "", ErrInvalidURL
		}
		return v4.String(), nil
	}
	return ascii, nil
}

// domainToASCII is WHATWG "domain to ASCII" with beStrict false.
func domainToASCII(d string) (string, error) {
	if isASCII(d) && !hasPunycodeLabel(d) {
		return strings.ToLower(d), nil
	}
	p := idna.New(
		idna.MapForLookup(),
		idna.Transitional(false),
		idna.BidiRule(),
		idna.CheckJoiners(true),
		idna.CheckHyphens(false),
		idna.StrictDomainName(false),
		idna.VerifyDNSLength(false),
	)
	out, err := p.ToASCII(d)
	if err != nil || out == "" {
		return "", ErrInvalidURL
	}
	return out, nil
}

func hasPunycodeLabel(d string) bool {
	for l := range strings.SplitSeq(d, ".") {
		if len(l) >= 4 && strings.EqualFold(l[:4], "xn--") {
			return true
		}
	}
	return false
}

// forbiddenDomainByte is the WHATWG forbidden domain code point set
// (ASCII part; the input is ASCII by now).
func forbiddenDomainByte(c byte) bool {
	if c <= 0x20 || c == 0x7f {
		return true
	}
	switch c {
	case '#', '/', ':', '<', '>', '?', '@', '[', '\\', ']', '^', '|', '%':
		return true
	}
	return false
}

func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// endsInNumber is the WHATWG "ends in a number" checker.
func endsInNumber(s string) bool {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" {
		if len(parts) == 1 {
			return false
		}
		parts = parts[:len(parts)-1]
	}
	last := parts[len(parts)-1]
	if last != "" && allDigits(last) {
		return true
	}
	_, ok := parseIPv4Number(last)
	return ok
}

// parseIPv4 is the WHATWG IPv4 parser.
func parseIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1]
	}
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v := last
	for i, n := range nums[:len(nums)-1] {
		v += n << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseIPv4Number parses one part: decimal, octal (leading 0) or hex (0x).
// Values saturate above 2^32, which every caller refuses.
func parseIPv4Number(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	radix := uint64(10)
	switch {
	case len(s) >= 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, radix = s[2:], 16
	case len(s) >= 2 && s[0] == '0':
		s, radix = s[1:], 8
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		var d uint64
		c := s[i]
		switch {
		case isDigit(c):
			d = uint64(c - '0')
		case radix == 16 && isHex(c):
			d = uint64(unhex(c))
		default:
			return 0, false
		}
		if d >= radix {
			return 0, false
		}
		if n <= 1<<33 {
			n = n*radix + d
		}
	}
	return n, true
}

// serializeIPv6 is the WHATWG IPv6 serialiser: lowercase hex pieces without
// leading zeros, the first longest run of two or more zero pieces
// compressed, and no dotted IPv4 tail.
func serializeIPv6(a netip.Addr) string {
	b := a.As16()
	var p [8]uint16
	for i := range p {
		p[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	start, length := -1, 1
	for i := 0; i < 8; {
		if p[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && p[j] == 0 {
			j++
		}
		if j-i > length {
			start, length = i, j-i
		}
		i = j
	}
	var s strings.Builder
	for i := 0; i < 8; i++ {
		if i == start {
			if i == 0 {
				s.WriteString("::")
			} else {
				s.WriteByte(':')
			}
			i += length - 1
			continue
		}
		s.WriteString(strconv.FormatUint(uint64(p[i]), 16))
		if i < 7 {
			s.WriteByte(':')
		}
	}
	return s.String()
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case isDigit(c):
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

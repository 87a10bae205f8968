package safefetch

import (
	"errors"
	"testing"
)

// admitCases pin docs/web.md: the WHATWG canonical href of every accepted
// spelling, and the class of every refusal. "want" is the href, or "" when
// err is set.
var admitCases = []struct {
	name string
	in   string
	want string
	err  error
}{
	// Encoded IPv4 is canonicalised (then judged by the address policy).
	{"decimal-dotless", "http://2130706433", "http://127.0.0.1/", nil},
	{"hex-dotless", "http://0x7f000001", "http://127.0.0.1/", nil},
	{"hex-dotless-imds", "http://0xA9FEA9FE", "http://169.254.169.254/", nil},
	{"hex-parts", "http://0x7f.0x0.0x0.0x1", "http://127.0.0.1/", nil},
	{"hex-parts-imds", "http://0xA9.0xFE.0xA9.0xFE", "http://169.254.169.254/", nil},
	{"hex-private", "http://0xc0a80014", "http://192.168.0.20/", nil},
	{"octal-part", "http://0177.0.0.1", "http://127.0.0.1/", nil},
	{"octal-dotless", "http://017700000001", "http://127.0.0.1/", nil},
	{"octal-padded", "http://00000177.0.0.01", "http://127.0.0.1/", nil},
	{"mixed-radix", "http://0x7f.0.0177.1", "http://127.0.127.1/", nil},
	{"mixed-radix-2", "http://127.0x0.00.0x1", "http://127.0.0.1/", nil},
	{"short-two-parts", "http://127.1", "http://127.0.0.1/", nil},
	{"short-three-parts", "http://127.0.1", "http://127.0.0.1/", nil},
	{"single-zero", "http://0/", "http://0.0.0.0/", nil},
	{"short-public", "http://1.256/", "http://1.0.1.0/", nil},
	{"max-dotless", "http://4294967295", "http://255.255.255.255/", nil},
	{"trailing-dot-v4", "http://127.0.0.1./", "http://127.0.0.1/", nil},
	{"percent-encoded-v4", "http://%31%32%37.0.0.1/", "http://127.0.0.1/", nil},
	{"percent-encoded-dot", "http://127%2E0%2e0.1/", "http://127.0.0.1/", nil},
	{"circled-digits", "http://①②⑦.⓪.⓪.①/", "http://127.0.0.1/", nil},
	{"circled-letters", "http://ⓔⓧⓐⓜⓟⓛⓔ.ⓒⓞⓜ/", "http://example.com/", nil},
	{"fullwidth-dot", "http://127。0。0。1/", "http://127.0.0.1/", nil},
	{"idna-unicode", "http://bücher.example/", "http://xn--bcher-kva.example/", nil},
	{"upper-case-host", "HTTP://EXAMPLE.COM/A", "http://example.com/A", nil},
	{"backslash-before-at", `http://127.0.0.1\@evil.com/`, "http://127.0.0.1/@evil.com/", nil},
	{"backslash-authority", `http:\\127.0.0.1\x`, "http://127.0.0.1/x", nil},
	{"slash-backslash-slash", `http:/\/127.0.0.1`, "http://127.0.0.1/", nil},
	{"no-slashes", "http:127.0.0.1", "http://127.0.0.1/", nil},
	{"many-slashes", "http:////127.0.0.1", "http://127.0.0.1/", nil},
	{"v6-mapped-expanded", "http://[0:0:0:0:0:ffff:127.0.0.1]", "http://[::ffff:7f00:1]/", nil},
	{"v6-compatible-dotted", "http://[::127.0.0.1]", "http://[::7f00:1]/", nil},
	{"v6-upper", "http://[::FFFF:7F00:1]/", "http://[::ffff:7f00:1]/", nil},
	{"v6-zero-runs", "http://[2001:0db8:0:0:1:0:0:1]/", "http://[2001:db8::1:0:0:1]/", nil},
	{"v6-port", "http://[2606:4700:4700::1111]:8080/", "http://[2606:4700:4700::1111]:8080/", nil},
	{"tab-newline-removed", "ht\ttp://127.0.\n0.1/\r", "http://127.0.0.1/", nil},
	{"c0-space-trimmed", "\x00 http://example.com/ \x01", "http://example.com/", nil},
	{"empty-userinfo", "http://@example.com/", "http://example.com/", nil},
	{"empty-user-password", "http://:@example.com/", "http://example.com/", nil},
	{"fragment-removed", "http://example.com/a?b#frag", "http://example.com/a?b", nil},
	{"default-port-http", "http://example.com:80/", "http://example.com/", nil},
	{"default-port-https", "https://example.com:443", "https://example.com/", nil},
	{"default-port-padded", "http://example.com:0080/", "http://example.com/", nil},
	{"port-kept", "http://example.com:8080", "http://example.com:8080/", nil},
	{"port-max", "http://example.com:65535", "http://example.com:65535/", nil},
	{"empty-port", "http://example.com:/", "http://example.com/", nil},
	{"dot-segments", "http://e.test/a/./b/../c", "http://e.test/a/c", nil},
	{"encoded-dot-segments", "http://e.test/a/%2e%2E/x/%2e", "http://e.test/x/", nil},
	{"dot-segments-above-root", "http://e.test/../../x", "http://e.test/x", nil},
	{"path-encoding", "http://e.test/a b\"<>`{}é", "http://e.test/a%20b%22%3C%3E%60%7B%7D%C3%A9", nil},
	{"query-encoding", "http://e.test/?a b'\"é", "http://e.test/?a%20b%27%22%C3%A9", nil},
	{"trailing-dot-name", "http://localhost./", "http://localhost./", nil},
	{"scheme-case", "HtTpS://example.com", "https://example.com/", nil},

	// The parser refuses these: "Invalid URL".
	{"v4-part-over-255", "http://256.0.0.1", "", ErrInvalidURL},
	{"v4-last-over-255", "http://1.2.3.256", "", ErrInvalidURL},
	{"v4-middle-over-255", "http://1.300.3.4", "", ErrInvalidURL},
	{"v4-five-parts", "http://1.2.3.4.5", "", ErrInvalidURL},
	{"v4-dotless-overflow", "http://4294967296", "", ErrInvalidURL},
	{"v4-hex-overflow", "http://0x100000000", "", ErrInvalidURL},
	{"v4-hex-wide", "http://0x7f0000000001", "", ErrInvalidURL},
	{"v4-short-overflow", "http://1.2.65536", "", ErrInvalidURL},
	{"v4-huge", "http://99999999999999999999999999", "", ErrInvalidURL},
	{"v4-letter-prefix", "http://a0177.0.0.1", "", ErrInvalidURL},
	{"v4-zero-letter-prefix", "http://0a177.0.0.1", "", ErrInvalidURL},
	{"v4-octal-8", "http://08.0.0.1", "", ErrInvalidURL},
	{"v4-bad-hex", "http://0xg.0.0.1", "", ErrInvalidURL},
	{"v4-empty-part", "http://1..2.3", "", ErrInvalidURL},
	{"ends-in-number", "http://foo.0x7f", "", ErrInvalidURL},
	{"ends-in-number-09", "http://foo.09", "", ErrInvalidURL},
	{"port-plus", "http://example.com:+80", "", ErrInvalidURL},
	{"port-minus", "http://example.com:-80", "", ErrInvalidURL},
	{"port-trailing-letters", "http://example.com:80a", "", ErrInvalidURL},
	{"port-padded-letters", "http://example.com:0080a", "", ErrInvalidURL},
	{"port-above-max", "http://example.com:65536", "", ErrInvalidURL},
	{"port-huge", "http://example.com:99999999999999999999", "", ErrInvalidURL},
	{"port-double", "http://127.0.0.1:80:80", "", ErrInvalidURL},
	{"port-zero", "http://example.com:0", "", ErrInvalidURL},
	{"v6-unbracketed", "http://::1/", "", ErrInvalidURL},
	{"v6-unbracketed-2", "http://2001:db8::1/", "", ErrInvalidURL},
	{"v6-zone-encoded", "http://[fe80::1%25eth0]/", "", ErrInvalidURL},
	{"v6-zone-raw", "http://[fe80::1%eth0]/", "", ErrInvalidURL},
	{"v6-zone-empty", "http://[::1%25]/", "", ErrInvalidURL},
	{"v6-unclosed", "http://[::1/", "", ErrInvalidURL},
	{"v6-trailing-junk", "http://[::1]x/", "", ErrInvalidURL},
	{"v6-bad", "http://[1::2::3]/", "", ErrInvalidURL},
	{"v6-v4-leading-zero", "http://[::ffff:127.0.0.01]/", "", ErrInvalidURL},
	{"v6-empty-brackets", "http://[]/", "", ErrInvalidURL},
	{"v6-v4-literal-in-brackets", "http://[127.0.0.1]/", "", ErrInvalidURL},
	{"nul-encoded", "http://127.0.0.1%00.evil.com/", "", ErrInvalidURL},
	{"nul-raw", "http://exa\x00mple.com/", "", ErrInvalidURL},
	{"space-in-host", "http://exa mple.com/", "", ErrInvalidURL},
	{"percent-in-host", "http://exa%zzmple.com/", "", ErrInvalidURL},
	{"caret-in-host", "http://exa^mple.com/", "", ErrInvalidURL},
	{"empty-host", "http://", "", ErrInvalidURL},
	{"empty-host-slash", "http:///", "", ErrInvalidURL},
	{"empty-host-port", "http://:80/", "", ErrInvalidURL},
	{"userinfo-no-host", "http://user@/", "", ErrInvalidURL},
	{"relative-no-base", "/etc/hosts", "", ErrInvalidURL},
	{"empty", "", "", ErrInvalidURL},
	{"no-scheme", "example.com", "", ErrInvalidURL},
	{"bad-idna", "http://xn--a.example/", "", ErrInvalidURL},

	// Scheme and credentials: "Only credential-free HTTP(S) URLs".
	{"file", "file:///etc/passwd", "", ErrScheme},
	{"gopher", "gopher://example.test/", "", ErrScheme},
	{"credentials", "http://user:password@example.test", "", ErrScheme},
	{"username-only", "http://user@example.test", "", ErrScheme},
	{"password-only", "http://:p@example.test", "", ErrScheme},
	{"at-decoy", "http://A.com@127.0.0.1", "", ErrScheme},
	{"ip-port-decoy", "http://1.1.1.1:80@127.0.0.1/", "", ErrScheme},
	{"fragment-cut-decoy", "http://127.0.0.1 &@evil.com# @google.com", "", ErrScheme},
	{"double-at", "http://a@b@127.0.0.1/", "", ErrScheme},
	{"javascript", "javascript:alert(1)", "", ErrScheme},
	{"data", "data:text/plain,hi", "", ErrScheme},
	{"ws", "ws://example.com/", "", ErrScheme},
}

func TestAdmit(t *testing.T) {
	for _, tc := range admitCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := admit(tc.in, nil)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, ErrUnsafe) {
					t.Fatalf("admit(%q) = %v, %v; want error %v", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("admit(%q) error %v; want %q", tc.in, err, tc.want)
			}
			if h := got.href(); h != tc.want {
				t.Errorf("admit(%q).href() = %q; want %q", tc.in, h, tc.want)
			}
			if got.u.String() != tc.want {
				t.Errorf("admit(%q): net/url form %q; want %q", tc.in, got.u.String(), tc.want)
			}
		})
	}
}

// TestAdmitRelative pins redirect resolution (docs/web.md): a Location is
// resolved against the current hop and admitted like any URL.
func TestAdmitRelative(t *testing.T) {
	base, err := admit("http://example.test/a/b?x", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, want string
		err            error
	}{
		{"absolute-path", "/private", "http://example.test/private", nil},
		{"protocol-relative", "//other.test/x", "http://other.test/x", nil},
		{"relative-path", "c", "http://example.test/a/c", nil},
		{"parent", "../c", "http://example.test/c", nil},
		{"query-only", "?y", "http://example.test/a/b?y", nil},
		{"fragment-only", "#f", "http://example.test/a/b?x", nil},
		{"empty", "", "http://example.test/a/b?x", nil},
		{"other-scheme-https", "https://x.test", "https://x.test/", nil},
		{"same-scheme-no-slash", "http:foo", "http://example.test/a/foo", nil},
		{"same-scheme-one-slash", "http:/foo", "http://example.test/foo", nil},
		{"same-scheme-slash-backslash", `http:/\/127.0.0.1`, "http://127.0.0.1/", nil},
		{"backslashes", `\\evil.test\x`, "http://evil.test/x", nil},
		{"slash-backslash", `/\evil.test`, "http://evil.test/", nil},
		{"https-no-slash", "https:127.0.0.1", "https://127.0.0.1/", nil},
		{"file", "file:///etc/passwd", "", ErrScheme},
		{"gopher", "gopher://127.0.0.1:6379/_save", "", ErrScheme},
		{"credentials", "http://u:p@public.test/", "", ErrScheme},
		{"bad-host", "http://[::1/", "", ErrInvalidURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := admit(tc.in, base)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("admit(%q, base) = %v, %v; want %v", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got.href() != tc.want {
				t.Fatalf("admit(%q, base) = %v, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// Package safefetch fetches guest-supplied URLs on the host without
// reaching the operator's private network or cloud metadata.
//
// The contract (docs/web.md):
//
//   - Admission: a URL is parsed the WHATWG way, not by net/url, so that
//     every spelling of an address is canonicalised before it is judged:
//     decimal, octal, hex and short IPv4 forms, a trailing dot,
//     percent-encoded and IDNA-mapped hosts (circled digits), backslashes
//     and missing slashes after the scheme, compressed or dotted IPv6.
//     What WHATWG refuses (out-of-range numbers, bad ports, zone
//     identifiers, NUL, unbracketed IPv6) is ErrInvalidURL. Only http and
//     https without a username or password are admitted (ErrScheme). The
//     fragment is dropped. Any port is allowed; no host name is
//     deny-listed, names are judged by their DNS answers.
//   - Address policy (IsPublicAddr): conservative globally routable
//     unicast. Loopback, private, CGNAT, link-local and metadata,
//     documentation, benchmarking, multicast, reserved, and every IPv6
//     transition form (NAT64, 6to4, Teredo, IPv4-compatible and
//     -translated) are refused even when they embed a public IPv4; an
//     IPv4-mapped address is judged by its IPv4 part.
//   - Vetting: a literal is judged directly; a name is resolved once per
//     hop and refused as a whole if any answer is refused or there is none.
//   - Pinning: the connection goes to a vetted address; Host, SNI and
//     certificate verification use the name. Failover walks the vetted list
//     in order on connection-class errors only, and never re-resolves. A
//     net.Dialer.Control hook re-checks the connected address.
//   - Redirects: every hop is re-admitted and re-vetted, including the same
//     host name (the DNS-rebinding defence); Options.NoRedirects hands the
//     redirect back instead.
//   - Bounds: one deadline for the whole fetch, a fixed per-address connect
//     deadline, a wire and a decoded body bound (identity, gzip, zlib
//     deflate, brotli; anything else or stacked is refused), a declared
//     Content-Length check. Trusted request headers only, Accept-Encoding
//     always identity, no environment proxy, no cookies, no pooling.
//
// This is written by hand because no library does all of it: net/url keeps
// encoded IPv4 spellings and zones as opaque host names (which a cgo
// resolver then turns into 127.0.0.1 through inet_aton); dial-hook
// libraries judge each dialled address alone (so a mixed answer still
// connects) and bound neither bodies nor decompression; and net/http adds
// Accept-Encoding: gzip and decompresses without a bound, and honours
// HTTP_PROXY. Resolver and Transport (and Pinned.Dial, Pinned.TLSConfig)
// are trusted test seams; never wire them to guest input.
package safefetch

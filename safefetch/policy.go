package safefetch

import (
	"net/netip"
	"strings"
)

// refusedV4 lists the IPv4 ranges that are not globally routable unicast
// (docs/web.md). Everything else is public, including 192.0.1.0/24, AS112
// (192.31.196.0/24, 192.175.48.0/24), AMT (192.52.193.0/24) and Azure
// WireServer 168.63.129.16, as in the reference.
var refusedV4 = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", 0.0.0.0
	netip.MustParsePrefix("10.0.0.0/8"),      // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT; Alibaba Cloud metadata
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local; AWS/GCP/Azure/DO metadata, ECS
	netip.MustParsePrefix("172.16.0.0/12"),   // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments; Oracle metadata
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),  // RFC 1918
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("224.0.0.0/3"),     // multicast, reserved 240/4, broadcast
}

// IsPublicAddr reports whether a is a conservative globally routable unicast
// address (docs/web.md). Anything not positively public is refused: an invalid or
// zoned address, every IPv6 address outside 2000::/3, 6to4, Teredo, NAT64,
// IPv4-compatible and IPv4-translated forms, documentation, benchmarking and
// ORCHID blocks. An IPv4-mapped address (::ffff:a.b.c.d) is judged by its
// IPv4 part.
//
// IPv6 is decided by construction on the expanded hextets, not by walking a
// deny-list: netip.Prefix.Contains is false for zoned and for IPv4-mapped
// addresses, and net.IP.IsGlobalUnicast calls several of these ranges
// global, so neither is used.
func IsPublicAddr(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.Is4() || a.Is4In6() {
		v4 := a.Unmap()
		for _, p := range refusedV4 {
			if p.Contains(v4) {
				return false
			}
		}
		return true
	}
	b := a.As16()
	h0 := uint16(b[0])<<8 | uint16(b[1])
	h1 := uint16(b[2])<<8 | uint16(b[3])
	switch {
	case h0 < 0x2000 || h0 > 0x3fff: // outside 2000::/3 (covers ::/128, ::1, ::/96, NAT64, ULA, link-local, multicast…)
		return false
	case h0 == 0x2002: // 6to4, whatever it embeds
		return false
	case h0 == 0x3fff: // 3fff::/16, including documentation 3fff::/20
		return false
	case h0 == 0x2001:
		switch {
		case h1 == 0: // Teredo 2001:0::/32
			return false
		case h1 == 2: // 2001:2::/32 (benchmarking 2001:2::/48)
			return false
		case h1 == 0xdb8: // documentation
			return false
		case h1 >= 0x10 && h1 <= 0x2f: // ORCHID and ORCHIDv2
			return false
		}
	}
	return true
}

// IsPublicAddress is the reference's isPublicAddress: raw must be a strict
// IP literal (IPv4 as exactly four decimal parts without leading zeros, or
// IPv6, optionally in one pair of brackets, without a zone) that
// IsPublicAddr accepts. Encoded, short or zoned spellings are not public.
func IsPublicAddress(raw string) bool {
	s := strings.ToLower(raw)
	s = strings.TrimPrefix(s, "[")
	s = strings.TrimSuffix(s, "]")
	if strings.Contains(s, "%") {
		return false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return false
	}
	return IsPublicAddr(a)
}

package safefetch

import (
	"net/netip"
	"testing"
)

// policyCases are inputs to IsPublicAddress: the reference's test vectors 1–2, the address
// rows of A.3 and one sample of every range of the docs/web.md tables.
var policyCases = []struct {
	name string
	in   string
	want bool
}{
	// The reference's test (1): the 26 refused upstream vectors.
	{"upstream-loopback-v4", "127.0.0.1", false},
	{"upstream-rfc1918-10", "10.2.3.4", false},
	{"upstream-rfc1918-172", "172.31.1.1", false},
	{"upstream-imds", "169.254.169.254", false},
	{"upstream-rfc1918-192", "192.168.1.1", false},
	{"upstream-cgnat", "100.64.0.1", false},
	{"upstream-unspecified-v4", "0.0.0.0", false},
	{"upstream-multicast-v4", "224.0.0.1", false},
	{"upstream-benchmark", "198.18.0.1", false},
	{"upstream-test-net-1", "192.0.2.1", false},
	{"upstream-ietf-anycast", "192.0.0.9", false},
	{"upstream-loopback-v6", "::1", false},
	{"upstream-unspecified-v6", "::", false},
	{"upstream-ula", "fc00::1", false},
	{"upstream-link-local-v6", "fe80::1", false},
	{"upstream-mapped-loopback", "::ffff:127.0.0.1", false},
	{"upstream-mapped-loopback-expanded", "0:0:0:0:0:ffff:7f00:1", false},
	{"upstream-documentation-v6", "2001:db8::1", false},
	{"upstream-6to4-loopback", "2002:7f00:1::", false},
	{"upstream-teredo-compressed", "2001::1", false},
	{"upstream-teredo-compressed-2", "2001::abcd:1", false},
	{"upstream-teredo-full", "2001:0:4136:e378:8000:63bf:3fff:fdd2", false},
	{"upstream-orchid", "2001:10::1", false},
	{"upstream-orchid-v2", "2001:2f::1", false},
	{"upstream-nat64-loopback", "64:ff9b::7f00:1", false},
	{"upstream-mapped-imds", "::ffff:169.254.169.254", false},
	// The reference's test (2): the 7 public upstream vectors.
	{"upstream-public-google", "8.8.8.8", true},
	{"upstream-public-cloudflare", "1.1.1.1", true},
	{"upstream-public-192-0-1", "192.0.1.1", true},
	{"upstream-public-v6-cloudflare", "2606:4700:4700::1111", true},
	{"upstream-public-v6-google", "2001:4860:4860::8888", true},
	{"upstream-public-drip", "2001:30::1", true},
	{"upstream-public-mapped", "::ffff:8.8.8.8", true},
	// A.3 address rows.
	{"a3-49-mapped-public-bracketed", "[::ffff:129.144.52.38]", true},
	{"a3-50-teredo-compressed", "2001::1", false},
	{"a3-69-as112-v4", "192.31.196.1", true},
	{"a3-69-amt-v4", "192.52.193.1", true},
	{"a3-69-as112-direct", "192.175.48.1", true},
	{"a3-69-amt-v6", "2001:3::1", true},
	{"a3-69-as112-v6-2620", "2620:4f:8000::1", true},
	{"a3-69-as112-v6-2001-4-112", "2001:4:112::1", true},
	{"a3-69-pcp-anycast", "2001:1::1", true},
	{"a3-70-drip", "2001:30::1", true},
	{"a3-70-mapped-public", "::ffff:8.8.8.8", true},
	{"a3-68-azure-wireserver", "168.63.129.16", true},
	// Every IPv4 range of the table, at both ends.
	{"v4-this-network-end", "0.255.255.255", false},
	{"v4-this-network-0-1-2-3", "0.1.2.3", false},
	{"v4-10-end", "10.255.255.255", false},
	{"v4-cgnat-end", "100.127.255.255", false},
	{"v4-cgnat-below", "100.63.255.255", true},
	{"v4-cgnat-above", "100.128.0.0", true},
	{"v4-loopback-end", "127.255.255.255", false},
	{"v4-link-local-start", "169.254.0.0", false},
	{"v4-ecs-metadata", "169.254.170.2", false},
	{"v4-172-16", "172.16.0.0", false},
	{"v4-172-below", "172.15.255.255", true},
	{"v4-172-above", "172.32.0.0", true},
	{"v4-ietf-dummy", "192.0.0.8", false},
	{"v4-ietf-oracle", "192.0.0.192", false},
	{"v4-ietf-170", "192.0.0.170", false},
	{"v4-192-0-3", "192.0.3.1", true},
	{"v4-6to4-relay", "192.88.99.1", false},
	{"v4-192-168-end", "192.168.255.255", false},
	{"v4-benchmark-19", "198.19.255.255", false},
	{"v4-benchmark-below", "198.17.255.255", true},
	{"v4-benchmark-above", "198.20.0.0", true},
	{"v4-test-net-2", "198.51.100.7", false},
	{"v4-test-net-3", "203.0.113.7", false},
	{"v4-multicast-end", "239.255.255.255", false},
	{"v4-reserved", "240.0.0.1", false},
	{"v4-broadcast", "255.255.255.255", false},
	{"v4-just-below-multicast", "223.255.255.255", true},
	// IPv6, every refused family.
	{"v6-compatible-public", "::8.8.8.8", false},
	{"v6-compatible-hex", "::808:808", false},
	{"v6-translated", "::ffff:0:808:808", false},
	{"v6-translated-loopback", "::ffff:0:127.0.0.1", false},
	{"v6-nat64-public", "64:ff9b::808:808", false},
	{"v6-nat64-imds", "64:ff9b::a9fe:a9fe", false},
	{"v6-nat64-local", "64:ff9b:1::1", false},
	{"v6-discard", "100::1", false},
	{"v6-discard-2", "100:0:0:1::1", false},
	{"v6-below-2000", "1fff:ffff::1", false},
	{"v6-srv6", "5f00::1", false},
	{"v6-above-3fff", "4000::1", false},
	{"v6-ula-imds", "fd00:ec2::254", false},
	{"v6-site-local", "fec0::1", false},
	{"v6-multicast", "ff02::1", false},
	{"v6-6to4-public", "2002:808:808::", false},
	{"v6-6to4-imds", "2002:a9fe:a9fe::", false},
	{"v6-3fff-documentation", "3fff::1", false},
	{"v6-3fff-end", "3fff:ffff::1", false},
	{"v6-teredo-32", "2001:0:1::1", false},
	{"v6-benchmark", "2001:2::1", false},
	{"v6-benchmark-wide", "2001:2:ffff::1", false},
	{"v6-orchid-end", "2001:1f::1", false},
	{"v6-2000-start", "2000::1", true},
	{"v6-3ffe", "3ffe::1", true},
	{"v6-2001-4", "2001:4::1", true},
	{"v6-2001-200", "2001:200::1", true},
	{"v6-upper-case", "2606:4700:4700::ABCD", true},
	{"v6-expanded-public", "2606:4700:4700:0000:0000:0000:0000:1111", true},
	{"v6-mapped-public-hex", "::ffff:808:808", true},
	{"v6-mapped-upper", "::FFFF:7F00:1", false},
	// Input handling: not strict literals, zones.
	{"zone-link-local", "fe80::1%eth0", false},
	{"zone-public", "2606:4700:4700::1111%eth0", false},
	{"zone-encoded", "[fe80::1%25eth0]", false},
	{"zone-empty", "[::1%]", false},
	{"v4-leading-zero", "08.8.8.8", false},
	{"v4-short", "8.8.8", false},
	{"v4-hex", "0x8.8.8.8", false},
	{"v4-decimal", "134744072", false},
	{"v4-trailing-dot", "8.8.8.8.", false},
	{"empty", "", false},
	{"name", "example.com", false},
	{"brackets-only", "[]", false},
}

func TestIsPublicAddress(t *testing.T) {
	for _, tc := range policyCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPublicAddress(tc.in); got != tc.want {
				t.Errorf("IsPublicAddress(%q) = %v; want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestIsPublicAddrZonedAndInvalid(t *testing.T) {
	for _, a := range []netip.Addr{
		{},
		netip.MustParseAddr("fe80::1").WithZone("eth0"),
		netip.MustParseAddr("2606:4700:4700::1111").WithZone("1"),
	} {
		if IsPublicAddr(a) {
			t.Errorf("IsPublicAddr(%v) = true; want false", a)
		}
	}
}

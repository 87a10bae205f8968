package attach

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestSanitizeName(t *testing.T) {
	r := strings.Repeat
	cases := []struct {
		name, in, want string
	}{
		{"plain", "photo.png", "photo.png"},
		{"spaces and unicode kept", " Ünïcødé name.txt", " Ünïcødé name.txt"},
		{"empty becomes file", "", "file"},
		{"NFC composes", "e\u0301t\u00e9.png", "\u00e9t\u00e9.png"},
		{"backslash", `a\b`, "a_b"},
		{"C0, DEL and C1 controls", "a\x00b\nc\x7fd\u0085e\tf", "a_b_c_d_e_f"},
		{"invalid UTF-8 bytes", "a\xff\xfeb", "a_b"},
		{"a slash alone", "/", "_"},
		{"[SEC] path traversal ../../etc/passwd", "../../etc/passwd", "__.._etc_passwd"},
		{"[SEC] absolute path", "/etc/passwd", "_etc_passwd"},
		{"[SEC] windows traversal", `..\..\boot.ini`, "__.._boot.ini"},
		{"[SEC] hidden file ...hidden", "...hidden", "_hidden"},
		{"[SEC] dot", ".", "_"},
		{"[SEC] dot dot", "..", "_"},
		{"[SEC] dots only", ".....", "_"},
		{"dots inside kept", "a..b...", "a..b..."},
		{"200 ascii keeps the last 120", r("x", 80) + r("y", 120), r("y", 120)},
		{"the extension survives the cut", r("a", 200) + ".png", r("a", 116) + ".png"},
		{"exactly 120 units", r("z", 120), r("z", 120)},
		{"emoji split by the cut is dropped", r("a", 79) + "😀" + r("b", 119), r("b", 119)},
		{"emoji on the cut kept whole", r("a", 80) + r("😀", 60), r("😀", 60)},
		{"[SEC] the cut exposes dots", r("a", 10) + "..." + r("b", 117), "_" + r("b", 117)},
		{"control chars past the cut", r("\x01", 150) + "x", r("_", 119) + "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SanitizeName(tc.in)
			if got != tc.want {
				t.Errorf("SanitizeName(%q) = %q; want %q", tc.in, got, tc.want)
			}
			if !wire.ValidSafeName(got) || rtsandbox.UTF16Len(got) > MaxNameUnits {
				t.Errorf("SanitizeName(%q) = %q is not a safe name of ≤ %d units", tc.in, got, MaxNameUnits)
			}
		})
	}
}

func TestSuffixUTF16(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"", 5, ""},
		{"abc", 0, ""},
		{"abc", 2, "bc"},
		{"abc", 3, "abc"},
		{"a😀", 2, "😀"},
		{"a😀", 1, ""},
		{"😀b", 2, "b"},
		{"é😀", 3, "é😀"},
	}
	for _, tc := range cases {
		if got := suffixUTF16(tc.in, tc.n); got != tc.want {
			t.Errorf("suffixUTF16(%q, %d) = %q; want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestFileName(t *testing.T) {
	r := strings.Repeat
	cases := []struct {
		name   string
		prefix string
		index  int
		in     string
		want   string
		err    error
	}{
		{"message attachment", "1234567890123456789", 0, "photo.png", "1234567890123456789-0-photo.png", nil},
		{"referenced attachment", "1234567890123456789-ref", 3, "a.txt", "1234567890123456789-ref-3-a.txt", nil},
		{"empty name", "m", 1, "", "m-1-file", nil},
		{"[SEC] path traversal stays in the directory", "m", 0, "../../etc/passwd", "m-0-__.._etc_passwd", nil},
		{"160-char prefix", r("p", 160), 0, "x", r("p", 160) + "-0-x", nil},
		{"CJK name cut to NAME_MAX bytes", "p", 0, r("漢", 130), "p-0-" + r("漢", 83), nil},
		{"long prefix and long name fit NAME_MAX", r("p", 160), 19, r("x", 200), r("p", 160) + "-19-" + r("x", 91), nil},
		{"[SEC] empty prefix", "", 0, "x", "", ErrPrefix},
		{"[SEC] prefix with a slash", "a/b", 0, "x", "", ErrPrefix},
		{"[SEC] prefix with dots", "..", 0, "x", "", ErrPrefix},
		{"[SEC] prefix with a space", "a b", 0, "x", "", ErrPrefix},
		{"[SEC] prefix with unicode", "ａ", 0, "x", "", ErrPrefix},
		{"[SEC] 161-char prefix", r("p", 161), 0, "x", "", ErrPrefix},
		{"negative index", "m", -1, "x", "", rtsandbox.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FileName(tc.prefix, tc.index, tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || got != "" {
					t.Fatalf("FileName = %q, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FileName = %q, %v; want %q", got, err, tc.want)
			}
			if !wire.ValidSafeName(got) || len(got) > maxNameBytes {
				t.Errorf("FileName = %q is not a safe name of ≤ %d bytes", got, maxNameBytes)
			}
		})
	}
}

// FuzzSanitizeName checks that any name sanitises to a safe name of at
// most 120 units that does not start with a dot and sanitises to itself,
// and that FileName's result always fits NAME_MAX.
func FuzzSanitizeName(f *testing.F) {
	for _, s := range []string{"", ".", "..", "../../etc/passwd", "...hidden", "a\x00b", "\xff", "e\u0301", strings.Repeat("😀", 70), strings.Repeat("漢", 130)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := SanitizeName(name)
		if !wire.ValidSafeName(got) || rtsandbox.UTF16Len(got) > MaxNameUnits {
			t.Fatalf("SanitizeName(%q) = %q is not a safe name of ≤ %d units", name, got, MaxNameUnits)
		}
		if strings.HasPrefix(got, ".") {
			t.Fatalf("SanitizeName(%q) = %q starts with a dot", name, got)
		}
		if again := SanitizeName(got); again != got {
			t.Fatalf("SanitizeName is not idempotent: %q → %q → %q", name, got, again)
		}
		file, err := FileName(strings.Repeat("m", MaxPrefixLen), 19, name)
		if err != nil || !wire.ValidSafeName(file) || len(file) > maxNameBytes || !utf8.ValidString(file) {
			t.Fatalf("FileName(…, %q) = %q, %v", name, file, err)
		}
	})
}

package upstream

import (
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// Forms returns the six forms in which a reflected credential is looked
// for: raw, encodeURIComponent, standard base64 with padding, base64url
// without padding, and lower- and uppercase hex of the UTF-8 bytes.
func Forms(key string) []string {
	b := []byte(key)
	return []string{
		key,
		jsonjs.EncodeURIComponent(key),
		base64.StdEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)),
	}
}

// CheckJSON reports whether body is exactly one JSON value and, when key is
// not empty, whether any decoded string value or object key contains key
// in one of its six forms. It returns nil, ErrNotJSON or ErrReflect.
//
// The scan (scan.go) sees every string rather than decoding into maps:
// duplicate object keys, which a map decode would drop, cannot hide a
// reflected key that the raw bytes still carry. Escapes are decoded first,
// so "\u002d" cannot hide one either. Splitting a key across strings or
// other encodings are not detected: this is defence in depth.
func CheckJSON(body []byte, key string) error {
	var forms [][]byte
	if key != "" {
		for _, f := range Forms(key) {
			forms = append(forms, []byte(f))
		}
	}
	valid, reflected := scan(body, forms)
	switch {
	case reflected:
		return ErrReflect
	case !valid:
		return ErrNotJSON
	}
	return nil
}

func containsAny(s string, forms []string) bool {
	for _, f := range forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

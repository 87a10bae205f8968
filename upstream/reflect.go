package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
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
// The walk reads tokens rather than decoding into maps, so every string is
// seen: duplicate object keys, which a map decode would drop, cannot hide a
// reflected key that the raw bytes still carry. Escapes are decoded first,
// so "\u002d" cannot hide one either. Splitting a key across strings or
// other encodings are not detected: this is defence in depth.
func CheckJSON(body []byte, key string) error {
	var forms []string
	if key != "" {
		forms = Forms(key)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	depth, values := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ErrNotJSON
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
			} else {
				depth--
			}
		case string:
			if containsAny(v, forms) {
				return ErrReflect
			}
		}
		if depth == 0 {
			values++
			if dec.More() {
				return ErrNotJSON // a second top-level value
			}
		}
	}
	if depth != 0 || values != 1 {
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

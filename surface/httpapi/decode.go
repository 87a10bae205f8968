package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// decoder reads one JSON object strictly, token by token, so that unknown
// and duplicate keys are refused by name (encoding/json would keep the
// last duplicate, and reports unknown keys only as error text).
type decoder struct {
	dec  *json.Decoder
	big  bool  // the body passed its bound
	busy bool  // no upload slot was free for a body past MaxBodyBytes
	held bool  // the attachments budget had no room for the data
	data int64 // bytes of attachment data values read (attachments.go)
}

// newDecoder checks the content type and bounds the body to MaxBodyBytes;
// on refusal it returns nil with the status and text to answer.
func newDecoder(w http.ResponseWriter, r *http.Request) (*decoder, int, string) {
	return newBoundedDecoder(w, r, MaxBodyBytes, nil)
}

// newBoundedDecoder is newDecoder with the body bounded to limit and read
// through meter when not nil (attachments.go).
func newBoundedDecoder(w http.ResponseWriter, r *http.Request, limit int64, meter *uploadMeter) (*decoder, int, string) {
	if !checkJSON(r) {
		return nil, http.StatusUnsupportedMediaType, textContentType
	}
	if r.ContentLength > limit {
		return nil, http.StatusRequestEntityTooLarge, textBodyTooLarge
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, limit)
	if meter != nil {
		meter.r, body = body, meter
	}
	return &decoder{dec: json.NewDecoder(body)}, 0, ""
}

func (d *decoder) tooLarge() bool { return d.big }

// outside is the bytes read so far outside attachment data.
func (d *decoder) outside() int64 { return d.dec.InputOffset() - d.data }

// refusal is the status and text of a body refused for what the API can
// hold rather than for its content (413, 503), or 0.
func (d *decoder) refusal() (int, string) {
	switch {
	case d.big:
		return http.StatusRequestEntityTooLarge, textBodyTooLarge
	case d.busy:
		return http.StatusServiceUnavailable, textUploadsBusy
	case d.held:
		return http.StatusServiceUnavailable, textAttachmentsHeld
	}
	return 0, ""
}

// syntax is the text for a read or syntax error.
func (d *decoder) syntax(err error) string {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		d.big = true
		return textBodyTooLarge
	}
	if errors.Is(err, errUploadsBusy) {
		d.busy = true
		return textUploadsBusy
	}
	return "body: invalid JSON at byte " + strconv.FormatInt(d.dec.InputOffset(), 10)
}

// object reads an object at path ("" for the body) and calls field for each
// key, which must consume the value; a non-empty text stops the walk.
func (d *decoder) object(path string, field func(key string) string) string {
	tok, err := d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	if tok != json.Delim('{') {
		if path == "" {
			return "body: must be a JSON object"
		}
		return path + ": must be an object"
	}
	seen := map[string]bool{}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return d.syntax(err)
		}
		key, _ := tok.(string) // object keys are always strings
		full := key
		if path != "" {
			full = path + "." + key
		}
		if seen[key] {
			return "duplicate key " + quoteKey(full)
		}
		seen[key] = true
		if msg := field(key); msg != "" {
			return msg
		}
	}
	if _, err := d.dec.Token(); err != nil { // the closing brace
		return d.syntax(err)
	}
	return ""
}

// unknown is the text for a key the API does not know.
func unknown(path string) string { return "unknown key " + quoteKey(path) }

func quoteKey(k string) string {
	if len(k) > 64 {
		k = k[:64] + "…"
	}
	return strconv.Quote(k)
}

func (d *decoder) value(path string) (json.RawMessage, string) {
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		return nil, d.syntax(err)
	}
	return raw, ""
}

// str reads a JSON string (null is refused).
func (d *decoder) str(path string, dst *string) string {
	raw, msg := d.value(path)
	if msg != "" {
		return msg
	}
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
		return path + ": must be a string"
	}
	return ""
}

// boolean reads true or false.
func (d *decoder) boolean(path string, dst *bool) string {
	raw, msg := d.value(path)
	if msg != "" {
		return msg
	}
	switch {
	case bytes.Equal(raw, []byte("true")):
		*dst = true
	case bytes.Equal(raw, []byte("false")):
		*dst = false
	default:
		return path + ": must be true or false"
	}
	return ""
}

// end wants nothing but whitespace after the object.
func (d *decoder) end() string {
	_, err := d.dec.Token()
	switch {
	case err == io.EOF:
		return ""
	case err != nil:
		return d.syntax(err)
	}
	return "body: data after the JSON object"
}

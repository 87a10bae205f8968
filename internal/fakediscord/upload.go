package fakediscord

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"slices"
	"strconv"
)

// Uploads, as Discord takes them: a message with files is a
// multipart/form-data body whose part "payload_json" is the JSON the
// route would otherwise get and whose parts "files[n]" are the files,
// each with its filename. Discord refuses a body over the upload limit
// with 413 (code 40005).

// formOverhead is what a body may hold beyond the upload limit's file
// bytes: the JSON payload and the part headers.
const formOverhead = 1 << 20

var filePartRE = regexp.MustCompile(`^files\[([0-9]{1,2})\]$`)

// read reads r's body: JSON as it is, or a multipart upload. ok false
// comes with the answer refusing it.
func (s *Server) read(r *http.Request) (in request, refusal answer, ok bool) {
	limit := s.opts.MaxUploadBytes + formOverhead
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		return request{}, errorAnswer(http.StatusBadRequest, 0, "400: Bad Request"), false
	case int64(len(body)) > limit:
		return request{}, errorAnswer(http.StatusRequestEntityTooLarge, 40005, "Request entity too large"), false
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return request{body: body}, answer{}, true
	}
	in, err = s.form(body, params["boundary"])
	if errors.Is(err, errTooLarge) {
		return in, errorAnswer(http.StatusRequestEntityTooLarge, 40005, "Request entity too large"), false
	}
	if err != nil {
		return in, errorAnswer(http.StatusBadRequest, 50035, "Invalid Form Body"), false
	}
	return in, answer{}, true
}

var errTooLarge = errors.New("fakediscord: upload over the limit")

// form parses a multipart body: payload_json and files[n], nothing else;
// the files' bytes together must stay within the upload limit.
func (s *Server) form(body []byte, boundary string) (request, error) {
	var in request
	var total int64
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	index := map[string]int{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return in, err
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return in, err
		}
		// The filename as sent: Part.FileName would pass it through
		// filepath.Base.
		_, disp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		name, filename := p.FormName(), disp["filename"]
		switch m := filePartRE.FindStringSubmatch(name); {
		case name == "payload_json":
			in.body = data
		case m != nil && filename != "":
			if total += int64(len(data)); total > s.opts.MaxUploadBytes {
				return in, errTooLarge
			}
			index[name], _ = strconv.Atoi(m[1])
			in.files = append(in.files, File{Field: name, Name: filename, ContentType: p.Header.Get("Content-Type"), Data: data})
		default:
			return in, errors.New("fakediscord: unexpected form part " + strconv.Quote(name))
		}
	}
	slices.SortStableFunc(in.files, func(a, b File) int { return index[a.Field] - index[b.Field] })
	return in, nil
}

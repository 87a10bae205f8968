package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

func b64(n int) string {
	// n decoded bytes of zeros in padded standard base64, by length only.
	s := strings.Repeat("AAAA", n/3)
	switch n % 3 {
	case 1:
		s += "AA=="
	case 2:
		s += "AAA="
	}
	return s
}

func TestValidSafeName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"art.png", true}, {".hidden", true}, {" spaced ", true}, {"日本語.txt", true},
		{strings.Repeat("a", 255), true}, {strings.Repeat("😀", 127), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"../owner", false},
		{`a\b`, false}, {"a\x00b", false}, {"a\nb", false}, {"a\u0085b", false},
		{strings.Repeat("a", 256), false}, {strings.Repeat("😀", 128), false}, {"a\xffb", false},
	} {
		if got := ValidSafeName(tc.name); got != tc.ok {
			t.Errorf("ValidSafeName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestMediaBounds is the reference's test "Media bounds" plus the edges of docs/protocol.md, "Images and files".
func TestMediaBounds(t *testing.T) {
	img := func(data, mime string) Image { return Image{Data: data, MIMEType: mime} }
	for _, tc := range []struct {
		name   string
		images []Image
		want   error
	}{
		{"one png", []Image{img("AQID", rtsandbox.MIMEPNG)}, nil},
		{"nine images", func() []Image {
			var s []Image
			for range 9 {
				s = append(s, img("AQID", rtsandbox.MIMEPNG))
			}
			return s
		}(), ErrTooManyImages},
		{"bad base64", []Image{img("bad%", rtsandbox.MIMEPNG)}, ErrImage},
		{"text/plain", []Image{img("AQID", "text/plain")}, ErrImage},
		{"empty data", []Image{img("", rtsandbox.MIMEPNG)}, ErrImage},
		{"unpadded", []Image{img("AQI", rtsandbox.MIMEPNG)}, ErrImage},
		{"20 MiB", []Image{img(b64(rtsandbox.MaxImageBytes), rtsandbox.MIMEJPEG)}, nil},
		{"20 MiB + 1", []Image{img(b64(rtsandbox.MaxImageBytes+1), rtsandbox.MIMEJPEG)}, ErrImage},
		{"over 64 MiB total", []Image{img(b64(rtsandbox.MaxImageBytes), rtsandbox.MIMEPNG), img(b64(rtsandbox.MaxImageBytes), rtsandbox.MIMEPNG),
			img(b64(rtsandbox.MaxImageBytes), rtsandbox.MIMEPNG), img(b64(rtsandbox.MaxImageBytes), rtsandbox.MIMEPNG)}, ErrImageBudget},
	} {
		if err := ValidateImages(tc.images); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: ValidateImages = %v, want %v", tc.name, err, tc.want)
		}
	}
	file := func(name, data string) ReplyFile { return ReplyFile{Name: name, Data: data} }
	eleven := make([]ReplyFile, 11)
	for i := range eleven {
		eleven[i] = file("f", "AQID")
	}
	for _, tc := range []struct {
		name  string
		files []ReplyFile
		want  error
	}{
		{"art.png", []ReplyFile{file("art.png", "AQID")}, nil},
		{"../owner", []ReplyFile{file("../owner", "AQID")}, ErrReplyFile},
		{"bad%", []ReplyFile{file("a", "bad%")}, ErrReplyFile},
		{"empty", []ReplyFile{file("a", "")}, ErrReplyFile},
		{"eleven files", eleven, ErrTooManyFiles},
		{"10 MiB", []ReplyFile{file("a", b64(rtsandbox.MaxReplyFileBytes))}, nil},
		{"10 MiB + 1", []ReplyFile{file("a", b64(rtsandbox.MaxReplyFileBytes+1))}, ErrReplyFile},
	} {
		if err := ValidateReplyFiles(tc.files); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: ValidateReplyFiles = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Six files of 10 MiB are 60 MiB: over the 50 MiB total.
	big := make([]ReplyFile, 6)
	for i := range big {
		big[i] = file("f", b64(rtsandbox.MaxReplyFileBytes))
	}
	if err := ValidateReplyFiles(big); !errors.Is(err, ErrReplyBudget) {
		t.Errorf("60 MiB of reply files: %v, want ErrReplyBudget", err)
	}
}

func TestParseSessionTurn(t *testing.T) {
	good := SessionTurn{TurnID: "m1", Author: SessionAuthor{ID: "u", Name: "U"}, Text: "hi",
		Images: []Image{}, Thinking: "high"}
	data, _ := json.Marshal(good)
	got, err := ParseSessionTurn(data)
	if err != nil || !cmp.Equal(got, good) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*SessionTurn)
	}{
		{"turnId ..", func(s *SessionTurn) { s.TurnID = ".." }},
		{"turnId a/b", func(s *SessionTurn) { s.TurnID = "a/b" }},
		{"turnId 256", func(s *SessionTurn) { s.TurnID = strings.Repeat("a", 256) }},
		{"text over", func(s *SessionTurn) { s.Text = strings.Repeat("a", rtsandbox.MaxSessionText+1) }},
		{"memory over", func(s *SessionTurn) { s.Memory = strings.Repeat("a", rtsandbox.MaxSessionMemory+1) }},
		{"author id over", func(s *SessionTurn) { s.Author.ID = strings.Repeat("a", 257) }},
		{"principal over", func(s *SessionTurn) { s.Author.PrincipalID = strings.Repeat("a", 257) }},
		{"visibility", func(s *SessionTurn) { s.MemoryVisibility = "public" }},
		{"thinking", func(s *SessionTurn) { s.Thinking = "max" }},
		{"no thinking", func(s *SessionTurn) { s.Thinking = "" }},
		{"room bytes negative", func(s *SessionTurn) { s.Room = &SessionRoom{Bytes: -1, Files: 1} }},
		{"room files negative", func(s *SessionTurn) { s.Room = &SessionRoom{Bytes: 1, Files: -1} }},
		{"token short", func(s *SessionTurn) { s.BrokerToken = TurnToken(strings.Repeat("a", 42)) }},
		{"token not base64url", func(s *SessionTurn) { s.BrokerToken = TurnToken(strings.Repeat("a", 42) + "+") }},
	} {
		bad := good
		tc.edit(&bad)
		data, _ := json.Marshal(bad)
		if _, err := ParseSessionTurn(data); !errors.Is(err, ErrTurnInput) {
			t.Errorf("%s: %v, want ErrTurnInput", tc.name, err)
		}
	}
	roomy := good
	roomy.Room = &SessionRoom{Bytes: 8 << 20, Files: 3}
	data, _ = json.Marshal(roomy)
	if got, err := ParseSessionTurn(data); err != nil || !cmp.Equal(got, roomy) || !strings.HasSuffix(string(data), `"room":{"bytes":8388608,"files":3}}`) {
		t.Errorf("a turn with its room: %s → %+v, %v", data, got, err)
	}
	if data, _ := json.Marshal(good); strings.Contains(string(data), "room") || strings.Contains(string(data), "brokerToken") {
		t.Errorf("a turn without a disk bound or a network broker names a room or a token: %s", data)
	}
	tokened := good
	tokened.BrokerToken = TurnToken(strings.Repeat("A-_z", 10) + "abc")
	data, _ = json.Marshal(tokened)
	if got, err := ParseSessionTurn(data); err != nil || got.BrokerToken != tokened.BrokerToken {
		t.Errorf("a turn with its token: %s → %v", data, err)
	}
	if s := fmt.Sprintf("%v %+v %s", tokened, tokened, tokened.BrokerToken); strings.Contains(s, string(tokened.BrokerToken)) {
		t.Errorf("a printed turn shows its token: %s", s)
	}
	for _, raw := range []string{`[]`, `null`, `{"turnId":1}`, `{} {}`, `{"turnId":"m","author":{"id":"u","name":"U"},"text":"","memory":"","images":[],"thinking":"low","room":{"bytes":"1"}}`,
		`{"turnId":"m","author":{"id":"u","name":"U","principalId":""},"text":"","memory":"","images":[],"thinking":"low"}`} {
		if _, err := ParseSessionTurn([]byte(raw)); err == nil {
			t.Errorf("ParseSessionTurn(%s) accepted", raw)
		}
	}
}

func TestSessionResultJSON(t *testing.T) {
	for _, tc := range []struct {
		r    SessionResult
		want string
	}{
		{SessionResult{OK: true, Text: "done"}, `{"ok":true,"text":"done","files":[]}`},
		{SessionResult{OK: true, Text: "done", Files: []ReplyFile{{"art.png", "AQID"}}},
			`{"ok":true,"text":"done","files":[{"name":"art.png","data":"AQID"}]}`},
		{SessionResult{Error: "prompt failed", Text: "ignored"}, `{"ok":false,"error":"prompt failed"}`},
	} {
		got, err := json.Marshal(tc.r)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.r, got, err, tc.want)
		}
		var back SessionResult
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("Unmarshal(%s): %v", got, err)
		}
	}
	for _, raw := range []string{
		`{}`, `{"ok":"true"}`, `{"ok":true}`, `{"ok":true,"text":"a"}`, `{"ok":true,"text":"a","files":{}}`,
		`{"ok":true,"text":1,"files":[]}`, `{"ok":false}`, `{"ok":false,"error":1}`,
		`{"ok":true,"text":"a","files":[{"name":"../x","data":"AQID"}]}`,
		`{"ok":false,"error":"` + strings.Repeat("e", rtsandbox.MaxResultError+1) + `"}`,
		`{"ok":true,"text":"` + strings.Repeat("t", rtsandbox.MaxSessionText+1) + `","files":[]}`,
	} {
		var r SessionResult
		if err := json.Unmarshal([]byte(raw), &r); err == nil {
			t.Errorf("Unmarshal(%.60s) accepted", raw)
		}
	}
}

// TestParseWorkerReady covers docs/protocol.md, "The session protocol" and the reference's string-capability case.
func TestParseWorkerReady(t *testing.T) {
	for _, tc := range []struct {
		body string
		want WorkerReady
	}{
		{``, WorkerReady{}},
		{"  \n", WorkerReady{}},
		{`{}`, WorkerReady{}},
		{`{"privateHistory":true}`, WorkerReady{PrivateHistory: true}},
		{`{"capabilities":{}}`, WorkerReady{Capabilities: &WorkerCapabilities{}}},
		{`{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`,
			WorkerReady{Capabilities: &WorkerCapabilities{PrivateTo: true, ReaderRecords: true}}},
		{`{"capabilities":{"privateTo":true},"other":1}`, WorkerReady{Capabilities: &WorkerCapabilities{PrivateTo: true}}},
		{`{"sessionLoad":{}}`, WorkerReady{SessionLoad: &SessionLoad{}}},
		{`{"sessionLoad":{"droppedLines":3,"ignoredFiles":1}}`, WorkerReady{SessionLoad: &SessionLoad{DroppedLines: 3, IgnoredFiles: 1}}},
		{`{"sessionLoad":{"droppedLines":1073741824}}`, WorkerReady{SessionLoad: &SessionLoad{DroppedLines: MaxSessionLoadCount}}},
	} {
		got, err := ParseWorkerReady([]byte(tc.body))
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("ParseWorkerReady(%q) = %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}
	for _, body := range []string{`[]`, `null`, `true`, `{"privateHistory":"yes"}`,
		`{"capabilities":{"privateTo":"true"}}`, `{"capabilities":[]}`, `{"capabilities":null}`, `{"privateHistory":null}`, `{"capabilities":{"privateTo":null}}`, `{} x`,
		`{"sessionLoad":null}`, `{"sessionLoad":[]}`, `{"sessionLoad":{"droppedLines":-1}}`, `{"sessionLoad":{"droppedLines":1.5}}`,
		`{"sessionLoad":{"droppedLines":1e3}}`, `{"sessionLoad":{"droppedLines":"3"}}`, `{"sessionLoad":{"droppedLines":01}}`,
		`{"sessionLoad":{"droppedLines":1073741825}}`, `{"sessionLoad":{"ignoredFiles":99999999999999999999}}`, `{"sessionLoad":{"ignoredFiles":null}}`} {
		if _, err := ParseWorkerReady([]byte(body)); !errors.Is(err, ErrReadyHandshake) {
			t.Errorf("ParseWorkerReady(%q) = %v, want ErrReadyHandshake", body, err)
		}
	}
}

// FuzzParseWorkerReady holds the ready parser to its bounds: an
// accepted body's session load counts are within 0 to
// MaxSessionLoadCount and say what the body says.
func FuzzParseWorkerReady(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"privateHistory":true}`, `{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`,
		`{"sessionLoad":{"droppedLines":3,"ignoredFiles":1}}`, `{"sessionLoad":{"droppedLines":-1}}`, `{"sessionLoad":{"droppedLines":1073741825}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := ParseWorkerReady(data)
		if err != nil || w.SessionLoad == nil {
			return
		}
		l := *w.SessionLoad
		if l.DroppedLines < 0 || l.DroppedLines > MaxSessionLoadCount || l.IgnoredFiles < 0 || l.IgnoredFiles > MaxSessionLoadCount {
			t.Fatalf("accepted counts %+v", l)
		}
		var raw struct {
			SessionLoad struct{ DroppedLines, IgnoredFiles float64 }
		}
		if json.Unmarshal(data, &raw) == nil && (float64(l.DroppedLines) != raw.SessionLoad.DroppedLines || float64(l.IgnoredFiles) != raw.SessionLoad.IgnoredFiles) {
			t.Fatalf("counts %+v; the body says %+v", l, raw.SessionLoad)
		}
	})
}

func FuzzParseSessionTurn(f *testing.F) {
	f.Add([]byte(`{"turnId":"m1","author":{"id":"u","name":"U"},"text":"hi","memory":"","images":[{"data":"AQID","mimeType":"image/png"}],"thinking":"low"}`))
	f.Add([]byte(`{"turnId":"..","author":{},"images":null}`))
	f.Add([]byte(`{"turnId":"m1","author":{"id":"u","name":"U"},"text":"hi","memory":"","images":[],"thinking":"low","room":{"bytes":-1,"files":2}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		turn, err := ParseSessionTurn(data)
		if err != nil {
			return
		}
		if turn.Validate() != nil {
			t.Fatalf("accepted an invalid turn: %+v", turn)
		}
	})
}

func FuzzSessionResult(f *testing.F) {
	f.Add([]byte(`{"ok":true,"text":"done","files":[{"name":"art.png","data":"AQID"}]}`))
	f.Add([]byte(`{"ok":false,"error":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r SessionResult
		if json.Unmarshal(data, &r) != nil {
			return
		}
		if r.OK && ValidateReplyFiles(r.Files) != nil {
			t.Fatalf("accepted invalid files: %+v", r.Files)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzBase64Size holds the table loop to the pattern of docs/protocol.md, "Images and files".
func FuzzBase64Size(f *testing.F) {
	for _, s := range []string{"AQID", "AQ==", "AQI=", "A===", "A=B=", "bad%", "", "////", "++=="} {
		f.Add(s)
	}
	re := regexp.MustCompile(`^[A-Za-z0-9+/]*={0,2}$`)
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := rtsandbox.Base64Size(s, 1<<20)
		want := len(s)%4 == 0 && re.MatchString(s)
		if ok != want {
			t.Fatalf("Base64Size(%q) ok = %v, want %v", s, ok, want)
		}
		if ok && n != len(s)/4*3-(len(s)-len(strings.TrimRight(s, "="))) {
			t.Fatalf("Base64Size(%q) = %d", s, n)
		}
	})
}

// TestSessionToolResponseValidate: an answer's privateTo has at most
// MaxSessionField units and its image passes ValidateImage.
func TestSessionToolResponseValidate(t *testing.T) {
	png := &Image{MIMEType: "image/png", Data: "AQID"}
	for _, tc := range []struct {
		name string
		r    SessionToolResponse
		ok   bool
	}{
		{"plain", SessionToolResponse{OK: true, Text: "t"}, true},
		{"private-at-limit", SessionToolResponse{OK: true, PrivateTo: strings.Repeat("a", rtsandbox.MaxSessionField)}, true},
		{"private-over-limit", SessionToolResponse{OK: true, PrivateTo: strings.Repeat("a", rtsandbox.MaxSessionField+1)}, false},
		{"image", SessionToolResponse{OK: true, Image: png}, true},
		{"image-bad-type", SessionToolResponse{OK: true, Image: &Image{MIMEType: "image/bmp", Data: "AQID"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v; want ok %v", err, tc.ok)
			}
		})
	}
}

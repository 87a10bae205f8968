package modelapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const pngURL = "data:image/png;base64,AQID"

// userParts is a body with one user message whose content is parts.
func userParts(parts string) string {
	return `{"messages":[{"role":"user","content":[` + parts + `]}]}`
}

// imagePart is an image_url part of url.
func imagePart(url string) string {
	return `{"type":"image_url","image_url":{"url":"` + url + `"}}`
}

// bigURL is the data URL of n zero bytes as a PNG.
func bigURL(n int) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, n))
}

func textPtr(s string) *string { return &s }

// The session /model rule (ChatOptions.ImageParts): what a user message's
// parts may hold, each refusal named for the attack it stops.
func TestNormalizeChatImageParts(t *testing.T) {
	opts := ChatOptions{ImageParts: true}
	eight := strings.TrimSuffix(strings.Repeat(imagePart(pngURL)+",", 8), ",")
	refused := []chatCase{
		{name: "[SEC] remote image URL the provider would fetch", body: userParts(imagePart("https://guest.example/a.png"))},
		{name: "[SEC] http image URL", body: userParts(imagePart("http://169.254.169.254/latest/meta-data"))},
		{name: "[SEC] data URL of svg, a script carrier", body: userParts(imagePart("data:image/svg+xml;base64,PHN2Zy8+"))},
		{name: "[SEC] data URL of text/html", body: userParts(imagePart("data:text/html;base64,PGgxPg=="))},
		{name: "[SEC] data URL with an extra parameter", body: userParts(imagePart("data:image/png;charset=x;base64,AQID"))},
		{name: "[SEC] data URL not base64", body: userParts(imagePart("data:image/png,%89PNG"))},
		{name: "[SEC] upper-case data URL head", body: userParts(imagePart("DATA:image/png;base64,AQID"))},
		{name: "[SEC] url-safe base64", body: userParts(imagePart("data:image/png;base64,-_-_"))},
		{name: "[SEC] unpadded base64", body: userParts(imagePart("data:image/png;base64,AQI"))},
		{name: "[SEC] whitespace in the data", body: userParts(imagePart("data:image/png;base64,AQ ID"))},
		{name: "[SEC] empty image", body: userParts(imagePart("data:image/png;base64,"))},
		{name: "[SEC] nine images in one request", body: userParts(eight + "," + imagePart(pngURL))},
		{name: "[SEC] nine images across two messages", body: `{"messages":[{"role":"user","content":[` + eight + `]},{"role":"user","content":[` + imagePart(pngURL) + `]}]}`},
		{name: "[SEC] file part", body: userParts(`{"type":"file","file":{"file_id":"file-1"}}`)},
		{name: "[SEC] input_audio part", body: userParts(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`)},
		{name: "[SEC] image part with a detail key", body: userParts(`{"type":"image_url","image_url":{"url":"` + pngURL + `","detail":"high"}}`)},
		{name: "[SEC] image part with an extra key", body: userParts(`{"type":"image_url","image_url":{"url":"` + pngURL + `"},"file_id":"f"}`)},
		{name: "[SEC] text part with an extra key", body: userParts(`{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}`)},
		{name: "[SEC] image part in an assistant message", body: `{"messages":[{"role":"assistant","content":[` + imagePart(pngURL) + `]}]}`},
		{name: "[SEC] image part in a tool message", body: `{"messages":[{"role":"tool","tool_call_id":"c","content":[` + imagePart(pngURL) + `]}]}`},
		{name: "[SEC] image part in a system message", body: `{"messages":[{"role":"system","content":[` + imagePart(pngURL) + `]}]}`},
		{name: "image_url a string", body: userParts(`{"type":"image_url","image_url":"` + pngURL + `"}`)},
		{name: "text part without text", body: userParts(`{"type":"text"}`)},
		{name: "part null", body: userParts(`null`)},
		{name: "too many parts", body: userParts(strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"x"},`, MaxContentParts+1), ","))},
		{name: "content null", body: `{"messages":[{"role":"user","content":null}]}`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeChatWith(decodeBody(t, tt.body), opts)
			if !errors.Is(err, rtsandbox.ErrRefused) {
				t.Errorf("NormalizeChatWith(%s) = %+v, %v; want a refusal", short(tt.body), got, err)
			}
		})
	}
	accepted := []chatCase{
		{name: "text and image", body: userParts(`{"type":"text","text":"look"},` + imagePart(pngURL)), want: &ChatInput{Messages: []Message{{
			Role: "user", Parts: []ContentPart{{Type: "text", Text: textPtr("look")}, {Type: "image_url", ImageURL: &ImageURL{URL: pngURL}}},
		}}}},
		{name: "empty text part kept", body: userParts(`{"type":"text","text":""}`), want: &ChatInput{Messages: []Message{{
			Role: "user", Parts: []ContentPart{{Type: "text", Text: textPtr("")}},
		}}}},
		{name: "eight images", body: userParts(eight), want: nil},
		{name: "a 20 MiB image", body: userParts(imagePart(bigURL(rtsandbox.MaxImageBytes))), want: nil},
		{name: "every type", body: userParts(imagePart("data:image/jpeg;base64,AQID") + "," + imagePart("data:image/webp;base64,AQID") + "," + imagePart("data:image/gif;base64,AQ==")), want: nil},
		{name: "string content still plain", body: `{"messages":[{"role":"user","content":"hi"}]}`, want: &ChatInput{Messages: []Message{{Role: "user", Content: "hi"}}}},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeChatWith(decodeBody(t, tt.body), opts)
			if err != nil {
				t.Fatalf("NormalizeChatWith(%s): %v", short(tt.body), err)
			}
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
			if len(tt.body) > maxSeed {
				return
			}
			if _, err := NormalizeChat(decodeBody(t, tt.body)); err == nil && strings.Contains(tt.body, `"content":[`) {
				t.Errorf("the sealed rule accepts %s", short(tt.body))
			}
		})
	}
}

// The rebuilt body carries the parts in content's place, in wire order,
// and nothing the guest added.
func TestImagePartsWire(t *testing.T) {
	body := `{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"text":"look","type":"text"},{"image_url":{"url":"` + pngURL + `"},"type":"image_url"}]}]}`
	in, err := NormalizeChatWith(decodeBody(t, body), ChatOptions{ImageParts: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonjs.Marshal(BuildChatRequest("m", in, 10))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"` + pngURL + `"}}]}],"stream":false,"max_tokens":10}`
	if string(out) != want {
		t.Errorf("wire:\n%s\nwant:\n%s", out, want)
	}
}

// [SEC] The images of one request stay within 64 MiB in total: four of
// 16 MiB fill it; one byte more is refused.
func TestImageTallyTotal(t *testing.T) {
	var tally imageTally
	quarter := strings.Repeat("A", (16<<20)/3*4+4)       // 16 MiB + 1 … 16 MiB + 3 bytes: over a quarter
	exact := strings.Repeat("AAAA", (16<<20)/3) + "AA==" // 16 MiB − 1 + 1 = 16 MiB exactly
	for i := range 4 {
		if err := tally.add(exact); err != nil {
			t.Fatalf("image %d of 16 MiB: %v", i+1, err)
		}
	}
	if err := tally.add("AA=="); err == nil {
		t.Errorf("a byte over 64 MiB accepted")
	}
	var over imageTally
	for i := range 3 {
		if err := over.add(quarter); err != nil {
			t.Fatalf("image %d: %v", i+1, err)
		}
	}
	if err := over.add(quarter); err == nil {
		t.Errorf("four images over 16 MiB each accepted")
	}
}

func TestParseImageDataURL(t *testing.T) {
	cases := []struct {
		url, mime, data string
	}{
		{pngURL, rtsandbox.MIMEPNG, "AQID"},
		{"data:image/jpeg;base64,AQ==", rtsandbox.MIMEJPEG, "AQ=="},
		{"data:image/png;base64,AQID,", "", ""},
		{"data:image/png;base64", "", ""},
		{"data:image/PNG;base64,AQID", "", ""},
		{"data:image/png;BASE64,AQID", "", ""},
		{" data:image/png;base64,AQID", "", ""},
		{"data:image/png;base64,AQID\n", "", ""},
		// [SEC] image over 20 MiB (the body-level case costs seconds to
		// decode; the bound is here).
		{bigURL(rtsandbox.MaxImageBytes + 1), "", ""},
		{bigURL(rtsandbox.MaxImageBytes), rtsandbox.MIMEPNG, strings.TrimPrefix(bigURL(rtsandbox.MaxImageBytes), "data:image/png;base64,")},
	}
	for _, tc := range cases {
		mime, data, ok := ParseImageDataURL(tc.url)
		if ok != (tc.mime != "") || mime != tc.mime || data != tc.data {
			t.Errorf("ParseImageDataURL(%.40q) = %q, %.40q, %v; want %q, %.40q", tc.url, mime, data, ok, tc.mime, tc.data)
		}
	}
}

// FuzzParseImageDataURL checks that an accepted data URL is rebuilt to
// itself, has one of the four types and data the root's image rule
// accepts.
func FuzzParseImageDataURL(f *testing.F) {
	for _, s := range []string{pngURL, "data:image/gif;base64,AQ==", "data:image/png;base64,", "https://x/a.png", "data:image/png;base64,AQ=I", "data:text/html;base64,AQID"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, url string) {
		mime, data, ok := ParseImageDataURL(url)
		if !ok {
			return
		}
		if ImageDataURL(mime, data) != url {
			t.Fatalf("ParseImageDataURL(%q) rebuilds to %q", url, ImageDataURL(mime, data))
		}
		if err := wire.ValidateImage(wire.Image{Data: data, MIMEType: mime}); err != nil {
			t.Fatalf("ParseImageDataURL(%q) accepted what the image rule refuses: %v", url, err)
		}
	})
}

// FuzzNormalizeChatImageParts runs the /model properties (refusals wrap
// ErrRefused; an accepted body rebuilds with allowed keys only, and
// normalises again to the same bytes) under the session rule, and checks
// that whatever passes stays within the image bounds.
func FuzzNormalizeChatImageParts(f *testing.F) {
	f.Add(userParts(`{"type":"text","text":"look"},` + imagePart(pngURL)))
	f.Add(userParts(imagePart("https://guest.example/a.png")))
	f.Add(`{"messages":[{"role":"assistant","content":[` + imagePart(pngURL) + `]}]}`)
	f.Add(userParts(`{"type":"image_url","image_url":{"url":"` + pngURL + `","detail":"low"}}`))
	f.Fuzz(func(t *testing.T, body string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &m) != nil {
			return
		}
		opts := ChatOptions{ImageParts: true}
		checkNormalizeChatWith(t, body, m, opts)
		in, err := NormalizeChatWith(m, opts)
		if err != nil {
			return
		}
		var images []wire.Image
		for _, msg := range in.Messages {
			if msg.Parts != nil && msg.Role != "user" {
				t.Fatalf("parts on a %s message", msg.Role)
			}
			for _, p := range msg.Parts {
				if p.ImageURL != nil {
					mime, data, ok := ParseImageDataURL(p.ImageURL.URL)
					if !ok {
						t.Fatalf("rebuilt image URL %.80q does not parse", p.ImageURL.URL)
					}
					images = append(images, wire.Image{Data: data, MIMEType: mime})
				}
			}
		}
		if err := wire.ValidateImages(images); err != nil {
			t.Fatalf("accepted images the image rule refuses: %v", err)
		}
	})
}

// BenchmarkNormalizeChatImage rebuilds a session /model body with one
// 20 MiB image, the largest a guest may send.
func BenchmarkNormalizeChatImage(b *testing.B) {
	raw := decodeBody(b, userParts(`{"type":"text","text":"look"},`+imagePart(bigURL(rtsandbox.MaxImageBytes))))
	b.SetBytes(rtsandbox.MaxImageBytes)
	for b.Loop() {
		if _, err := NormalizeChatWith(raw, ChatOptions{ImageParts: true}); err != nil {
			b.Fatal(err)
		}
	}
}

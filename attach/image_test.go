package attach

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Minimal payloads that start with each type's magic bytes.
var (
	pngData  = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	jpegData = []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F'}
	gif87    = []byte("GIF87a\x01\x00\x01\x00")
	gif89    = []byte("GIF89a\x01\x00\x01\x00")
	webpData = []byte("RIFF\x24\x00\x00\x00WEBPVP8 ")
	htmlData = []byte("<!doctype html><script>alert(1)</script>")
)

// padTo returns magic followed by zeros up to n bytes.
func padTo(magic []byte, n int) []byte {
	b := make([]byte, n)
	copy(b, magic)
	return b
}

func TestSniffImage(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		mime string
		ok   bool
	}{
		{"png", pngData, rtsandbox.MIMEPNG, true},
		{"png signature alone", []byte("\x89PNG\r\n\x1a\n"), rtsandbox.MIMEPNG, true},
		{"jpeg", jpegData, rtsandbox.MIMEJPEG, true},
		{"gif87a", gif87, rtsandbox.MIMEGIF, true},
		{"gif89a", gif89, rtsandbox.MIMEGIF, true},
		{"webp", webpData, rtsandbox.MIMEWebP, true},
		{"empty", nil, "", false},
		{"png signature cut short", []byte("\x89PNG\r\n\x1a"), "", false},
		{"png without the high byte", []byte("PNG\r\n\x1a\n"), "", false},
		{"jpeg two bytes", []byte{0xFF, 0xD8}, "", false},
		{"gif88a is no gif", []byte("GIF88a\x01\x00"), "", false},
		{"riff wave is no webp", []byte("RIFF\x24\x00\x00\x00WAVEfmt "), "", false},
		{"riff cut before the form type", []byte("RIFF\x24\x00\x00\x00WEB"), "", false},
		{"html", htmlData, "", false},
		{"svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`), "", false},
		{"bmp", []byte("BM\x00\x00\x00\x00"), "", false},
		{"png magic late in the file", append([]byte("x"), pngData...), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mime, ok := SniffImage(tc.data)
			if mime != tc.mime || ok != tc.ok {
				t.Errorf("SniffImage = %q, %v; want %q, %v", mime, ok, tc.mime, tc.ok)
			}
		})
	}
}

func TestCheckImage(t *testing.T) {
	cases := []struct {
		name     string
		data     []byte
		declared string
		mime     string // "" when refused
	}{
		{"png undeclared", pngData, "", rtsandbox.MIMEPNG},
		{"png declared png", pngData, "image/png", rtsandbox.MIMEPNG},
		{"declared type with parameters and case", pngData, " Image/PNG; charset=binary", rtsandbox.MIMEPNG},
		{"jpeg declared jpeg", jpegData, "image/jpeg", rtsandbox.MIMEJPEG},
		{"gif declared gif", gif89, "image/gif", rtsandbox.MIMEGIF},
		{"webp declared webp", webpData, "image/webp", rtsandbox.MIMEWebP},
		{"one byte is too short to sniff", []byte{0xFF}, "", ""},
		{"exactly 20 MiB", padTo(pngData, rtsandbox.MaxImageBytes), "image/png", rtsandbox.MIMEPNG},
		// [SEC] attacks: a disguised or out-of-bounds file is refused.
		{"[SEC] html file named .png", htmlData, "", ""},
		{"[SEC] html file declared image/png", htmlData, "image/png", ""},
		{"[SEC] png declared image/gif", pngData, "image/gif", ""},
		{"[SEC] png declared image/jpeg", pngData, "image/jpeg", ""},
		{"[SEC] png declared octet-stream", pngData, "application/octet-stream", ""},
		{"[SEC] zero-byte image", nil, "image/png", ""},
		{"[SEC] one byte over 20 MiB", padTo(pngData, rtsandbox.MaxImageBytes+1), "image/png", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckImage(tc.data, tc.declared)
			if tc.mime == "" {
				if !errors.Is(err, wire.ErrImage) {
					t.Fatalf("CheckImage = %v, %v; want ErrImage", got.MIMEType, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckImage: %v", err)
			}
			want := wire.Image{Data: base64.StdEncoding.EncodeToString(tc.data), MIMEType: tc.mime}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("CheckImage (-want +got):\n%s", diff)
			}
			if err := wire.ValidateImage(got); err != nil {
				t.Errorf("the root refuses the checked image: %v", err)
			}
		})
	}
}

func TestCheckImages(t *testing.T) {
	big := padTo(pngData, 16<<20) // four of these are exactly 64 MiB
	raws := func(n int, im RawImage) []RawImage {
		out := make([]RawImage, n)
		for i := range out {
			out[i] = im
		}
		return out
	}
	png := RawImage{Data: pngData, Declared: "image/png"}
	cases := []struct {
		name   string
		images []RawImage
		err    error // nil when accepted
	}{
		{"none", nil, nil},
		{"eight", raws(rtsandbox.MaxImages, png), nil},
		{"mixed types", []RawImage{png, {Data: jpegData}, {Data: gif87}, {Data: webpData, Declared: "image/webp"}}, nil},
		{"exactly 64 MiB", raws(4, RawImage{Data: big}), nil},
		{"[SEC] nine images", raws(rtsandbox.MaxImages+1, png), wire.ErrTooManyImages},
		{"[SEC] one byte over 64 MiB in total", append(raws(4, RawImage{Data: big}), RawImage{Data: gif89[:6]}), wire.ErrImageBudget},
		{"[SEC] a disguised file among images", []RawImage{png, {Data: htmlData, Declared: "image/png"}}, wire.ErrImage},
		{"[SEC] a zero-byte image among images", []RawImage{png, {}}, wire.ErrImage},
		{"the count is checked before the content", raws(rtsandbox.MaxImages+1, RawImage{}), wire.ErrTooManyImages},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckImages(tc.images)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || got != nil {
					t.Fatalf("CheckImages = %d images, %v; want %v", len(got), err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckImages: %v", err)
			}
			if len(got) != len(tc.images) {
				t.Fatalf("CheckImages returned %d images for %d", len(got), len(tc.images))
			}
			for i, im := range got {
				data, err := base64.StdEncoding.DecodeString(im.Data)
				if err != nil || !bytes.Equal(data, tc.images[i].Data) {
					t.Errorf("image %d does not decode to its input: %v", i, err)
				}
				if want, _ := SniffImage(tc.images[i].Data); im.MIMEType != want {
					t.Errorf("image %d has type %q, sniffed %q", i, im.MIMEType, want)
				}
			}
			if err := wire.ValidateImages(got); err != nil {
				t.Errorf("the root refuses the checked images: %v", err)
			}
		})
	}
}

// FuzzSniffImage checks that a sniffed type is one of the four and is
// backed by its magic bytes, and that CheckImage agrees with the sniffer
// and returns what the root accepts.
func FuzzSniffImage(f *testing.F) {
	for _, d := range [][]byte{pngData, jpegData, gif87, gif89, webpData, htmlData, nil, {0xFF}} {
		f.Add(d, "")
		f.Add(d, "image/png")
	}
	f.Fuzz(func(t *testing.T, data []byte, declared string) {
		mime, ok := SniffImage(data)
		if ok != wire.ValidImageType(mime) || (!ok && mime != "") {
			t.Fatalf("SniffImage(%q) = %q, %v", data, mime, ok)
		}
		magic := map[string]bool{
			rtsandbox.MIMEPNG:  bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")),
			rtsandbox.MIMEJPEG: bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}),
			rtsandbox.MIMEGIF:  bytes.HasPrefix(data, []byte("GIF87a")) || bytes.HasPrefix(data, []byte("GIF89a")),
			rtsandbox.MIMEWebP: len(data) >= 12 && bytes.HasPrefix(data, []byte("RIFF")) && string(data[8:12]) == "WEBP",
		}
		if ok && !magic[mime] {
			t.Fatalf("SniffImage(%q) = %q without its magic bytes", data, mime)
		}
		im, err := CheckImage(data, declared)
		if err != nil {
			if !errors.Is(err, wire.ErrImage) {
				t.Fatalf("CheckImage refused with %v, not ErrImage", err)
			}
			return
		}
		if !ok || im.MIMEType != mime {
			t.Fatalf("CheckImage(%q) = %q; sniffed %q, %v", data, im.MIMEType, mime, ok)
		}
		if d := mediaType(declared); d != "" && d != mime {
			t.Fatalf("CheckImage accepted %s declared %q", mime, declared)
		}
		if err := wire.ValidateImage(im); err != nil {
			t.Fatalf("the root refuses CheckImage's result: %v", err)
		}
	})
}

package attach

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestDecodeReplyFiles(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	full := b64(make([]byte, rtsandbox.MaxReplyFileBytes))
	many := func(n int, f wire.ReplyFile) []wire.ReplyFile {
		out := make([]wire.ReplyFile, n)
		for i := range out {
			out[i] = f
		}
		return out
	}
	cases := []struct {
		name  string
		files []wire.ReplyFile
		want  []File // compared when err is nil
		err   error
	}{
		{"none", nil, []File{}, nil},
		{"one file", []wire.ReplyFile{{Name: "a.txt", Data: "aGVsbG8="}}, []File{{Name: "a.txt", Data: []byte("hello")}}, nil},
		{"leading dot and unicode names pass", []wire.ReplyFile{{Name: ".notes ü.md", Data: "eA=="}}, []File{{Name: ".notes ü.md", Data: []byte("x")}}, nil},
		{"non-zero trailing bits decode (the reference decodes them too)", []wire.ReplyFile{{Name: "a", Data: "aGVsbG9="}}, []File{{Name: "a", Data: []byte("hello")}}, nil},
		{"ten files", many(rtsandbox.MaxReplyFiles, wire.ReplyFile{Name: "a", Data: "eA=="}), nil, nil},
		{"[SEC] eleven files", many(rtsandbox.MaxReplyFiles+1, wire.ReplyFile{Name: "a", Data: "eA=="}), nil, wire.ErrTooManyFiles},
		{"[SEC] path traversal name", []wire.ReplyFile{{Name: "../../etc/passwd", Data: "eA=="}}, nil, wire.ErrReplyFile},
		{"[SEC] dot dot name", []wire.ReplyFile{{Name: "..", Data: "eA=="}}, nil, wire.ErrReplyFile},
		{"[SEC] backslash name", []wire.ReplyFile{{Name: `a\b`, Data: "eA=="}}, nil, wire.ErrReplyFile},
		{"[SEC] control char in the name", []wire.ReplyFile{{Name: "a\nb", Data: "eA=="}}, nil, wire.ErrReplyFile},
		{"[SEC] empty name", []wire.ReplyFile{{Name: "", Data: "eA=="}}, nil, wire.ErrReplyFile},
		{"[SEC] zero-byte file", []wire.ReplyFile{{Name: "a", Data: ""}}, nil, wire.ErrReplyFile},
		{"[SEC] newline the lax decoder would skip", []wire.ReplyFile{{Name: "a", Data: "aGV\nbG8="}}, nil, wire.ErrReplyFile},
		{"[SEC] unpadded base64", []wire.ReplyFile{{Name: "a", Data: "aGVsbG8"}}, nil, wire.ErrReplyFile},
		{"[SEC] url-safe alphabet", []wire.ReplyFile{{Name: "a", Data: "-_-_"}}, nil, wire.ErrReplyFile},
		{"[SEC] one byte over 10 MiB", []wire.ReplyFile{{Name: "a", Data: b64(make([]byte, rtsandbox.MaxReplyFileBytes+1))}}, nil, wire.ErrReplyFile},
		{"exactly 50 MiB", many(5, wire.ReplyFile{Name: "a", Data: full}), nil, nil},
		{"[SEC] one byte over 50 MiB in total", append(many(5, wire.ReplyFile{Name: "a", Data: full}), wire.ReplyFile{Name: "b", Data: "eA=="}), nil, wire.ErrReplyBudget},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeReplyFiles(tc.files)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || got != nil {
					t.Fatalf("DecodeReplyFiles = %d files, %v; want %v", len(got), err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeReplyFiles: %v", err)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("DecodeReplyFiles (-want +got):\n%s", diff)
				}
				return
			}
			if len(got) != len(tc.files) {
				t.Fatalf("DecodeReplyFiles returned %d files for %d", len(got), len(tc.files))
			}
			for i, f := range got {
				if f.Name != tc.files[i].Name || b64(f.Data) != tc.files[i].Data {
					t.Errorf("file %d does not match its input", i)
				}
			}
		})
	}
}

// FuzzDecodeReplyFiles checks that DecodeReplyFiles accepts exactly what
// the root's validation accepts, and that every decoded file has the size
// the validation computed from the base64 length and stays in bounds.
func FuzzDecodeReplyFiles(f *testing.F) {
	f.Add("a.txt", "aGVsbG8=", "b", "eA==")
	f.Add("../x", "eA==", "b", "")
	f.Add("a", "aGVsbG9=", ".", "====")
	f.Add("a", "aGV\nbG8=", "b", "-_-_")
	f.Fuzz(func(t *testing.T, name1, data1, name2, data2 string) {
		files := []wire.ReplyFile{{Name: name1, Data: data1}, {Name: name2, Data: data2}}
		got, err := DecodeReplyFiles(files)
		if verr := wire.ValidateReplyFiles(files); verr != nil {
			if err == nil || got != nil {
				t.Fatalf("DecodeReplyFiles accepted what ValidateReplyFiles refuses (%v)", verr)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeReplyFiles refused what ValidateReplyFiles accepts: %v", err)
		}
		total := 0
		for i, f := range got {
			in := files[i]
			want := len(in.Data)/4*3 - (len(in.Data) - len(strings.TrimRight(in.Data, "=")))
			if f.Name != in.Name || len(f.Data) != want || len(f.Data) < 1 || len(f.Data) > rtsandbox.MaxReplyFileBytes {
				t.Fatalf("file %d: %q with %d bytes from %d base64 chars", i, f.Name, len(f.Data), len(in.Data))
			}
			total += len(f.Data)
		}
		if total > rtsandbox.MaxReplyFilesTotal {
			t.Fatalf("decoded %d bytes in total", total)
		}
	})
}

package container_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

func TestParseReply(t *testing.T) {
	tests := []struct {
		name    string
		stdout  string
		want    rtsandbox.Reply
		wantErr bool
	}{
		{name: "ok", stdout: `{"ok":true,"text":"done"}`, want: rtsandbox.Reply{OK: true, Text: "done"}},
		{name: "not-ok", stdout: `{"ok":false,"text":"no"}`, want: rtsandbox.Reply{Text: "no"}},
		{name: "extra-fields-dropped", stdout: ` {"x":1,"ok":true,"text":"a"}` + "\n", want: rtsandbox.Reply{OK: true, Text: "a"}},
		{name: "duplicate-key-last-wins", stdout: `{"ok":false,"ok":true,"text":"a"}`, want: rtsandbox.Reply{OK: true, Text: "a"}},
		{name: "text-at-limit-cjk", stdout: `{"ok":true,"text":"` + strings.Repeat("\u4e01", 100000) + `"}`, want: rtsandbox.Reply{OK: true, Text: strings.Repeat("\u4e01", 100000)}},
		{name: "text-over-limit", stdout: `{"ok":true,"text":"` + strings.Repeat("a", 100001) + `"}`, wantErr: true},
		// An astral rune is two UTF-16 units: 50,001 of them are 100,002.
		{name: "text-over-limit-astral", stdout: `{"ok":true,"text":"` + strings.Repeat("\U0001F600", 50001) + `"}`, wantErr: true},
		{name: "empty", stdout: ``, wantErr: true},
		{name: "null", stdout: `null`, wantErr: true},
		{name: "array", stdout: `[true,"a"]`, wantErr: true},
		{name: "ok-string", stdout: `{"ok":"true","text":"a"}`, wantErr: true},
		{name: "ok-missing", stdout: `{"text":"a"}`, wantErr: true},
		{name: "ok-null", stdout: `{"ok":null,"text":"a"}`, wantErr: true},
		{name: "text-number", stdout: `{"ok":true,"text":1}`, wantErr: true},
		{name: "text-null", stdout: `{"ok":true,"text":null}`, wantErr: true},
		{name: "trailing-garbage", stdout: `{"ok":true,"text":"a"}x`, wantErr: true},
		{name: "two-objects", stdout: `{"ok":true,"text":"a"}{"ok":true,"text":"b"}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := container.ParseReply([]byte(tc.stdout))
			if tc.wantErr {
				if !errors.Is(err, container.ErrInvalidReply) {
					t.Fatalf("ParseReply(%.40q) = %v, %v; want ErrInvalidReply", tc.stdout, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseReply(%.40q) = %+v, %v; want %+v", tc.stdout, got, err, tc.want)
			}
		})
	}
}

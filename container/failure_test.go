package container_test

import (
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/container"
)

func TestParseWorkerFailure(t *testing.T) {
	tests := []struct {
		name   string
		tail   string
		want   container.WorkerFailure
		wantOK bool
	}{
		{"one-line", `{"error_class":"no_final_text","detail":"model content is not a string"}` + "\n",
			container.WorkerFailure{Class: "no_final_text", Detail: "model content is not a string"}, true},
		{"last-line-wins", "rtsandbox-worker: tool x: broker refused\n" + `{"error_class":"broker_refused","detail":"status 403"}`,
			container.WorkerFailure{Class: "broker_refused", Detail: "status 403"}, true},
		{"no-detail", `{"error_class":"panic"}`, container.WorkerFailure{Class: "panic"}, true},
		{"detail-not-string", `{"error_class":"panic","detail":{"x":1}}`, container.WorkerFailure{Class: "panic"}, true},
		// A compromised worker may write anything: only safe characters
		// of the detail survive, bounded.
		{"detail-filtered", `{"error_class":"internal","detail":"a\"b<c>\u00e9 d/e\\f\nsk-KEY=1"}`,
			container.WorkerFailure{Class: "internal", Detail: "abc defsk-KEY1"}, true},
		{"detail-bounded", `{"error_class":"internal","detail":"` + strings.Repeat("x", 500) + `"}`,
			container.WorkerFailure{Class: "internal", Detail: strings.Repeat("x", container.MaxFailureDetail)}, true},
		{"unknown-class", `{"error_class":"hacked","detail":"x"}`, container.WorkerFailure{}, false},
		{"class-null", `{"error_class":null}`, container.WorkerFailure{}, false},
		{"class-not-last", `{"error_class":"panic"}` + "\nsomething else", container.WorkerFailure{}, false},
		{"not-json", "exit status 1", container.WorkerFailure{}, false},
		{"empty", "", container.WorkerFailure{}, false},
		{"array", `["error_class"]`, container.WorkerFailure{}, false},
		{"line-too-long", `{"error_class":"panic","x":"` + strings.Repeat("y", 2000) + `"}`, container.WorkerFailure{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := container.ParseWorkerFailure([]byte(tc.tail))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ParseWorkerFailure(%q) = %+v, %v; want %+v, %v", tc.tail, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// FuzzParseWorkerFailure: whatever a compromised worker writes, a parsed
// failure is a known class and a bounded detail of safe characters.
func FuzzParseWorkerFailure(f *testing.F) {
	f.Add([]byte(`{"error_class":"no_final_text","detail":"model content is not a string"}`))
	f.Add([]byte("x\n" + `{"error_class":"panic","detail":"a\u0000b"}` + "\n\n"))
	f.Add([]byte(`{"error_class":"internal","detail":"` + strings.Repeat("\u00e9", 300) + `"}`))
	known := map[string]bool{}
	for _, c := range container.WorkerClasses() {
		known[c] = true
	}
	f.Fuzz(func(t *testing.T, tail []byte) {
		got, ok := container.ParseWorkerFailure(tail)
		if !ok {
			if got != (container.WorkerFailure{}) {
				t.Fatalf("not ok but %+v", got)
			}
			return
		}
		if !known[got.Class] {
			t.Fatalf("class %q is not known", got.Class)
		}
		if len(got.Detail) > container.MaxFailureDetail {
			t.Fatalf("detail is %d bytes", len(got.Detail))
		}
		for _, c := range []byte(got.Detail) {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.:-", rune(c)) {
				t.Fatalf("detail %q holds %q", got.Detail, c)
			}
		}
	})
}

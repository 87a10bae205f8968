package container

// The field-by-field ParseWorkerFailure the typed failure line replaced,
// kept as the oracle of FuzzWorkerFailureAgreesWithFieldByField.

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzWorkerFailureAgreesWithFieldByField holds ParseWorkerFailure to the
// field-by-field parser it replaced: the same verdict and failure on
// whatever a compromised worker writes.
func FuzzWorkerFailureAgreesWithFieldByField(f *testing.F) {
	for _, tc := range failureMembersCases {
		f.Add([]byte(tc.tail))
	}
	f.Add([]byte("x\n" + `{"error_class":"panic","detail":"a\u0000b"}` + "\n\n"))
	f.Fuzz(func(t *testing.T, tail []byte) {
		got, ok := ParseWorkerFailure(tail)
		want, oldOK := oldParseWorkerFailure(tail)
		if got != want || ok != oldOK {
			t.Fatalf("%q: typed %+v, %v; field by field %+v, %v", tail, got, ok, want, oldOK)
		}
	})
}

// TestWorkerFailureMembersExact pins the member rules of the failure line
// that a plain encoding/json decode would change: exact names, the last
// of repeated members, error_class a string (null is none), detail a
// string or nothing (null and other types read as empty).
func TestWorkerFailureMembersExact(t *testing.T) {
	for _, tc := range failureMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseWorkerFailure([]byte(tc.tail))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ParseWorkerFailure(%q) = %+v, %v; want %+v, %v", tc.tail, got, ok, tc.want, tc.ok)
			}
		})
	}
}

var failureMembersCases = []struct {
	name, tail string
	want       WorkerFailure
	ok         bool
}{
	{"class-folded", `{"Error_Class":"panic"}`, WorkerFailure{}, false},
	{"class-folded-dropped", `{"ERROR_CLASS":1,"error_class":"panic"}`, WorkerFailure{Class: "panic"}, true},
	{"class-repeated-last-wins", `{"error_class":"hacked","error_class":"panic"}`, WorkerFailure{Class: "panic"}, true},
	{"class-repeated-last-null", `{"error_class":"panic","error_class":null}`, WorkerFailure{}, false},
	{"class-number", `{"error_class":1}`, WorkerFailure{}, false},
	{"detail-null", `{"error_class":"panic","detail":null}`, WorkerFailure{Class: "panic"}, true},
	{"detail-number", `{"error_class":"panic","detail":7}`, WorkerFailure{Class: "panic"}, true},
	{"detail-folded", `{"error_class":"panic","Detail":"x"}`, WorkerFailure{Class: "panic"}, true},
	{"detail-repeated-last-wins", `{"error_class":"panic","detail":"a","detail":"b"}`, WorkerFailure{Class: "panic", Detail: "b"}, true},
	{"detail-repeated-last-null", `{"error_class":"panic","detail":"a","detail":null}`, WorkerFailure{Class: "panic"}, true},
	{"leading-space", ` {"error_class":"panic"}`, WorkerFailure{Class: "panic"}, true},
	{"leading-vt", "\v{\"error_class\":\"panic\"}", WorkerFailure{}, false},
	{"trailing-ff", "{\"error_class\":\"panic\"}\f", WorkerFailure{}, false},
	{"leading-nbsp", "\u00a0{\"error_class\":\"panic\"}", WorkerFailure{}, false},
	{"null", `null`, WorkerFailure{}, false},
	{"trailing-object", `{"error_class":"panic"}{}`, WorkerFailure{}, false},
}

func oldParseWorkerFailure(tail []byte) (f WorkerFailure, ok bool) {
	line := bytes.TrimRight(tail, " \t\r\n")
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if len(line) == 0 || len(line) > maxFailureLine {
		return WorkerFailure{}, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(line, &fields) != nil || fields == nil {
		return WorkerFailure{}, false
	}
	var class, detail string
	if json.Unmarshal(fields["error_class"], &class) != nil || !slices.Contains(workerClasses, class) {
		return WorkerFailure{}, false
	}
	if raw, present := fields["detail"]; present && json.Unmarshal(raw, &detail) != nil {
		detail = ""
	}
	return WorkerFailure{Class: class, Detail: safeDetail(detail)}, true
}

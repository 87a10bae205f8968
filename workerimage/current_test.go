package workerimage

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// labelStore is a fakeStore that also answers label reads.
type labelStore struct {
	fakeStore
	labels map[string]map[string]string // nil entry: absent
	err    error
}

func (s *labelStore) ImageLabels(_ context.Context, ref string) (map[string]string, bool, error) {
	l, ok := s.labels[ref]
	return l, ok, s.err
}

func TestCompare(t *testing.T) {
	worker := []byte("worker bytes")
	want := Digest(worker)
	tests := []struct {
		name   string
		labels map[string]map[string]string
		want   Comparison
	}{
		{"missing", nil, Comparison{State: Missing, Tag: "w:1", Want: want}},
		{"current", map[string]map[string]string{"w:1": {LabelWorkerSHA256: want}}, Comparison{State: Current, Tag: "w:1", Have: want, Want: want}},
		{"stale", map[string]map[string]string{"w:1": {LabelWorkerSHA256: "00ff"}}, Comparison{State: Stale, Tag: "w:1", Have: "00ff", Want: want}},
		{"old-version", map[string]map[string]string{"w:1": {LabelTitle: "rtsandbox-worker"}}, Comparison{State: Stale, Tag: "w:1", Want: want}},
		{"unlabelled", map[string]map[string]string{"w:1": nil}, Comparison{State: Foreign, Tag: "w:1", Want: want}},
		{"other-project", map[string]map[string]string{"w:1": {LabelTitle: "ubuntu", "org.opencontainers.image.version": "22.04"}}, Comparison{State: Foreign, Tag: "w:1", Want: want}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Compare(context.Background(), &labelStore{labels: tt.labels}, "w:1", worker)
			if err != nil {
				t.Fatalf("Compare() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Compare() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareError(t *testing.T) {
	engine := errors.New("engine down")
	if _, err := Compare(context.Background(), &labelStore{err: engine}, "w:1", []byte("x")); !errors.Is(err, engine) {
		t.Errorf("Compare() = %v; want the engine error wrapped", err)
	}
}

func TestEnsureCurrent(t *testing.T) {
	bin := mustWorker(t)
	foreign := map[string]map[string]string{"w:1": {"maintainer": "someone else"}}
	tests := []struct {
		name      string
		labels    map[string]map[string]string
		ownTag    bool
		wantState State
		wantBuild bool
		wantErr   error
	}{
		{"current-left-alone", map[string]map[string]string{"w:1": {LabelWorkerSHA256: Digest(bin)}}, false, Current, false, nil},
		{"stale-rebuilt", map[string]map[string]string{"w:1": {LabelWorkerSHA256: "00ff"}}, false, Stale, true, nil},
		{"old-version-rebuilt", map[string]map[string]string{"w:1": {LabelTitle: "rtsandbox-worker"}}, false, Stale, true, nil},
		{"missing-built", nil, false, Missing, true, nil},
		// Issue 21: a typo in sandbox.image never replaces the operator's
		// image; under the default tag, an unlabelled image is a worker
		// built by hand and is rebuilt.
		{"foreign-refused", foreign, false, Foreign, false, ErrForeign},
		{"foreign-under-own-tag-rebuilt", foreign, true, Foreign, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &labelStore{labels: tt.labels}
			c, err := EnsureCurrent(context.Background(), s, "w:1", bin, tt.ownTag)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) || c.State != tt.wantState {
				t.Fatalf("EnsureCurrent() = %v, %v; want %v, %v", c.State, err, tt.wantState, tt.wantErr)
			}
			files, built := s.builds["w:1"]
			if built != tt.wantBuild || (built && string(files["Dockerfile"]) != Dockerfile(bin)) {
				t.Errorf("EnsureCurrent() built = %v (%q); want %v from this worker", built, files["Dockerfile"], tt.wantBuild)
			}
		})
	}
}

func TestEnsureCurrentRefusesBadWorker(t *testing.T) {
	s := &labelStore{}
	if _, err := EnsureCurrent(context.Background(), s, "w:1", []byte("junk"), false); !errors.Is(err, ErrWorker) || len(s.builds) != 0 {
		t.Errorf("EnsureCurrent(junk) = %v (builds %d); want ErrWorker and no build", err, len(s.builds))
	}
}

func TestStateString(t *testing.T) {
	got := []string{Current.String(), Missing.String(), Stale.String(), Foreign.String(), State(9).String()}
	if diff := cmp.Diff([]string{"current", "missing", "stale", "foreign", "State(9)"}, got); diff != "" {
		t.Errorf("State.String mismatch (-want +got):\n%s", diff)
	}
}

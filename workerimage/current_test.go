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
		{"unlabelled", map[string]map[string]string{"w:1": nil}, Comparison{State: Stale, Tag: "w:1", Want: want}},
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
	tests := []struct {
		name      string
		labels    map[string]map[string]string
		wantState State
		wantBuild bool
	}{
		{"current-left-alone", map[string]map[string]string{"w:1": {LabelWorkerSHA256: Digest(bin)}}, Current, false},
		{"stale-rebuilt", map[string]map[string]string{"w:1": {LabelWorkerSHA256: "00ff"}}, Stale, true},
		{"missing-built", nil, Missing, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &labelStore{labels: tt.labels}
			c, err := EnsureCurrent(context.Background(), s, "w:1", bin)
			if err != nil || c.State != tt.wantState {
				t.Fatalf("EnsureCurrent() = %v, %v; want %v, nil", c.State, err, tt.wantState)
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
	if _, err := EnsureCurrent(context.Background(), s, "w:1", []byte("junk")); !errors.Is(err, ErrWorker) || len(s.builds) != 0 {
		t.Errorf("EnsureCurrent(junk) = %v (builds %d); want ErrWorker and no build", err, len(s.builds))
	}
}

func TestStateString(t *testing.T) {
	got := []string{Current.String(), Missing.String(), Stale.String(), State(9).String()}
	if diff := cmp.Diff([]string{"current", "missing", "stale", "State(9)"}, got); diff != "" {
		t.Errorf("State.String mismatch (-want +got):\n%s", diff)
	}
}

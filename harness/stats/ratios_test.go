package stats

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestRatios_PairedBOverA(t *testing.T) {
	tests := []struct {
		name    string
		a, b    []float64
		want    []float64
		wantErr error
	}{
		{"two rounds", []float64{100, 200}, []float64{110, 180}, []float64{1.1, 0.9}, nil},
		{"n=1", []float64{4}, []float64{5}, []float64{1.25}, nil},
		{"all ties", []float64{7, 7, 7}, []float64{7, 7, 7}, []float64{1, 1, 1}, nil},
		{"n=0", nil, nil, nil, ErrEmpty},
		{"length mismatch", []float64{1, 2}, []float64{1}, nil, ErrLength},
		{"zero in a", []float64{0, 1}, []float64{1, 1}, nil, ErrValue},
		{"negative in b", []float64{1, 1}, []float64{1, -1}, nil, ErrValue},
		{"NaN", []float64{math.NaN()}, []float64{1}, nil, ErrValue},
		{"+Inf", []float64{1}, []float64{math.Inf(1)}, nil, ErrValue},
	}
	for _, tt := range tests {
		got, err := Ratios(tt.a, tt.b)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.wantErr)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			checkClose(t, tt.name, got[i], tt.want[i], 1e-15)
		}
	}
}

func TestSeparated_MinBAboveMaxA(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want bool
	}{
		{"separated", []float64{1, 3, 2}, []float64{4, 3.5}, true},
		{"touching is not separated", []float64{1, 3}, []float64{3, 4}, false},
		{"overlap", []float64{1, 5}, []float64{4, 6}, false},
		{"B below A", []float64{5, 6}, []float64{1, 2}, false},
		{"n=1 each", []float64{1}, []float64{2}, true},
		{"all ties", []float64{2, 2}, []float64{2, 2}, false},
		{"empty A", nil, []float64{1}, false},
		{"empty B", []float64{1}, nil, false},
		{"NaN", []float64{math.NaN()}, []float64{1}, false},
	}
	for _, tt := range tests {
		if got := Separated(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: Separated(%v, %v) = %v, want %v", tt.name, tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRatios_DoesNotModifyInputs(t *testing.T) {
	a, b := []float64{2, 4}, []float64{3, 5}
	a0, b0 := slices.Clone(a), slices.Clone(b)
	if _, err := Ratios(a, b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, a0) || !slices.Equal(b, b0) {
		t.Errorf("inputs modified: %v %v", a, b)
	}
}

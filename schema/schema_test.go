package schema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// wireFixtures pairs each fixture of testdata/ (README.md says where each
// came from) with the type that declares it.
var wireFixtures = []struct {
	file string
	doc  func() any
}{
	{"bench.json", func() any { return new(Bench) }},
	{"bench_census_depth.json", func() any { return new(Bench) }},
	{"bench_device.json", func() any { return new(Bench) }},
	{"bench_turns.json", func() any { return new(Bench) }},
	{"bench_draft.json", func() any { return new(Bench) }},
	{"info.json", func() any { return new(Info) }},
	{"logits.json", func() any { return new(Logits) }},
	{"generate.json", func() any { return new(Generate) }},
	{"tokenize.json", func() any { return new(Tokens) }},
}

// exitLineDoc is the type of an exit line by its key.
func exitLineDoc(line string) any {
	switch {
	case strings.HasPrefix(line, `{"`+LaunchCensusKey+`"`):
		return new(CensusLine)
	case strings.HasPrefix(line, `{"`+CUDAGraphsKey+`"`):
		return new(GraphsLine)
	case strings.HasPrefix(line, `{"`+OpTimingKey+`"`):
		return new(OpTimingLine)
	}
	return nil
}

type wireCase struct {
	name string
	data []byte
	doc  func() any
}

func wireCases(t *testing.T) []wireCase {
	t.Helper()
	var cases []wireCase
	for _, f := range wireFixtures {
		data, err := os.ReadFile(filepath.Join("testdata", f.file))
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, wireCase{f.file, data, f.doc})
	}
	lines, err := os.ReadFile(filepath.Join("testdata", "exit_lines.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(lines))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if exitLineDoc(line) == nil {
			t.Fatalf("exit_lines.txt:%d is no exit line: %s", n, line)
		}
		cases = append(cases, wireCase{"exit_lines.txt:" + strings.SplitN(line, `"`, 3)[1], []byte(line), func() any { return exitLineDoc(line) }})
	}
	if len(cases) != len(wireFixtures)+3 {
		t.Fatalf("%d cases: want every fixture and the three exit lines", len(cases))
	}
	return cases
}

// Every field minfer writes has a home in its type: a field the type lacks
// would be dropped without a word by a reader.
func TestDocuments_FixturesDecodeWithNoUnknownField(t *testing.T) {
	for _, c := range wireCases(t) {
		dec := json.NewDecoder(bytes.NewReader(c.data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(c.doc()); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// A fixture decoded and written again is the same document: the same
// field set (no tag renamed, no field added without omitempty, no
// omitempty dropped) and the same values.
func TestDocuments_RoundTripToTheFixtureExactly(t *testing.T) {
	for _, c := range wireCases(t) {
		doc := c.doc()
		if err := json.Unmarshal(c.data, doc); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var want, got any
		if err := json.Unmarshal(c.data, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			wp, _ := FieldPaths(c.data, doc)
			gp, _ := FieldPaths(out, doc)
			t.Errorf("%s: written again it differs\nfields only written: %v\nfields only in the fixture: %v\n got %s",
				c.name, minus(gp, wp), minus(wp, gp), out)
		}
		again := c.doc()
		if err := json.Unmarshal(out, again); err != nil || !reflect.DeepEqual(again, doc) {
			t.Errorf("%s: decoding the written document gives %+v (%v), want %+v", c.name, again, err, doc)
		}
	}
}

// minus is a without the elements of b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func TestFieldPaths_CollapsesMapsAndWalksSlices(t *testing.T) {
	data := []byte(`{"tests":[{"name":"tg4","kernels_per_token":{"a":1}},{"name":"pp8","device_ms":[1]}],"levers":{"X":"1"},"extra":{"y":1}}`)
	got, err := FieldPaths(data, Bench{})
	want := []string{"extra", "extra.y", "levers", "tests", "tests[].device_ms", "tests[].kernels_per_token", "tests[].name"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("FieldPaths = %v, %v; want %v", got, err, want)
	}
}

func TestBenchTest_ValueIsTheMedianAndDeviceValueNeedsEveryRepetition(t *testing.T) {
	bt := BenchTest{TokS: []float64{990, 1000, 1010, 900, 1005}, MeanTokS: 981, DeviceTokS: []float64{1, 2, 3, 4, 5}}
	if v := bt.Value(); v != 1000 {
		t.Errorf("Value %v, want the median 1000", v)
	}
	if v := (BenchTest{MeanTokS: 7}).Value(); v != 7 {
		t.Errorf("no samples: Value %v, want the mean 7", v)
	}
	if v, ok := bt.DeviceValue(); !ok || v != 3 {
		t.Errorf("DeviceValue %v %v, want 3", v, ok)
	}
	bt.DeviceTokS = bt.DeviceTokS[:4]
	if _, ok := bt.DeviceValue(); ok {
		t.Error("DeviceValue with a repetition missing is ok")
	}
	b := Bench{Tests: []BenchTest{{Name: "pp512"}, {Name: "tg128@d64"}}}
	if tg, ok := b.Test("tg"); !ok || tg.Name != "tg128@d64" {
		t.Errorf("Test(tg) = %v %v", tg, ok)
	}
}

func TestInfo_HistogramAndQuantizedTypes(t *testing.T) {
	in := Info{TypeHistogram: map[string]int{"Q8_0": 169, "F32": 121, "f16": 2, "Q4_K": 0}}
	if h := in.Histogram(); h != "F32:121 Q4_K:0 Q8_0:169 f16:2" {
		t.Errorf("Histogram %q", h)
	}
	if q := in.QuantizedTypes(); !slices.Equal(q, []string{"Q8_0:169"}) {
		t.Errorf("QuantizedTypes %v", q)
	}
}

func TestOpKernel_AvgNS(t *testing.T) {
	if a := (OpKernel{Count: 4, TotalNS: 10}).AvgNS(); a != 2.5 {
		t.Errorf("AvgNS %v", a)
	}
	if a := (OpKernel{}).AvgNS(); a != 0 {
		t.Errorf("no launches: AvgNS %v", a)
	}
}

// A --turns document: each turn by number, its decode rate and time to
// first token per round the median of its repetitions.
func TestBench_TurnsByNumberAndTheirTTFT(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "bench_turns.json"))
	if err != nil {
		t.Fatal(err)
	}
	var b Bench
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	t2, ok := b.Turn(2)
	if !ok || t2.Name != "turn2" || b.Turns != 2 {
		t.Fatalf("Turn(2) = %+v, %v", t2, ok)
	}
	if v, ok := t2.TTFTValue(); !ok || v != median(t2.TTFTMS) || v <= 0 {
		t.Errorf("TTFTValue %v %v", v, ok)
	}
	if _, ok := b.Turn(3); ok {
		t.Error("Turn(3) of a two-turn document")
	}
	if _, ok := (BenchTest{Name: "tg4", TokS: []float64{1}}).TTFTValue(); ok {
		t.Error("a tg test has a time to first token")
	}
}

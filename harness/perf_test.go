package harness

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// issue6Table is the target table of issue 6, copied verbatim.
const issue6Table = `| model shape | weights | reference tg128 tok/s | reference pp512 tok/s | target tg128 | target pp512 |
|---|---|---|---|---|---|
| qwen2-0.5b | Q4_K_M | 863.3 | 52,503 | >= 1,100 | >= 55,000 |
| qwen2-0.5b | Q8_0 | 901.8 | 59,841 | >= 1,150 | >= 60,000 |
| qwen3-0.6b | Q8_0 | 737.3 | 51,235 | >= 950 | >= 52,000 |
| qwen2-7b | Q4_K_M | 267.4 | 9,906 | >= 330 | >= 11,000 |
| qwen2-7b | Q8_0 | 259.1 | 11,870 | >= 400 | >= 12,500 |`

func TestPerfRows_MatchIssue6TableExactly(t *testing.T) {
	num := func(s string) float64 {
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), ">="))
		v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
		if err != nil {
			t.Fatalf("issue table cell %q: %v", s, err)
		}
		return v
	}
	var want []PerfRow
	for _, line := range strings.Split(issue6Table, "\n")[2:] {
		c := strings.Split(strings.Trim(line, "| "), "|")
		want = append(want, PerfRow{Shape: strings.TrimSpace(c[0]), Type: strings.TrimSpace(c[1]),
			RefTG: num(c[2]), RefPP: num(c[3]), TargetTG: num(c[4]), TargetPP: num(c[5])})
	}
	if len(want) != len(PerfRows) {
		t.Fatalf("%d rows, issue 6 has %d", len(PerfRows), len(want))
	}
	for i := range want {
		if PerfRows[i] != want[i] {
			t.Errorf("row %d: %+v, issue 6 says %+v", i, PerfRows[i], want[i])
		}
	}
	for _, s := range []string{"2026-08", "-p 512 -n 128 -r 5 -ngl 99", "H200", "2026-11-29", "median"} {
		if !strings.Contains(PerfReference, s) {
			t.Errorf("provenance line lacks %q: %s", s, PerfReference)
		}
	}
}

func TestParsePerfRows_AllTableNamesAndAdHocRows(t *testing.T) {
	all, err := ParsePerfRows("all")
	if err != nil || len(all) != 5 {
		t.Fatalf("%v %v", all, err)
	}
	rs, err := ParsePerfRows("qwen2-7b:q8_0, qwen2-tiny:Q8_0")
	if err != nil || len(rs) != 2 {
		t.Fatalf("%v %v", rs, err)
	}
	if rs[0] != PerfRows[4] {
		t.Errorf("table row by name (any case): %+v", rs[0])
	}
	if rs[1].HasRef() || rs[1].Name() != "qwen2-tiny:Q8_0" {
		t.Errorf("ad-hoc row: %+v", rs[1])
	}
	for _, bad := range []string{"qwen2-0.5b", "a/b:Q8_0", "x:Q8_0,x:Q8_0", ":Q8_0", ","} {
		if _, err := ParsePerfRows(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func writeSynth(t *testing.T, shape, typ string) string {
	t.Helper()
	ty, mix, err := synth.ParseType(typ)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), shape+".gguf")
	if err := synth.Write(p, synth.Options{Shape: shape, Type: ty, Mix: mix, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return p
}

// q8 is the Q8_0 size of n elements: 34 bytes per 32.
func q8(n int64) int64 { return n / 32 * 34 }

// The hand count, tensor by tensor (DEVICE.md's "weight bytes per token").
func TestWeightBytesPerToken_HandCountedTiedAndUntiedQ8_0(t *testing.T) {
	if quant.Q8_0.String() != "Q8_0" {
		t.Fatal("quant type names changed")
	}
	// qwen2-tiny (tied): E 256, 2 layers, 4 heads of 64, 2 KV heads, FFN 512,
	// vocab 512, q/k/v biases. Per layer the matrices hold
	// q 256x256 + k 256x128 + v 256x128 + o 256x256 + gate, up, down 256x512.
	layer := q8(256*256+256*128+256*128+256*256+3*256*512) + 4*(256+256+256+128+128) // + norms, biases (F32)
	emb := q8(512 * 256)
	want := 2*layer + 4*256 + emb + q8(256) // output_norm, token_embd as the tied output, one embedding row
	if want != 1402128 {
		t.Fatalf("hand count %d", want)
	}
	w, err := WeightBytesPerToken(writeSynth(t, "qwen2-tiny", "Q8_0"))
	if err != nil || w.PerToken != want || !strings.Contains(w.Method, "tied output") || w.KVPerPos != 2*2*2*64 {
		t.Fatalf("qwen2-tiny: %+v %v, want %d", w, err, want)
	}
	// qwen3-tiny (untied): 4 heads of 128, 2 KV heads, FFN 768, QK norms, no
	// biases; output.weight 256x512 read in full, token_embd one row.
	layer = q8(256*512+256*256+256*256+512*256+3*256*768) + 4*(256+256+128+128)
	want = 2*layer + 4*256 + q8(256*512) + q8(256)
	if want != 2235664 {
		t.Fatalf("hand count %d", want)
	}
	w, err = WeightBytesPerToken(writeSynth(t, "qwen3-tiny", "Q8_0"))
	if err != nil || w.PerToken != want || !strings.Contains(w.Method, "token_embd one row") || w.FileSize <= want || w.KVPerPos != 2*2*2*128 {
		t.Fatalf("qwen3-tiny: %+v %v, want %d", w, err, want)
	}
}

func TestKVReadPerToken_MeanPositionOfTheTGTestByHand(t *testing.T) {
	w := WeightBytes{KVPerPos: 2 * 24 * 2 * 64} // qwen2-0.5b: 24 layers, 2 KV heads of 64
	// tg128 after one prompt token: 1 + 129/2 = 65.5 positions on average, f16.
	if got := w.KVReadPerToken("f16", 128); float64(got) != 6144*2*65.5 {
		t.Fatalf("%v", got)
	}
	if got := w.KVReadPerToken("auto", 128); !math.IsNaN(float64(got)) {
		t.Fatalf("unknown format must be NaN: %v", got)
	}
}

func TestNewPerfMetric_RatioTargetAndShortfallByHand(t *testing.T) {
	bt := BenchTest{Name: "tg128", TokS: []float64{990, 1000, 1010, 900, 1005}, MeanTokS: 981}
	m := NewPerfMetric(bt, 901.8, 1150)
	if m.TokS != 1000 { // the median, as the reference reports
		t.Fatalf("median %v", m.TokS)
	}
	if math.Abs(float64(m.Ratio)-1000/901.8) > 1e-12 || m.Met == nil || *m.Met || m.Short != 150 || math.Abs(m.ShortBy-150.0/1150) > 1e-12 {
		t.Fatalf("%+v", m)
	}
	m = NewPerfMetric(BenchTest{Name: "pp512", TokS: []float64{60000}}, 59841, 60000)
	if m.Met == nil || !*m.Met { // >= target is met
		t.Fatalf("60,000 >= 60,000 not met: %+v", m)
	}
	m = NewPerfMetric(bt, 0, 0)
	if m.Met != nil || !math.IsNaN(float64(m.Ratio)) {
		t.Fatalf("no reference must not be judged: %+v", m)
	}
}

func TestDecodeBandwidth_7BQ8FloorByHand(t *testing.T) {
	// 8.1e9 bytes/token at 259.1 tok/s: 2098.71 GB/s, 48.81% of 4300, floor 530.86 tok/s.
	d := DecodeBandwidth(8_100_000_000, 259.1)
	if math.Abs(float64(d.GBs)-2098.71) > 1e-9 || math.Abs(float64(d.HBMShare)-2098.71/4300) > 1e-12 ||
		math.Abs(float64(d.FloorTokS)-4.3e12/8.1e9) > 1e-9 {
		t.Fatalf("%+v", d)
	}
	if d := DecodeBandwidth(0, 100); !math.IsNaN(float64(d.GBs)) {
		t.Fatalf("unknown bytes must be NaN, never 0: %+v", d)
	}
}

func TestPerfRecordDecide_FailedBeatsMissedBeatsMet(t *testing.T) {
	yes, no := true, false
	met := PerfResult{Row: PerfRows[0], PP: &PerfMetric{Met: &yes}, TG: &PerfMetric{Met: &yes}}
	missed := PerfResult{Row: PerfRows[1], PP: &PerfMetric{Met: &yes}, TG: &PerfMetric{Met: &no}}
	failed := PerfResult{Row: PerfRows[2], Failed: true, Stage: "bench"}
	adhoc := PerfResult{Row: PerfRow{Shape: "qwen2-tiny", Type: "Q8_0"}, PP: &PerfMetric{}, TG: &PerfMetric{}}
	for _, c := range []struct {
		rows    []PerfResult
		verdict string
		code    int
	}{
		{[]PerfResult{met}, PerfMet, 0},
		{[]PerfResult{met, missed}, PerfMissed, 1},
		{[]PerfResult{met, missed, failed}, PerfFailed, 1},
		{[]PerfResult{adhoc}, PerfNoTargets, 0},
	} {
		p := &PerfRecord{Rows: c.rows}
		p.Decide()
		if p.Verdict != c.verdict || p.ExitCode() != c.code {
			t.Errorf("%d rows: %s exit %d, want %s exit %d (%s)", len(c.rows), p.Verdict, p.ExitCode(), c.verdict, c.code, p.VerdictLine)
		}
	}
}

package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/harness/gpumem"
)

// PeerLlamaBench is the one peer engine `abtest perf --peer` knows:
// llama.cpp's llama-bench.
const PeerLlamaBench = "llama-bench"

// StoredReference labels a reference number that is one of PerfRows'
// constants, used only where no peer ran in this invocation.
const StoredReference = "stored reference (issue 6)"

// PeerArgs is the peer's command line (after the binary) for one row:
// llama-bench -m FILE -ngl 99 -p PP -n TG -r R -o json [-d DEPTH]. -d is
// llama-bench's --n-depth (tools/llama-bench/README.md: "-d, --n-depth <n>").
func PeerArgs(model string, pp, tg, reps, depth int) []string {
	a := []string{"-m", model, "-ngl", "99", "-p", strconv.Itoa(pp), "-n", strconv.Itoa(tg), "-r", strconv.Itoa(reps), "-o", "json"}
	if depth > 0 {
		a = append(a, "-d", strconv.Itoa(depth))
	}
	return a
}

// llamaBenchTest is one object of `llama-bench -o json`'s array, read by
// the fields llama.cpp documents (tools/llama-bench/README.md, "JSON"):
// n_prompt, n_gen and n_depth name the test, avg_ts / stddev_ts / samples_ts
// are its tokens per second. Pointers: a field that is absent is an error,
// never a zero.
type llamaBenchTest struct {
	NPrompt   *int      `json:"n_prompt"`
	NGen      *int      `json:"n_gen"`
	NDepth    *int      `json:"n_depth"`
	AvgTS     *float64  `json:"avg_ts"`
	StddevTS  *float64  `json:"stddev_ts"`
	SamplesTS []float64 `json:"samples_ts"`
}

// ParseLlamaBench reads `llama-bench -o json` and returns its pp test
// (n_prompt = pp, n_gen = 0) and tg test (n_prompt = 0, n_gen = tg), both
// at n_depth = depth, as BenchTests named as minfer names them (pp512,
// tg128@d4096): the samples are samples_ts, the mean avg_ts. A size of 0
// is not looked for. Any malformed, empty or incomplete document is one
// error saying what is missing.
func ParseLlamaBench(out []byte, pp, tg, depth int) (pt, tt BenchTest, err error) {
	var doc []llamaBenchTest
	if len(strings.TrimSpace(string(out))) == 0 {
		return pt, tt, fmt.Errorf("llama-bench -o json printed nothing on stdout")
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return pt, tt, fmt.Errorf("llama-bench -o json: not a JSON array of tests: %v", err)
	}
	if len(doc) == 0 {
		return pt, tt, fmt.Errorf("llama-bench -o json: an empty array (no test ran)")
	}
	suffix := ""
	if depth > 0 {
		suffix = fmt.Sprintf("@d%d", depth)
	}
	find := func(np, ng int, name string) (BenchTest, error) {
		for i, t := range doc {
			if t.NPrompt == nil || t.NGen == nil || t.NDepth == nil {
				return BenchTest{}, fmt.Errorf("llama-bench -o json: test %d lacks n_prompt, n_gen or n_depth", i)
			}
			if *t.NPrompt != np || *t.NGen != ng || *t.NDepth != depth {
				continue
			}
			if t.AvgTS == nil || !(*t.AvgTS > 0) || math.IsInf(*t.AvgTS, 0) {
				return BenchTest{}, fmt.Errorf("llama-bench -o json: %s has no positive avg_ts", name)
			}
			if len(t.SamplesTS) == 0 {
				return BenchTest{}, fmt.Errorf("llama-bench -o json: %s has no samples_ts", name)
			}
			for _, s := range t.SamplesTS {
				if !(s > 0) || math.IsInf(s, 0) {
					return BenchTest{}, fmt.Errorf("llama-bench -o json: %s has a sample of %v tok/s", name, s)
				}
			}
			b := BenchTest{Name: name, NTokens: np + ng, TokS: append([]float64(nil), t.SamplesTS...), MeanTokS: *t.AvgTS}
			if t.StddevTS != nil {
				b.StddevTokS = *t.StddevTS
			}
			return b, nil
		}
		return BenchTest{}, fmt.Errorf("llama-bench -o json has no test with n_prompt %d, n_gen %d, n_depth %d (%s)", np, ng, depth, name)
	}
	if pp > 0 {
		if pt, err = find(pp, 0, fmt.Sprintf("pp%d%s", pp, suffix)); err != nil {
			return pt, tt, err
		}
	}
	if tg > 0 {
		if tt, err = find(0, tg, fmt.Sprintf("tg%d%s", tg, suffix)); err != nil {
			return pt, tt, err
		}
	}
	return pt, tt, nil
}

// PoolTests joins the repetitions of one test measured by several
// processes (the rounds of a row): samples in round order, the mean and
// the sample standard deviation over all of them.
func PoolTests(ts []BenchTest) BenchTest {
	if len(ts) == 0 {
		return BenchTest{}
	}
	out := BenchTest{Name: ts[0].Name, NTokens: ts[0].NTokens}
	for _, t := range ts {
		out.TokS = append(out.TokS, t.TokS...)
		out.SamplesMS = append(out.SamplesMS, t.SamplesMS...)
	}
	var sum float64
	for _, x := range out.TokS {
		sum += x
	}
	n := float64(len(out.TokS))
	out.MeanTokS = sum / n
	if len(out.TokS) > 1 {
		var ss float64
		for _, x := range out.TokS {
			ss += (x - out.MeanTokS) * (x - out.MeanTokS)
		}
		out.StddevTokS = math.Sqrt(ss / (n - 1))
	}
	return out
}

// PeerRound is one round of a row: one minfer bench process and one peer
// process, First says which ran first ("minfer" or the peer's name).
type PeerRound struct {
	Round int    `json:"round"`
	First string `json:"first"`
}

// PeerRow is the peer engine's measurement of one row: the same GGUF file,
// the same test sizes, its processes interleaved with minfer's.
type PeerRow struct {
	Command string      `json:"command"` // one timed process's command line
	Rounds  []PeerRound `json:"rounds"`
	PP      *PerfMetric `json:"pp,omitempty"`
	TG      *PerfMetric `json:"tg,omitempty"`
	// DeviceMemory is the peak over the peer's timed processes, sampled
	// from outside them as minfer's (gpumem).
	DeviceMemory *gpumem.Usage `json:"device_memory,omitempty"`
}

// PeakOf is the larger peak of two usages (nil and unmeasured ones give
// way to a measured one); the other processes seen are kept from both.
func PeakOf(a, b *gpumem.Usage) *gpumem.Usage {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case !a.Measured:
		return b
	case !b.Measured:
		return a
	}
	out := *a
	if b.PeakBytes > a.PeakBytes {
		out = *b
	}
	out.Others = append(append([]gpumem.Other(nil), a.Others...), b.Others...)
	return &out
}

// PerfSlope is the growth of the pp chunk time with the KV depth of one
// model: the least-squares slope of ms per pp chunk (pp / tok/s) over the
// depths run (depth 0 and every depth row of the model), per 1,024 cached
// tokens, ours and the peer's (NaN: the peer did not run).
type PerfSlope struct {
	Model  string `json:"model"` // shape:type
	PP     int    `json:"pp"`
	Depths []int  `json:"depths"`
	Ours   Num    `json:"ours_ms_per_1024"`
	Peer   Num    `json:"peer_ms_per_1024"`
	Met    *bool  `json:"met,omitempty"` // ours <= the peer's (nil: no peer)
	OursMS []Num  `json:"ours_chunk_ms"`
	PeerMS []Num  `json:"peer_chunk_ms,omitempty"`
}

// SlopePer1024 is the least-squares slope of ms over depth, x 1024; NaN
// with fewer than two distinct depths or a non-finite time.
func SlopePer1024(depths []int, ms []float64) float64 {
	if len(depths) < 2 || len(depths) != len(ms) {
		return math.NaN()
	}
	var sx, sy float64
	for i := range depths {
		if math.IsNaN(ms[i]) || math.IsInf(ms[i], 0) {
			return math.NaN()
		}
		sx += float64(depths[i])
		sy += ms[i]
	}
	n := float64(len(depths))
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range depths {
		dx := float64(depths[i]) - mx
		sxx += dx * dx
		sxy += dx * (ms[i] - my)
	}
	if sxx == 0 {
		return math.NaN()
	}
	return sxy / sxx * 1024
}

// PerfPeer is the peer engine of a perf run.
type PerfPeer struct {
	Name   string `json:"name"` // llama-bench
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Rounds int    `json:"rounds"` // rounds per row: one minfer and one peer process each
}

// NewPerfSlopes is one PerfSlope per model that has a measured depth-0 pp
// and at least one measured depth row's pp in rows.
func NewPerfSlopes(rows []PerfResult, pp int) []PerfSlope {
	var out []PerfSlope
	for _, base := range rows {
		if base.Failed || base.Row.Depth > 0 || base.PP == nil {
			continue
		}
		s := PerfSlope{Model: base.Row.BaseName(), PP: pp, Depths: []int{0}}
		chunk := func(m *PerfMetric) Num { return Num(float64(pp) / float64(m.TokS) * 1000) }
		s.OursMS = []Num{chunk(base.PP)}
		peer := base.Peer != nil && base.Peer.PP != nil
		if peer {
			s.PeerMS = []Num{chunk(base.Peer.PP)}
		}
		for _, r := range rows {
			if r.Failed || r.Row.Depth == 0 || r.PP == nil || !strings.EqualFold(r.Row.BaseName(), s.Model) {
				continue
			}
			s.Depths = append(s.Depths, r.Row.Depth)
			s.OursMS = append(s.OursMS, chunk(r.PP))
			if peer && r.Peer != nil && r.Peer.PP != nil {
				s.PeerMS = append(s.PeerMS, chunk(r.Peer.PP))
			} else {
				peer = false
			}
		}
		if len(s.Depths) < 2 {
			continue
		}
		s.Ours, s.Peer = Num(SlopePer1024(s.Depths, Floats(s.OursMS))), Num(math.NaN())
		if peer {
			s.Peer = Num(SlopePer1024(s.Depths, Floats(s.PeerMS)))
			met := float64(s.Ours) <= float64(s.Peer)
			s.Met = &met
		} else {
			s.PeerMS = nil
		}
		out = append(out, s)
	}
	return out
}

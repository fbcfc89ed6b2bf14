package cuda

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/model"
)

// dsGreedyLogits forwards first (a prompt, or a pending token) and then n-1
// greedy tokens; it returns the n tokens chosen and the logits each was
// chosen from. The last token is chosen but not forwarded (a session's
// pending token).
func dsGreedyLogits(t *testing.T, e *model.Engine, first []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	var ids []int32
	var logits [][]float32
	in := first
	for range n {
		l, err := e.Forward(in, false)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, slices.Clone(l))
		id := int32(dsArgmax(l))
		ids = append(ids, id)
		in = []int32{id}
	}
	return ids, logits
}

// Issue 23 item 2 on CUDA: a session saved from the device's KV cells and
// restored into a fresh engine continues bitwise like the run that never
// stopped, in every KV format (the cells travel as stored, never
// converted).
func TestSession_DeviceRestoredRunContinuesBitwiseInEveryKVFormat(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	prompt := []int32{10, 200, 33, 7, 99, 42, 5, 311, 12}
	const k, n = 5, 12
	for _, f := range []string{"f32", "f16", "q8_0"} {
		t.Run(f, func(t *testing.T) {
			lv := "MINFER_CACHE_TYPE=" + f
			want, wantLogits := dsGreedyLogits(t, dsEngine(t, path, "cuda", 128, lv), prompt, n)

			first := dsEngine(t, path, "cuda", 128, lv)
			ids, _ := dsGreedyLogits(t, first, prompt, k)
			file := filepath.Join(t.TempDir(), "s.session")
			if err := first.SaveSession(file, model.Session{Pending: ids[k-1:]}); err != nil {
				t.Fatal(err)
			}
			e := dsEngine(t, path, "cuda", 128, lv)
			s, err := e.LoadSession(file)
			if err != nil {
				t.Fatal(err)
			}
			more, moreLogits := dsGreedyLogits(t, e, s.Pending, n-k)
			got := append(slices.Clone(ids), more...)
			if !slices.Equal(got, want) {
				t.Fatalf("tokens %v after the restore, %v in the run that never stopped", got, want)
			}
			for i, l := range moreLogits {
				for j := range l {
					if math.Float32bits(l[j]) != math.Float32bits(wantLogits[k+i][j]) {
						t.Fatalf("step %d logit %d: %g restored, %g never stopped", k+i, j, l[j], wantLogits[k+i][j])
					}
				}
			}
		})
	}
}

// The number: how much faster restoring a long session is than
// prefilling it again. Opt-in (SESSION_BENCH=SHAPE:TYPE:TOKENS, e.g.
// qwen2-7b:Q4_K_M:32000): it synthesizes the model, prefills TOKENS in
// chunks of 512, saves, and restores into a fresh engine; it logs the
// times (a measurement, asserted nowhere; the file was just written, so
// the restore reads it from the page cache as a warm restore would) and checks the restored engine's
// next logits equal the saved one's bitwise.
func TestSession_DeviceRestoreAgainstPrefillTimes(t *testing.T) {
	spec := os.Getenv("SESSION_BENCH")
	if spec == "" {
		t.Skip("SESSION_BENCH=SHAPE:TYPE:TOKENS not set")
	}
	dsNeedDevice(t)
	var shape, typ string
	var n int
	if parts := strings.SplitN(spec, ":", 3); len(parts) == 3 {
		shape, typ = parts[0], parts[1]
		if _, err := fmt.Sscan(parts[2], &n); err != nil || n <= 0 {
			t.Fatalf("SESSION_BENCH=%s: TOKENS %q", spec, parts[2])
		}
	} else {
		t.Fatalf("SESSION_BENCH=%s: want SHAPE:TYPE:TOKENS", spec)
	}
	path := dsSynth(t, shape, typ)
	nCtx := n + 64
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(100 + (i*7919)%30000)
	}
	e := dsEngine(t, path, "cuda", nCtx)
	t0 := time.Now()
	for i := 0; i < n; i += 512 {
		if _, err := e.Forward(prompt[i:min(i+512, n)], false); err != nil {
			t.Fatal(err)
		}
	}
	prefill := time.Since(t0)
	file := filepath.Join(t.TempDir(), "long.session")
	t0 = time.Now()
	if err := e.SaveSession(file, model.Session{Pending: []int32{42}}); err != nil {
		t.Fatal(err)
	}
	save := time.Since(t0)
	want, err := e.Forward([]int32{42}, false)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Clone(want)
	st, _ := os.Stat(file)

	r := dsEngine(t, path, "cuda", nCtx)
	t0 = time.Now()
	s, err := r.LoadSession(file)
	if err != nil {
		t.Fatal(err)
	}
	restore := time.Since(t0)
	got, err := r.Forward(s.Pending, false)
	if err != nil {
		t.Fatal(err)
	}
	for j := range want {
		if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
			t.Fatalf("logit %d after the restore %g, %g in the saved engine", j, got[j], want[j])
		}
	}
	t.Logf("%s %s, %d tokens: prefill %v (%.0f tok/s), save %v, restore %v from a %d-byte file: restore is x%.1f faster than prefill",
		shape, typ, n, prefill, float64(n)/prefill.Seconds(), save, restore, st.Size(), prefill.Seconds()/restore.Seconds())
}

// bench --fill zeros on CUDA (abtest's depth runs): the zero cells reach
// the device in every KV format (read back through the backend), the
// context stands at the fill, and the forwards after it run with finite
// logits.
func TestFillKVZeros_DeviceCellsAreZeroAndForwardsRun(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	for _, f := range []string{"f32", "f16", "q8_0"} {
		t.Run(f, func(t *testing.T) {
			e := dsEngine(t, path, "cuda", 256, "MINFER_CACHE_TYPE="+f)
			// Cells 0..63 hold a real prefill first, so zeros are seen to land.
			if _, err := e.Forward(make([]int32, 64), false); err != nil {
				t.Fatal(err)
			}
			fill := make([]int32, 100)
			if err := e.FillKVZeros(fill); err != nil {
				t.Fatal(err)
			}
			if e.Pos() != 100 {
				t.Fatalf("pos %d after a fill of 100", e.Pos())
			}
			kc := dsDeviceBackend(t, e)
			h := e.HParams()
			kf, err := kv.ParseFormat(f)
			if err != nil {
				t.Fatal(err)
			}
			row := kv.RowBytes(kf, h.NKV())
			buf := make([]byte, 100*row)
			for layer := range h.NLayer {
				if err := kc.ReadKVCells(layer, graph.SideK, 0, buf); err != nil {
					t.Fatal(err)
				}
				for i, b := range buf {
					if b != 0 {
						t.Fatalf("layer %d K byte %d = %d after the zero fill", layer, i, b)
					}
				}
			}
			for _, step := range [][]int32{make([]int32, 16), {5}, {6}} {
				l, err := e.Forward(step, false)
				if err != nil {
					t.Fatal(err)
				}
				for j, v := range l {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("logit %d = %g after the zero fill", j, v)
					}
				}
			}
		})
	}
}

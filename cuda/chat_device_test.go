package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/chat"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
)

// The conversation-reuse gate on the device (the design's
// cuda_conversation_multiturn_reuse): engine/chat's CheckReuse with the
// device's bar (chat.DeviceBar: the conversation's decode steps and chunks
// against one prefill are other paths, the activation-quantization class)
// and the census read from the backend's capture stats: the decode graph
// captured in turn 1 is replayed, never captured again, in turns 2 and 3.

// dsChatTurns is the three-turn script of the device gate (engine/chat's).
var dsChatTurns = []string{
	"Write a Python function that returns the n-th Fibonacci number.",
	"Now make it iterative.",
	"class Config:\n    def __init__(self",
}

// dsChatModels are the models of the device gate: the synthetic Qwen2 and
// Qwen3 shapes, and the trained Qwen2 (tiny-code, real tokenizer and Qwen3
// template) and Qwen3 models where they are found.
func dsChatModels(t *testing.T) map[string]string {
	t.Helper()
	ms := map[string]string{
		"qwen2-tiny/Q8_0": dsSynth(t, "qwen2-tiny", "Q8_0"),
		"qwen3-tiny/Q8_0": dsSynth(t, "qwen3-tiny", "Q8_0"),
	}
	for name, cands := range map[string][]string{
		"tiny-code":       {os.Getenv("TINY_CODE_GGUF"), filepath.Join("..", "..", "shared", "models", "tiny-code-f16.gguf"), filepath.Join("..", "bin", "tiny-code-Q8_0.gguf")},
		"tiny-qwen3-code": {filepath.Join("..", "..", "shared", "models", "tiny-qwen3-code-f16.gguf"), filepath.Join("..", "bin", "tiny-qwen3-code-Q8_0.gguf")},
	} {
		for _, p := range cands {
			if _, err := os.Stat(p); p != "" && err == nil {
				ms[name] = p
				break
			}
		}
		if ms[name] == "" {
			t.Logf("%s absent: not in the gate", name)
		}
	}
	return ms
}

func dsChatTemplate(t *testing.T, path string) chat.Template {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := chat.ReadTemplate(f)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chat.Recognize(src)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// dsChatReuse runs the gate on the device for one model and KV format.
// The conversation pins graphs on (dsGraphsOn): the gate counts its decode
// captures and replays, and an A/B's arm B may turn graphs off.
func dsChatReuse(t *testing.T, path, kvFormat, defect string) ([]chat.ReuseTurn, chat.GraphCount, error) {
	t.Helper()
	conv := dsEngine(t, path, "cuda", 512, append([]string{"MINFER_CACHE_TYPE=" + kvFormat}, dsGraphsOn...)...)
	b := dsDeviceBackend(t, conv)
	counts := func() chat.GraphCount {
		st := b.CaptureStats()
		return chat.GraphCount{Built: int64(st.DecodeCaptures), Replayed: int64(st.DecodeReplays)}
	}
	fresh := func() (chat.LM, func(), error) {
		cfg, err := levers.Parse(append(os.Environ(), "MINFER_CACHE_TYPE="+kvFormat))
		if err != nil {
			return nil, nil, err
		}
		e, err := model.Load(path, model.Options{Device: "cuda", NCtx: 512, Levers: cfg, Logf: t.Logf,
			NewDevice: func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error) {
				return New(Options{Levers: lv, Logf: logf})
			}})
		if err != nil {
			return nil, nil, err
		}
		return e, func() { e.Close() }, nil
	}
	turns, err := chat.CheckReuse(conv, fresh, chat.ReuseOptions{
		Template: dsChatTemplate(t, path), System: "You are a terse assistant.", Turns: dsChatTurns, Max: 12,
		Bar: chat.DeviceBar, IgnoreEOG: true, Graphs: counts, Defect: defect,
	})
	if st := b.CaptureStats(); st.Disabled {
		t.Errorf("CUDA graphs were disabled during the conversation: %+v", st)
	}
	return turns, counts(), err
}

// TestConversation_DeviceTurnsTwoAndThreeMatchAFreshPrefillAndReplayTheDecodeGraph
// is the gate on CUDA for every KV format.
func TestConversation_DeviceTurnsTwoAndThreeMatchAFreshPrefillAndReplayTheDecodeGraph(t *testing.T) {
	dsNeedDevice(t)
	for name, path := range dsChatModels(t) {
		for _, f := range kv.Formats() {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				turns, c, err := dsChatReuse(t, path, f.String(), "")
				for i, tr := range turns {
					t.Logf("turn %d: fed %d of %d, compared %d of %d (stopped at a near-tie: %v), max |diff| %.3g, rel L2 %.3g",
						i+1, tr.Fed, tr.Context, tr.Compared, len(tr.Answer), tr.StoppedAtMargin, tr.MaxAbs, tr.RelL2)
				}
				t.Logf("decode graphs: %d captured, %d replays", c.Built, c.Replayed)
				if err != nil {
					t.Fatal(err) // the census check is in it: no decode capture after turn 1
				}
			})
		}
	}
}

// A conversation that throws its graphs away every turn captures the
// decode graph again: the device gate fails at turn 2 on the census.
func TestConversation_DeviceGateFailsWhenTheDecodeGraphIsCapturedAgain(t *testing.T) {
	dsNeedDevice(t)
	_, c, err := dsChatReuse(t, dsSynth(t, "qwen2-tiny", "Q8_0"), "f16", chat.DefectRecompile)
	if err == nil || !strings.HasPrefix(err.Error(), "turn 2: census: the decode graph was built again") {
		t.Fatalf("planted %s: %v (decode graphs %+v); want turn 2 to fail the census check", chat.DefectRecompile, err, c)
	}
	t.Log(err)
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

// fixture reads a wire fixture of the schema package.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "schema", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exitLineFixture is the fixture's exit line under key.
func exitLineFixture(t *testing.T, key string) []byte {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(fixture(t, "exit_lines.txt")))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"`+key+`"`) {
			return []byte(sc.Text())
		}
	}
	t.Fatalf("exit_lines.txt has no %s line", key)
	return nil
}

// samePaths fails unless got and want have the same field paths as doc.
func samePaths(t *testing.T, what string, got, want []byte, doc any) {
	t.Helper()
	gp, err := schema.FieldPaths(got, doc)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, got)
	}
	wp, err := schema.FieldPaths(want, doc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gp, wp) {
		t.Errorf("%s: minfer writes the fields\n%v\nthe fixture has\n%v", what, gp, wp)
	}
}

// What minfer writes today has the field sets of the schema package's
// fixtures, which the schema types are held to: writer, fixtures and
// readers cannot drift apart.
func TestDocuments_MinferWritesTheFixturesFieldSets(t *testing.T) {
	m := filepath.Join(t.TempDir(), "m.gguf")
	if err := synth.Write(m, synth.Options{Shape: "qwen2-tiny", Type: quant.Q8_0, Seed: 1, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	census, err := levers.Parse([]string{"MINFER_BENCH_WARMUP_MS=0", "MINFER_LAUNCH_CENSUS=1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		fixture string
		cfg     levers.Config
		args    []string
		doc     any
	}{
		{"bench.json", testConfig(t), []string{"bench", "-m", m, "--device", "cpu", "-p", "8", "-n", "4", "-r", "2", "--format", "json"}, schema.Bench{}},
		{"bench_census_depth.json", census, []string{"bench", "-m", m, "--device", "cpu", "-p", "8", "-n", "4", "-r", "2", "-d", "16", "--format", "json"}, schema.Bench{}},
		{"bench_turns.json", testConfig(t), []string{"bench", "-m", m, "--device", "cpu", "--turns", "2", "-n", "4", "-r", "2", "--format", "json"}, schema.Bench{}},
		{"bench_draft.json", testConfig(t), []string{"bench", "-m", m, "--device", "cpu", "-p", "8", "-n", "4", "-r", "2", "--draft", m, "--draft-n", "3", "--format", "json"}, schema.Bench{}},
		{"info.json", testConfig(t), []string{"info", "-m", m, "--json"}, schema.Info{}},
		{"logits.json", testConfig(t), []string{"logits", "-m", m, "--device", "cpu", "--ids", "1,2,3", "--top", "3", "--json"}, schema.Logits{}},
		{"generate.json", testConfig(t), []string{"generate", "-m", m, "--device", "cpu", "--greedy", "-n", "4", "--json", "hello"}, schema.Generate{}},
		{"tokenize.json", testConfig(t), []string{"tokenize", "-m", m, "--json", "hello <|im_start|>"}, schema.Tokens{}},
	}
	for _, c := range cases {
		a := &app{cfg: c.cfg}
		stdout, stderr, code := runApp(t, a, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr)
		}
		samePaths(t, c.fixture, []byte(stdout), fixture(t, c.fixture), c.doc)
		if c.cfg.LaunchCensus {
			var exit bytes.Buffer
			a.deviceReport(&exit)
			samePaths(t, "launch_census line", bytes.TrimSpace(exit.Bytes()), exitLineFixture(t, schema.LaunchCensusKey), schema.CensusLine{})
		}
	}
}

// The CUDA-only parts, written here without a device: the device and census
// fields of a bench test and the cuda_graphs and op_timing lines.
func TestDocuments_DeviceFieldsHaveTheFixturesFieldSets(t *testing.T) {
	e := &clockLM{}
	br := newBenchRunner(e, 8, 4, 0)
	br.device = func() time.Duration { return e.dev }
	var launches int64
	br.census = func() censusCount {
		launches++
		return censusCount{kernels: map[string]int64{"k": launches}, replays: launches}
	}
	tg, err := br.measure("tg4", 4, 2, func() (time.Duration, error) { return br.runTG(4) })
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(map[string]any{"tests": []schema.BenchTest{tg}})
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Tests []json.RawMessage }
	if err := json.Unmarshal(fixture(t, "bench_device.json"), &want); err != nil || len(want.Tests) == 0 {
		t.Fatalf("bench_device.json: %v", err)
	}
	samePaths(t, "bench test on a device", got, []byte(`{"tests":[`+string(want.Tests[len(want.Tests)-1])+`]}`), schema.Bench{})

	// device_memory: the CUDA backend's classes, the driver's view, the plan.
	fits := memplan.Plan{Model: "m", Backend: "cuda", NCtx: 4096, Weights: 1, Derived: 1, KV: 1, Scratch: 1, Overhead: 1, KVPerCell: 1}
	dm := deviceMemoryDoc(cuda.DeviceMemory{Weights: 1, Derived: 2, KV: 3, Activations: 4, Workspace: 5, FreeAtOpen: 100, Free: 80, Total: 200},
		planDoc(fits, 1<<30))
	if dm.TotalBytes != 15 || dm.Driver.UsedSinceOpenBytes != 20 || dm.Plan.Fits == nil || !*dm.Plan.Fits {
		t.Errorf("deviceMemoryDoc %+v", dm)
	}
	got, err = json.Marshal(map[string]any{"device_memory": dm})
	if err != nil {
		t.Fatal(err)
	}
	var wantDM struct {
		DeviceMemory json.RawMessage `json:"device_memory"`
	}
	if err := json.Unmarshal(fixture(t, "bench_device.json"), &wantDM); err != nil || wantDM.DeviceMemory == nil {
		t.Fatalf("bench_device.json has no device_memory: %v", err)
	}
	samePaths(t, "bench device_memory", got, []byte(`{"device_memory":`+string(wantDM.DeviceMemory)+`}`), schema.Bench{})

	line := func(v any) []byte {
		var b bytes.Buffer
		writeLine(&b, v)
		return bytes.TrimSpace(b.Bytes())
	}
	graphs := graphsDoc([]cuda.CaptureStats{{Captures: 1, Replays: 2}, {Captures: 1, Invalidations: 1}})
	if graphs.Captured != 2 || graphs.Replayed != 2 || graphs.Invalidated != 1 || graphs.PDLLaunches != 0 {
		t.Errorf("graphsDoc sums to %+v", graphs)
	}
	samePaths(t, "cuda_graphs line", line(schema.GraphsLine{CUDAGraphs: graphs}), exitLineFixture(t, schema.CUDAGraphsKey), schema.GraphsLine{})
	timing := opTimingDoc([]cuda.OpTime{{Kernel: "k", Count: 2, Total: 3 * time.Microsecond}})
	if k := timing.Kernels[0]; k.Count != 2 || k.TotalNS != 3000 {
		t.Errorf("opTimingDoc kernel %+v", k)
	}
	samePaths(t, "op_timing line", line(schema.OpTimingLine{OpTiming: timing}), exitLineFixture(t, schema.OpTimingKey), schema.OpTimingLine{})
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
)

func TestDeviceCUDA_WithoutADeviceIsAClearError(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "generate", "--model", m, "--device", "cuda", "--greedy", "-n", "2", "hi")
	if code == 0 {
		t.Skip("a CUDA device answered here: this test is for machines without one")
	}
	if code != 1 || stdout != "" || !strings.Contains(stderr, "--device cuda") || !strings.Contains(stderr, "no usable device") {
		t.Errorf("code %d, stdout %q, stderr %q: want exit 1 naming --device cuda and why there is no device", code, stdout, stderr)
	}
}

func TestDisableCUDA_RunsOnTheCPUEvenForDeviceCUDA(t *testing.T) {
	m := synthModel(t)
	cfg, err := levers.Parse([]string{"MINFER_BENCH_WARMUP_MS=0", "MINFER_DISABLE_CUDA=1"})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, cfg, "generate", "--model", m, "--device", "cuda", "--greedy", "-n", "2", "--json", "hi")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, `"cpu"`) {
		t.Errorf("stdout %q does not say the run was on the cpu", stdout)
	}
}

func TestDeviceReport_CensusIsOneJSONLineEvenWithoutADevice(t *testing.T) {
	cfg, err := levers.Parse([]string{"MINFER_LAUNCH_CENSUS=1"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	(&app{cfg: cfg}).deviceReport(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var v map[string]map[string]int64
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &v) != nil || v["launch_census"] == nil {
		t.Errorf("census output %q: want one line {\"launch_census\":{...}}", b.String())
	}
}

// Every command that runs the engine prints, with the census on, one
// launch_census line at exit holding the CPU's node counts by path name
// (no cuda_graphs line without a CUDA backend); with the census off it
// prints nothing.
func TestDeviceReport_CPUCensusOfEveryEngineCommand(t *testing.T) {
	m := synthModel(t)
	cfg, err := levers.Parse([]string{"MINFER_BENCH_WARMUP_MS=0", "MINFER_LAUNCH_CENSUS=1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"generate", "--model", m, "--device", "cpu", "--greedy", "-n", "3", "--json", "hi"},
		{"logits", "--model", m, "--device", "cpu", "--ids", "1,2,3", "--json"},
		{"bench", "--model", m, "--device", "cpu", "-p", "4", "-n", "2", "-r", "1", "--format", "json"},
	} {
		a := &app{cfg: cfg}
		if _, stderr, code := runApp(t, a, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", args[0], code, stderr)
		}
		var b bytes.Buffer
		a.deviceReport(&b)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		var v map[string]map[string]int64
		if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &v) != nil {
			t.Fatalf("%s: report %q: want one launch_census line", args[0], b.String())
		}
		c := v["launch_census"]
		for _, name := range []string{"cpu_get_rows", "cpu_rms_norm", "cpu_fused_qkv_f16", "cpu_fused_ffn_f16", "cpu_qkv_rope_store_f32", "cpu_kv_store_f32", "cpu_attn", "cpu_add"} {
			if c[name] <= 0 {
				t.Errorf("%s: census %v lacks %s", args[0], c, name)
			}
		}
	}
	a := &app{cfg: testConfig(t)}
	if _, stderr, code := runApp(t, a, "logits", "--model", m, "--device", "cpu", "--ids", "1"); code != 0 {
		t.Fatal(stderr)
	}
	var b bytes.Buffer
	a.deviceReport(&b)
	if b.Len() != 0 {
		t.Errorf("census off: report %q, want nothing", b.String())
	}
}

// clockBackend is a CPU backend that says it times its device work.
type clockBackend struct{ *cpu.Backend }

func (clockBackend) DeviceTime() time.Duration { return 42 * time.Millisecond }
func (clockBackend) Delay(time.Duration) error { return nil }

type backendsLM struct {
	lm
	bs []graph.Backend
}

func (b backendsLM) Backends() []graph.Backend { return b.bs }

// The bench reads device time from the backend the engine runs on when it
// times its work (model.DeviceClock), never on a CPU engine.
func TestDeviceClock_OnlyForABackendThatTimesItsWork(t *testing.T) {
	e, err := model.Load(synthModel(t), model.Options{Device: "cpu", Levers: testConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if deviceClock(e) != nil {
		t.Error("a CPU engine has a device clock")
	}
	c := cpu.New(cpu.Options{Threads: 1})
	defer c.Close()
	clock := deviceClock(backendsLM{bs: []graph.Backend{clockBackend{c}, c}})
	if clock == nil || clock() != 42*time.Millisecond {
		t.Error("a device that times its work: no device clock")
	}
	if deviceClock(backendsLM{bs: []graph.Backend{c, clockBackend{c}}}) != nil {
		t.Error("the clock of a backend the engine does not run on was read")
	}
}

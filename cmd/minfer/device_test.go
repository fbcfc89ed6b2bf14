package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
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

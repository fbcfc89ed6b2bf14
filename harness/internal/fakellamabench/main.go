// Command fakellamabench stands in for llama.cpp's llama-bench in the
// tests of `abtest perf --peer`: it takes llama-bench's flags (-m, -ngl,
// -p, -n, -d, -r, -o json), prints llama-bench's JSON array (the fields
// tools/llama-bench/README.md documents: n_prompt, n_gen, n_depth, avg_ts,
// stddev_ts, samples_ts, among others) and exits in milliseconds.
//
// FAKELLAMA_RATES=PP,TG[,PPDEPTH,TGDEPTH] sets the tok/s of every sample
// (at depth > 0 the last two when given; default 5000,500). FAKELLAMA_LOG
// appends "llama-bench ARGS" per process (a test points it and
// FAKEMINFER_BENCH_LOG at one file to see the order of the engines).
// FAKELLAMA_MODE plants faults: malformed (not JSON), empty (nothing on
// stdout), emptyarray ([]), fail (exit 1 with a CUDA error on stderr),
// nodepth (reports n_depth 0 whatever -d). FAKELLAMA_DEVICE_MIB puts the
// process on the harness's fake GPU (ABTEST_FAKE_GPUMEM) with that much
// memory, as the fake minfer does.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

type test struct {
	BuildCommit string    `json:"build_commit"`
	ModelFile   string    `json:"model_filename"`
	NGPULayers  int       `json:"n_gpu_layers"`
	NPrompt     int       `json:"n_prompt"`
	NGen        int       `json:"n_gen"`
	NDepth      int       `json:"n_depth"`
	TestTime    string    `json:"test_time"`
	AvgNS       int64     `json:"avg_ns"`
	StddevNS    int64     `json:"stddev_ns"`
	AvgTS       float64   `json:"avg_ts"`
	StddevTS    float64   `json:"stddev_ts"`
	SamplesNS   []int64   `json:"samples_ns"`
	SamplesTS   []float64 `json:"samples_ts"`
}

func main() {
	if lg := os.Getenv("FAKELLAMA_LOG"); lg != "" {
		if f, err := os.OpenFile(lg, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "llama-bench %s\n", strings.Join(os.Args[1:], " "))
			f.Close()
		}
	}
	fs := flag.NewFlagSet("llama-bench", flag.ExitOnError)
	model := fs.String("m", "", "")
	ngl := fs.Int("ngl", 0, "")
	p := fs.Int("p", 512, "")
	n := fs.Int("n", 128, "")
	d := fs.Int("d", 0, "")
	r := fs.Int("r", 5, "")
	o := fs.String("o", "md", "")
	_ = fs.Parse(os.Args[1:])
	if *o != "json" {
		fmt.Fprintln(os.Stderr, "fakellamabench: only -o json")
		os.Exit(1)
	}
	defer holdDeviceMemory()()
	mode := os.Getenv("FAKELLAMA_MODE")
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "ggml_cuda_init: found 1 CUDA devices\nCUDA error: out of memory\n  current device: 0, in function alloc at ggml-cuda.cu:412")
		os.Exit(1)
	case "malformed":
		fmt.Println(`[{"n_prompt": 512, "avg_ts": `)
		return
	case "empty":
		return
	case "emptyarray":
		fmt.Println("[]")
		return
	}
	pp, tg := 5000.0, 500.0
	if rs := os.Getenv("FAKELLAMA_RATES"); rs != "" {
		v := strings.Split(rs, ",")
		f := make([]float64, len(v))
		for i := range v {
			f[i], _ = strconv.ParseFloat(v[i], 64)
		}
		pp, tg = f[0], f[1]
		if *d > 0 && len(f) == 4 {
			pp, tg = f[2], f[3]
		}
	}
	depth := *d
	if mode == "nodepth" {
		depth = 0
	}
	mk := func(np, ng int, rate float64) test {
		t := test{BuildCommit: "fake", ModelFile: *model, NGPULayers: *ngl, NPrompt: np, NGen: ng, NDepth: depth,
			TestTime: time.Now().UTC().Format(time.RFC3339), AvgTS: rate}
		ns := int64(float64(np+ng) / rate * 1e9)
		t.AvgNS = ns
		for i := 0; i < *r; i++ {
			t.SamplesTS = append(t.SamplesTS, rate)
			t.SamplesNS = append(t.SamplesNS, ns)
		}
		return t
	}
	var out []test
	if *p > 0 {
		out = append(out, mk(*p, 0, pp))
	}
	if *n > 0 {
		out = append(out, mk(0, *n, tg))
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	os.Stdout.Write(append(b, '\n'))
}

// holdDeviceMemory is the fake minfer's protocol with the harness's fake
// GPU (gpumem's test seam): "PID MIB" while running, "PID exit" after,
// waiting until the sampler saw the process.
func holdDeviceMemory() func() {
	file, mib := os.Getenv("ABTEST_FAKE_GPUMEM"), os.Getenv("FAKELLAMA_DEVICE_MIB")
	if file == "" || mib == "" {
		return func() {}
	}
	pid := os.Getpid()
	appendTo := func(line string) int64 {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakellamabench:", err)
			os.Exit(1)
		}
		defer f.Close()
		st, _ := f.Stat()
		fmt.Fprintln(f, line)
		return st.Size()
	}
	at := appendTo(fmt.Sprintf("%d %s", pid, mib))
	seen := fmt.Sprintf("seen %d\n", pid)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && int64(len(b)) > at && strings.Contains(string(b[at:]), seen) {
			break
		}
	}
	return func() { appendTo(fmt.Sprintf("%d exit", pid)) }
}

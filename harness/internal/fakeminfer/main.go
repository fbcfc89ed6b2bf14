// Command fakeminfer is a test double of the minfer CLI: it speaks the same
// flags and JSON (levers, bench, logits, generate), computes deterministic
// logits of a 256-token byte vocabulary, and honours MINFER_CACHE_TYPE and
// the MINFER_TEST_MUTATE seam, so the harness and gates can be tested end to
// end in milliseconds. FAKEMINFER_MODE=crash|hang|error plants process
// failures (nodepth: bench ignores -d); FAKEMINFER_MODE=phantom makes the prefill GEMM never launch
// (a lever that switches nothing). With MINFER_LAUNCH_CENSUS=1 it prints the
// CUDA backend's exit lines on stderr ({"launch_census":...},
// {"cuda_graphs":...}), with MINFER_OP_TIMING=1 the {"op_timing":...} line.
// It fills the schema package's documents, as minfer does: bench prints
// JSON only under --format json (or --json, or the deprecated -o json; else
// one markdown or csv line a JSON reader refuses) to stdout or the -o file.
// `synth` writes a small file and appends its arguments to
// $FAKEMINFER_SYNTH_LOG; `info [-m MODEL] --json` and bench report a real model
// file (the model given, else the fake's own executable as the "embedded
// default"); FAKEMINFER_RATES=PP,TG[,TGDEPTH[,PPDEPTH]] makes bench report exactly
// those tok/s (TGDEPTH: tg under -d > 0, default TG); bench -d N names its
// tests pp<P>@dN / tg<T>@dN and leaves out a test of size 0, as minfer does;
// info's type histogram is F32:11,Q8_0:15 unless $FAKEMINFER_TYPES
// says otherwise. FAKEMINFER_WORKLOADS="NAME=WORKLOAD;..." gives those
// levers a workload in `levers`, FAKEMINFER_KVCACHE="NAME=FORMAT;..." their
// liveness rules' needs a KV cache format (kv_cache),
// FAKEMINFER_ANYDEPTH="NAME=OTHER=VALUE;..." an any_depth setting
// (any_depth); FAKEMINFER_BENCH_LOG=FILE makes every bench
// append "model=PATH p=N MINFER_*=..." to FILE ("model=PATH p=N as=NAME
// MINFER_*=...", MINFER_BENCH_WARMUP_MS included, with FAKEMINFER_AS=NAME).
// A file fakeminfer.env beside the executable sets FAKEMINFER_* knobs over
// the environment's (besideEnv). FAKEMINFER_OLD_CLI=1 acts as a minfer from
// before bench --format: the flag is unknown (exit 2), -o json prints JSON.
// With MINFER_LAUNCH_CENSUS=1 bench's tests carry the
// census fields (launches_per_token 338 over six kernels, 1 graph replay
// per token, 0 under MINFER_NO_CUDA_GRAPH), and FAKEMINFER_CENSUS_TG=X
// makes its tg report X tok/s (the census perturbs the speed);
// FAKEMINFER_CENSUS=fail makes a census bench exit 1, =none leaves the
// fields out (a CPU run).
//
// Backends: --device cuda (or auto with FAKEMINFER_GPU=1) acts as the CUDA
// backend: bench reports "backend":"cuda" and device_ms/device_tok_s, the
// census names CUDA kernels (minfer_mmq_q8_0 with MMQ on, minfer_gemm_q8_0
// otherwise unless MINFER_NO_PREFILL_GEMM=1, the fused FFN/QKV kernels unless
// their kill switch is set, minfer_attn_decode2l_hd64_<kv>) and
// {"cuda_graphs":...} (pdl_launches under MINFER_PDL=1), and with
// MINFER_KERNELS set kernels_nvrtc (=nvrtc) or kernels_file (a file), where
// the kernels came from; otherwise the CPU
// backend's "cpu_*" op names (cpu_fused_ffn_q8_0, cpu_fused_qkv_q8_0,
// cpu_kv_store_<kv>). MINFER_CPU_PROFILE=FILE writes a real pprof profile
// of a busy loop in functions named like the engine's (fusedFFN,
// fusedQKV, storeRowF16) for the paths that are on. logits and generate
// take --repeat N (graphs captured at the 3rd run, replayed from the 4th),
// generate --ids. FAKEMINFER_ACTQ_NOISE="cpu=R,cuda=R" adds each backend's
// activation-quantization error to logits rows (none on the CPU under
// MINFER_CPU_EXACT=1). MINFER_TEST_MUTATE=slow_decode=F / slow_prefill=F
// divide tg / pp by 1+F; phantom=NAME makes NAME read as its arm A;
// FAKEMINFER_NOISE_SD=S gives every bench process a log-normal speed
// factor with sd S/sqrt(2) (so the per-round log ratio has sd S), drawn
// from FAKEMINFER_SEED and the count in FAKEMINFER_COUNTER (a file each
// process increments: deterministic sequences).
// FAKEMINFER_SLOW_WHEN=NAME=VALUE:F divides pp and tg by 1+F in a process
// whose $NAME is VALUE: a lever planted to be slower in its arm B, with no
// mutation for the harness to see (a nightly's planted FAIL).
//
// Device memory (issue 19), with the harness's test seam
// ABTEST_FAKE_GPUMEM=FILE (harness/gpumem.FileSampler): with
// FAKEMINFER_DEVICE_MIB=N a CUDA bench, logits or generate process appends
// "PID N" to FILE at start (it holds N MiB), waits until the sampler has
// listed it ("seen PID"), and appends "PID exit" at the end;
// FAKEMINFER_DEVICE_MIB_WHEN=NAME=VALUE:M makes it M MiB in a process whose
// $NAME is VALUE (a lever that costs memory in its arm B), and
// MINFER_TEST_MUTATE=double_weights doubles it (a second copy of the
// weights: the fake's own mutation site, not the engine's).
// FAKEMINFER_OOM_WHEN=NAME=VALUE makes a bench, logits or generate
// process whose $NAME is VALUE (=always: every one) refuse its model as
// minfer does when it does not fit: one line on stderr, exit
// schema.ExitOutOfMemory.
// FAKEMINFER_STALE_KERNELS_WHEN=NAME=VALUE (or =always) makes such a
// process refuse its kernels file as minfer does when the file was built
// from other sources: one line, exit schema.ExitStaleKernels.
// FAKEMINFER_PLAN_MIB=M is the need of `info --device ... --json`'s
// memory plan (default 100 MiB; none: no plan in the document).
// FAKEMINFER_ENGINE_MEMORY=1 adds the engine's own "device_memory" field
// to bench's JSON (the cross-check). FAKEMINFER_MEMORY="NAME=JSON;..."
// sets those levers' "memory" bar in `levers`.
package main

import (
	"math/rand/v2"

	"github.com/google/pprof/profile"

	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

//go:embed levers.json
var leversJSON []byte

const vocab = 256

type lever struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Values []string `json:"values"`
	ArmA   string   `json:"arm_a"`
}

// phantomLever is the lever MINFER_TEST_MUTATE=phantom=NAME names, and
// armA its baseline value: env reads it as that.
var phantomLever, phantomArmA string

// env is os.Getenv with the phantom mutation applied.
func env(name string) string {
	if name == phantomLever && name != "" {
		return phantomArmA
	}
	return os.Getenv(name)
}

// besideEnv sets the FAKEMINFER_* knobs of a file "fakeminfer.env" beside
// the executable (NAME=VALUE lines), over the environment's: a copy of the
// fake in its own folder acts as another build (abtest perf --base-minfer),
// slower or failing, while both run with one environment. Only FAKEMINFER_*
// names are taken: the MINFER_* environment stays the harness's.
func besideEnv() {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "fakeminfer.env"))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.HasPrefix(k, "FAKEMINFER_") {
			os.Setenv(k, v)
		}
	}
}

func main() {
	besideEnv()
	var ls []lever
	if err := json.Unmarshal(leversJSON, &ls); err != nil {
		panic(err)
	}
	known := map[string]bool{}
	for _, l := range ls {
		known[l.Name] = true
		if v, ok := strings.CutPrefix(os.Getenv("MINFER_TEST_MUTATE"), "phantom="); ok && v == l.Name {
			phantomLever, phantomArmA = l.Name, l.ArmA
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MINFER_") && !known[k] {
			fmt.Fprintln(os.Stderr, "minfer: unknown lever", k)
			os.Exit(2)
		}
	}
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	switch os.Getenv("FAKEMINFER_MODE") {
	case "crash": // at run time: a command's --help still prints (flags parse first)
		if os.Args[1] != "levers" && !slices.Contains(os.Args, "--help") {
			fmt.Fprintln(os.Stderr, "panic: runtime error: index out of range [3] with length 3")
			os.Exit(2)
		}
	case "hang":
		if os.Args[1] != "levers" {
			time.Sleep(time.Hour)
		}
	}
	if ow := os.Getenv("FAKEMINFER_OOM_WHEN"); ow != "" && (os.Args[1] == "bench" || os.Args[1] == "logits" || os.Args[1] == "generate") {
		name, val, _ := strings.Cut(ow, "=")
		if ow == "always" || os.Getenv(name) == val {
			fmt.Fprintln(os.Stderr, "minfer: fake-7b Q8_0 at -c 4096 needs 9.9 GiB (weights 7.5, KV f16 2.2, scratch 0.2); 4.0 GiB free on cuda: no context fits")
			os.Exit(schema.ExitOutOfMemory)
		}
	}
	if sw := os.Getenv("FAKEMINFER_STALE_KERNELS_WHEN"); sw != "" && (os.Args[1] == "bench" || os.Args[1] == "logits" || os.Args[1] == "generate") {
		name, val, _ := strings.Cut(sw, "=")
		if sw == "always" || os.Getenv(name) == val {
			fmt.Fprintln(os.Stderr, "minfer: cuda: kernels file bin/minfer-kernels.fatbin was built from kernel sources aaaaaaaaaaaaaaaa, this minfer's are "+fakeKernelSources[:16]+": rebuild it from this binary's sources: scripts/build-kernels.sh bin/minfer-kernels.fatbin")
			os.Exit(schema.ExitStaleKernels)
		}
	}
	// FAKEMINFER_MODE=nodepth: a minfer from before bench --depth, which
	// accepts -d and ignores it.
	ignoreDepth := os.Getenv("FAKEMINFER_MODE") == "nodepth"
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	model := fs.String("model", "", "")
	fs.StringVar(model, "m", "", "")
	device := fs.String("device", "auto", "")
	ids := fs.String("ids", "", "")
	idsFlag := ids
	top := fs.Int("top", 5, "")
	asJSON := fs.Bool("json", false, "")
	// FAKEMINFER_OLD_CLI=1: a minfer from before bench --format (715715f),
	// whose -o json is the JSON switch and which refuses --format.
	format := new(string)
	if os.Getenv("FAKEMINFER_OLD_CLI") != "1" {
		fs.StringVar(format, "format", "", "")
	}
	p := fs.Int("p", 512, "")
	n := fs.Int("n", 128, "")
	r := fs.Int("r", 3, "")
	depth := fs.Int("d", 0, "")
	fs.String("fill", "prefill", "")
	ctx := fs.Int("ctx", 4096, "")
	fs.IntVar(ctx, "c", 4096, "")
	repeat := fs.Int("repeat", 1, "")
	fs.Bool("greedy", false, "")
	fs.Float64("repeat-penalty", 1.1, "")
	shape := fs.String("shape", "", "")
	untie := fs.Bool("untie", false, "")
	typ := fs.String("type", "", "")
	seed := fs.Uint64("seed", 1, "")
	output := fs.String("output", "", "")
	fs.StringVar(output, "o", "", "")
	fs.StringVar(output, "out", "", "") // logits' deprecated spelling of -o
	draftFlag := fs.String("draft", "", "")
	fs.Int("draft-n", 4, "")
	fs.String("prompt", "", "")
	_ = fs.Parse(os.Args[2:])
	// --draft's default is MINFER_DRAFT, as minfer's (abtest's "unset"
	// under the phantom mutation reads as unset).
	draft = env("MINFER_DRAFT")
	if draft == "unset" {
		draft = ""
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "draft" {
			draft = *draftFlag
		}
	})
	if strings.HasSuffix(draft, "-othervocab.gguf") { // minfer's refusal of a pair (engine/spec CheckPair)
		fmt.Fprintf(os.Stderr, "minfer: --draft: draft model %s cannot draft for the model: another vocabulary: 151936 tokens, the target's 256\n", draft)
		os.Exit(2)
	}
	cuda = backendIsCUDA(os.Args[2:])
	reps = *repeat
	if *repeat < 1 {
		fmt.Fprintln(os.Stderr, "minfer: --repeat wants N >= 1")
		os.Exit(2)
	}
	defer deviceLines()
	if prof := os.Getenv("MINFER_CPU_PROFILE"); prof != "" && os.Args[1] == "bench" && !cuda {
		defer writeProfile(prof, *r)
	}
	if *model == "" {
		*model, _ = os.Executable()
	}
	mut, mutFrac := mutation(os.Getenv("MINFER_TEST_MUTATE"))
	if cuda && (os.Args[1] == "bench" || os.Args[1] == "logits" || os.Args[1] == "generate") {
		defer holdDeviceMemory(mut)()
	}
	f16 := env("MINFER_CACHE_TYPE") == "f16"
	switch os.Args[1] {
	case "levers":
		reg := withField(withField(leversJSON, "workload", os.Getenv("FAKEMINFER_WORKLOADS")), "reserved", os.Getenv("FAKEMINFER_RESERVED"))
		reg = withNeed(withNeed(reg, "kv_cache", os.Getenv("FAKEMINFER_KVCACHE")), "any_depth", os.Getenv("FAKEMINFER_ANYDEPTH"))
		os.Stdout.Write(withField(reg, "memory", os.Getenv("FAKEMINFER_MEMORY")))
	case "bench":
		if ignoreDepth {
			*depth = 0
		}
		if lg := os.Getenv("FAKEMINFER_BENCH_LOG"); lg != "" {
			logBench(lg, *model, *p)
		}
		f, file := benchOutput(*format, *asJSON, *output)
		writeBench(f, file, bench(*p, *n, *r, *depth, mut, mutFrac, *model))
	case "info":
		if fs.Arg(0) != "" { // the deprecated positional model
			*model = fs.Arg(0)
		}
		hist := map[string]int{"F32": 11, "Q8_0": 15}
		if ts := os.Getenv("FAKEMINFER_TYPES"); ts != "" { // "F32:11,F16:15"
			hist = map[string]int{}
			for _, kv := range strings.Split(ts, ",") {
				k, v, _ := strings.Cut(kv, ":")
				hist[k], _ = strconv.Atoi(v)
			}
		}
		// decode_read: FAKEMINFER_WBYTES="qwen2:1402128,qwen3:2235664" picks
		// the weight bytes by a substring of the model path (default 1000).
		wb := 1000
		for _, kv := range strings.Split(os.Getenv("FAKEMINFER_WBYTES"), ",") {
			if k, v, ok := strings.Cut(kv, ":"); ok && strings.Contains(*model, k) {
				wb, _ = strconv.Atoi(v)
			}
		}
		arch, ftype := fakeModelKind(*model)
		info := schema.Info{Path: *model, TypeHistogram: hist, Architecture: arch, FileType: ftype, HParams: schema.HParams{TiedOutput: fakeTied(*model)},
			DecodeRead: schema.DecodeRead{WeightBytes: int64(wb), Method: "fake", KVElemsPerPos: 512}}
		if (*device == "cuda" || *device == "cpu") && os.Getenv("FAKEMINFER_PLAN_MIB") != "none" { // the memory plan of info --device
			need := uint64(100) << 20
			if v, err := strconv.ParseUint(os.Getenv("FAKEMINFER_PLAN_MIB"), 10, 64); err == nil {
				need = v << 20
			}
			info.MemoryPlan = &schema.MemoryPlan{Model: *model, Backend: *device, WeightsBytes: need / 2, DerivedBytes: need / 4,
				KVBytes: need / 8, ScratchBytes: need - need/2 - need/4 - need/8, NeedBytes: need, TotalBytes: need}
		}
		json.NewEncoder(os.Stdout).Encode(info)
	case "quantize": // IN OUT TYPE: OUT is IN's shape in TYPE
		in, out, typ := fs.Arg(0), fs.Arg(1), fs.Arg(2)
		b, err := os.ReadFile(in)
		if err != nil || out == "" || typ == "" {
			fmt.Fprintln(os.Stderr, "minfer quantize: want IN OUT TYPE:", err)
			os.Exit(2)
		}
		if lg := os.Getenv("FAKEMINFER_QUANTIZE_LOG"); lg != "" {
			f, _ := os.OpenFile(lg, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			opt := ""
			if *untie {
				opt = " --untie"
			}
			fmt.Fprintf(f, "%s %s%s\n", in, typ, opt)
			f.Close()
		}
		shape := "qwen2-trained"
		if f := strings.Fields(string(b)); len(f) >= 3 && f[0] == "GGUF" && f[1] == "fake" {
			shape = f[2]
		}
		if *untie && !fakeTied(in) {
			fmt.Fprintln(os.Stderr, "minfer: quantize: --untie: the model has an output matrix of its own (output.weight) already")
			os.Exit(1)
		}
		tail := ""
		if *untie || !fakeTied(in) {
			tail = " untied"
		}
		_ = os.WriteFile(out, []byte(fmt.Sprintf("GGUF fake %s %s seed 0 (quantized from %s)%s", shape, typ, in, tail)), 0o644)
	case "synth":
		if *shape == "" || *typ == "" || *output == "" {
			fmt.Fprintln(os.Stderr, "minfer synth: --shape, --type and -o are required")
			os.Exit(2)
		}
		if *typ == "Q9_9" {
			fmt.Fprintln(os.Stderr, "minfer synth: unknown type Q9_9")
			os.Exit(2)
		}
		if lg := os.Getenv("FAKEMINFER_SYNTH_LOG"); lg != "" {
			f, _ := os.OpenFile(lg, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			fmt.Fprintf(f, "%s %s %d\n", *shape, *typ, *seed)
			f.Close()
		}
		_ = os.WriteFile(*output, []byte(fmt.Sprintf("GGUF fake %s %s seed %d", *shape, *typ, *seed)), 0o644)
	case "logits":
		forwards, promptNT = 1, len(strings.Split(*ids, ","))
		var xs []int32
		for _, s := range strings.Split(*ids, ",") {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 || v >= vocab {
				fmt.Fprintf(os.Stderr, "minfer: token id %q outside the vocabulary of %d\n", s, vocab)
				os.Exit(1)
			}
			xs = append(xs, int32(v))
		}
		res := schema.Logits{NVocab: vocab}
		var all []byte
		for i := range xs {
			row := logits(xs[:i+1], f16, mut, i == len(xs)-1)
			actQuantNoise(row, xs[:i+1])
			idx := make([]int, vocab)
			for j := range idx {
				idx[j] = j
			}
			sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
			ps := schema.LogitsPos{Pos: i, Top2Margin: row[idx[0]] - row[idx[1]]}
			for _, j := range idx[:*top] {
				ps.Top = append(ps.Top, schema.TopLogit{ID: int32(j), Logit: row[j]})
			}
			res.Positions = append(res.Positions, ps)
			for _, v := range row {
				all = binary.LittleEndian.AppendUint32(all, math.Float32bits(v))
			}
		}
		if *output != "" {
			_ = os.WriteFile(*output, all, 0o644)
		}
		_ = asJSON
		json.NewEncoder(os.Stdout).Encode(res)
	case "generate":
		prompt := fs.Arg(0)
		var ids []int32
		for _, c := range []byte(prompt) {
			ids = append(ids, int32(c))
		}
		if *idsFlag != "" {
			if prompt != "" {
				fmt.Fprintln(os.Stderr, "minfer generate: --ids and a text prompt are exclusive")
				os.Exit(2)
			}
			ids = nil
			for _, s := range strings.Split(*idsFlag, ",") {
				v, err := strconv.Atoi(s)
				if err != nil || v < 0 || v >= vocab {
					fmt.Fprintf(os.Stderr, "minfer: token id %q outside the vocabulary of %d\n", s, vocab)
					os.Exit(1)
				}
				ids = append(ids, int32(v))
			}
		}
		forwards = 1 + *n
		promptNT = len(ids)
		hist := append([]int32{}, ids...)
		var gen []int32
		for s := 0; s < *n; s++ {
			row := logits(hist, f16, "", false)
			if mut == "perturb_logit" && s == 3 {
				row[7] += 100
			}
			best := 0
			for j := range row {
				if row[j] > row[best] {
					best = j
				}
			}
			if mut == "accept_wrong_draft" && drafting() && s == 5 {
				best = (best + 1) % vocab // the planted defect: a wrong draft kept
			}
			gen = append(gen, int32(best))
			hist = append(hist, int32(best))
		}
		json.NewEncoder(os.Stdout).Encode(schema.Generate{Model: *model, Prompt: prompt, IDs: gen, PromptIDs: ids, NPrompt: len(ids),
			NGen: len(gen), PrefillMS: 1.0, DecodeMS: 2.0, Backend: "cpu", KVFormat: "f32", Levers: map[string]string{}})
	default:
		fmt.Fprintln(os.Stderr, "minfer:", os.Args[1], "not implemented")
		os.Exit(1)
	}
}

// logits of the last token of ctx: a hash of the context spreads values over
// [-4, 4]; f16 KV perturbs positions after the first by ~1e-4; skip_bias
// drops a bias term; perturb_logit nudges one logit of the last position.
func logits(ctx []int32, f16 bool, mut string, last bool) []float32 {
	h := uint64(1469598103934665603)
	for _, t := range ctx {
		h = (h ^ uint64(t)) * 1099511628211
	}
	row := make([]float32, vocab)
	for v := range row {
		x := (h ^ uint64(v)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
		x ^= x >> 31
		val := float64(x%8000)/1000 - 4
		if mut != "skip_bias" {
			val += 0.8 * math.Sin(float64(v))
		}
		if f16 && len(ctx) > 1 {
			val += 1e-4 * math.Cos(float64(v+len(ctx)))
		}
		row[v] = float32(val)
	}
	if mut == "perturb_logit" && last {
		row[7] += 5
	}
	return row
}

// actQuantNoise adds the activation-quantization error FAKEMINFER_ACTQ_NOISE
// ("cpu=R,cuda=R") gives the process's backend: deterministic noise of rel
// L2 ~R per row, independent between the backends; the CPU with
// MINFER_CPU_EXACT=1 adds none (the exact evaluation).
func actQuantNoise(row []float32, ctx []int32) {
	spec := os.Getenv("FAKEMINFER_ACTQ_NOISE")
	be := "cpu"
	if cuda {
		be = "cuda"
	} else if os.Getenv("MINFER_CPU_EXACT") == "1" {
		return
	}
	rel := 0.0
	for _, kv := range strings.Split(spec, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == be {
			rel, _ = strconv.ParseFloat(v, 64)
		}
	}
	if rel == 0 {
		return
	}
	var ss float64
	for _, v := range row {
		ss += float64(v) * float64(v)
	}
	sd := rel * math.Sqrt(ss/float64(len(row)))
	h := uint64(len(be))*0x9e3779b97f4a7c15 + uint64(be[0])
	for _, t := range ctx {
		h = (h ^ uint64(t)) * 1099511628211
	}
	for v := range row {
		// Sum of 12 uniforms - 6: unit variance, near-normal.
		var g float64
		for j := 0; j < 12; j++ {
			x := (h ^ uint64(v*12+j)*0xbf58476d1ce4e5b9) * 0x94d049bb133111eb
			x ^= x >> 29
			g += float64(x>>11) / (1 << 53)
		}
		row[v] += float32(sd * (g - 6))
	}
}

// editLevers applies set to each lever the spec names ("NAME=VALUE;...")
// in the registry JSON, with that VALUE; "" leaves the JSON as is.
func editLevers(reg []byte, spec string, set func(l map[string]any, v string)) []byte {
	if spec == "" {
		return reg
	}
	var ls []map[string]any
	if err := json.Unmarshal(reg, &ls); err != nil {
		panic(err)
	}
	for _, kv := range strings.Split(spec, ";") {
		name, v, _ := strings.Cut(kv, "=")
		for _, l := range ls {
			if l["name"] == name {
				set(l, v)
			}
		}
	}
	b, err := json.MarshalIndent(ls, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// withField sets a field (workload, reserved) of the levers named in spec.
func withField(reg []byte, field, spec string) []byte {
	return editLevers(reg, spec, func(l map[string]any, w string) {
		var v any = w
		if strings.HasPrefix(w, "{") { // a JSON object (the memory bar)
			if err := json.Unmarshal([]byte(w), &v); err != nil {
				panic(err)
			}
		}
		l[field] = v
	})
}

// withNeed sets needs.<field> in every backend rule of the levers spec
// names ("NAME=VALUE;...": kv_cache's FORMAT, any_depth's NAME=VALUE).
func withNeed(reg []byte, field, spec string) []byte {
	return editLevers(reg, spec, func(l map[string]any, f string) {
		lv, _ := l["liveness"].(map[string]any)
		for _, b := range []string{"cuda", "cpu"} {
			if r, ok := lv[b].(map[string]any); ok {
				n, _ := r["needs"].(map[string]any)
				if n == nil {
					n = map[string]any{}
				}
				n[field] = f
				r["needs"] = n
			}
		}
	})
}

// deviceMiB is what this process holds on the fake GPU (0: nothing).
func deviceMiB(mut string) float64 {
	mib, _ := strconv.ParseFloat(os.Getenv("FAKEMINFER_DEVICE_MIB"), 64)
	if w := os.Getenv("FAKEMINFER_DEVICE_MIB_WHEN"); w != "" {
		cond, v, _ := strings.Cut(w, ":")
		name, val, _ := strings.Cut(cond, "=")
		if x, err := strconv.ParseFloat(v, 64); err == nil && os.Getenv(name) == val {
			mib = x
		}
	}
	if mut == "double_weights" {
		mib *= 2
	}
	return mib
}

// holdDeviceMemory puts this process on the fake GPU of the harness's
// test seam (ABTEST_FAKE_GPUMEM) and returns what takes it off.
func holdDeviceMemory(mut string) func() {
	file, mib := os.Getenv("ABTEST_FAKE_GPUMEM"), deviceMiB(mut)
	if file == "" || !(mib > 0) {
		return func() {}
	}
	pid := os.Getpid()
	appendTo := func(line string) int64 {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "minfer (fake):", err)
			os.Exit(1)
		}
		defer f.Close()
		st, _ := f.Stat()
		fmt.Fprintln(f, line)
		return st.Size()
	}
	at := appendTo(fmt.Sprintf("%d %g", pid, mib))
	// Wait until the sampler listed this process (after its own line: a
	// recycled pid's old "seen" does not count), so every process is
	// sampled whatever the load; a harness that samples nothing costs 2 s.
	seen := fmt.Sprintf("seen %d\n", pid)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && int64(len(b)) > at && strings.Contains(string(b[at:]), seen) {
			break
		}
	}
	return func() { appendTo(fmt.Sprintf("%d exit", pid)) }
}

// logBench appends "model=PATH p=N MINFER_X=V ..." (the MINFER_* variables
// set, sorted) to the bench log, so a test sees what each bench ran on.
func logBench(path, model string, p int) {
	var set []string
	as := os.Getenv("FAKEMINFER_AS")
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MINFER_") && (as != "" || !strings.HasPrefix(kv, "MINFER_BENCH_WARMUP_MS=")) {
			set = append(set, kv)
		}
	}
	sort.Strings(set)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	if as != "" {
		as = " as=" + as
	}
	fmt.Fprintf(f, "model=%s p=%d%s %s\n", model, p, as, strings.Join(set, " "))
}

// Process facts the exit lines report.
var (
	cuda     bool // the fake acts as the CUDA backend
	reps     = 1  // --repeat
	forwards = 0  // forwards of one run (logits 1, generate 1+n)
	promptNT = 0  // the prompt's token count
	benchRun bool
	draft    string // --draft, else MINFER_DRAFT
)

// drafting: a drafter proposes (not --draft none).
func drafting() bool { return draft != "" && draft != "none" }

// specCensus adds the speculative decoder's counts (spec_* names) to c, as
// minfer's census does: spec_drafted only when a drafter proposes.
func specCensus(c schema.LaunchCensus) {
	if draft == "" {
		return
	}
	c["spec_forward"] = 10
	if drafting() {
		c["spec_drafted"], c["spec_accepted"] = 24, 12
	}
}

// kernelsCensus names where the CUDA backend's kernels came from, as
// minfer's census does (levers.CensusKernels*), only when MINFER_KERNELS
// is set (minfer names it always; the fake's other censuses stay as they
// were): kernels_nvrtc for nvrtc, kernels_file for a file.
func kernelsCensus(c schema.LaunchCensus) {
	switch v := env("MINFER_KERNELS"); v {
	case "":
	case "nvrtc":
		c["kernels_nvrtc"] = 1
	default:
		c["kernels_file"] = 1
	}
}

// backendIsCUDA: --device cuda, or auto with FAKEMINFER_GPU=1.
func backendIsCUDA(args []string) bool {
	dev := "auto"
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--device="); ok {
			dev = v
		} else if a == "--device" && i+1 < len(args) {
			dev = args[i+1]
		}
	}
	return dev == "cuda" || dev == "auto" && os.Getenv("FAKEMINFER_GPU") == "1"
}

// mutation splits MINFER_TEST_MUTATE into its site and fraction (slow_*:
// bare is 1).
func mutation(v string) (string, float64) {
	site, arg, ok := strings.Cut(v, "=")
	if site != "slow_decode" && site != "slow_prefill" {
		return site, 0
	}
	if !ok {
		return site, 1
	}
	f, _ := strconv.ParseFloat(arg, 64)
	return site, f
}

// deviceLines prints what the backend prints at exit with the census on.
func deviceLines() {
	if os.Getenv("MINFER_LAUNCH_CENSUS") != "1" {
		if cuda && os.Getenv("MINFER_OP_TIMING") == "1" {
			exitLine(opTimingLine)
		}
		return
	}
	kv := "f32"
	if env("MINFER_CACHE_TYPE") == "f16" {
		kv = "f16"
	}
	if !cuda {
		c := schema.LaunchCensus{"cpu_rms_norm": 57, "cpu_matmul_q8_0": 100, "cpu_kv_store_" + kv: 24, "cpu_attn": 24}
		if env("MINFER_NO_FUSE_FFN") != "1" {
			c["cpu_fused_ffn_q8_0"] = 24
		} else {
			c["cpu_matmul_q8_0"] += 48
		}
		if env("MINFER_NO_FUSE_QKV") != "1" {
			c["cpu_fused_qkv_q8_0"] = 24
		} else {
			c["cpu_matmul_q8_0"] += 72
		}
		specCensus(c)
		exitLine(schema.CensusLine{LaunchCensus: c})
		return
	}
	c := schema.LaunchCensus{"minfer_rms_norm_f32": 57, "minfer_mmv_q8_0": 196, "minfer_attn_decode2l_hd64_" + kv: 24}
	prefill := promptNT >= 9 || benchRun
	switch {
	case !prefill:
	case env("MINFER_MMQ") != "0" && os.Getenv("FAKEMINFER_MODE") != "phantom":
		c["minfer_mmq_q8_0"] = 28
	case env("MINFER_NO_PREFILL_GEMM") != "1" && os.Getenv("FAKEMINFER_MODE") != "phantom":
		c["minfer_gemm_q8_0"] = 28
	default:
		c["minfer_mmv_q8_0"] += 28
	}
	if env("MINFER_NO_FUSE_FFN") != "1" {
		c["minfer_mmvqr_ffn_q8_0"] = 24
	}
	if env("MINFER_NO_FUSE_QKV") != "1" {
		c["minfer_mmvq_qkv_q8_0"], c["minfer_qkv_rope_store"] = 24, 24
	}
	kernelsCensus(c)
	specCensus(c)
	fmt.Fprintln(os.Stderr, "minfer: model: cuda backend (fake)")
	exitLine(schema.CensusLine{LaunchCensus: c})
	// Graphs: a bench warms every shape up; logits/generate capture a
	// shape at its 3rd run and replay it from the 4th.
	g := schema.CUDAGraphs{Captured: 2, Replayed: 126}
	if !benchRun {
		g = schema.CUDAGraphs{}
		if reps >= 3 {
			g.Captured = 1
			g.Replayed = (reps - 3) * max(forwards, 1)
		}
		if forwards > 1 && reps < 3 { // generate: the decode graph
			g.Captured, g.Replayed = 1, forwards-3
		}
	}
	if env("MINFER_NO_CUDA_GRAPH") == "1" {
		g.Captured, g.Replayed = 0, 0
	}
	if env("MINFER_PDL") == "1" {
		g.PDLLaunches = 300
	}
	exitLine(schema.GraphsLine{CUDAGraphs: g})
	if os.Getenv("MINFER_OP_TIMING") == "1" {
		exitLine(opTimingLine)
	}
}

// opTimingLine is the fake's MINFER_OP_TIMING=1 line.
var opTimingLine = schema.OpTimingLine{OpTiming: schema.OpTiming{DirectLaunchesOnly: true, Note: "fake", Kernels: []schema.OpKernel{
	{Kernel: "minfer_mmv_q8_0", Count: 196, TotalNS: 392000}, {Kernel: "minfer_rms_norm_f32", Count: 57, TotalNS: 57000}}}}

// exitLine prints one of the exit lines on stderr.
func exitLine(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(os.Stderr, string(b))
}

// writeProfile writes a pprof CPU profile whose samples sit in functions
// named like the engine's CPU paths that are on (fusedFFN, fusedQKV, the
// f16 KV rows) and in a matmul, as a real profile of minfer would.
func writeProfile(path string, reps int) {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10000000}
	add := func(name string, n int64) {
		id := uint64(len(p.Function) + 1)
		f := &profile.Function{ID: id, Name: name, SystemName: name}
		l := &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
		p.Function = append(p.Function, f)
		p.Location = append(p.Location, l)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{l}, Value: []int64{n, n * 10000000}})
	}
	add("github.com/minfer-go/minfer/engine/cpu.(*matmulJob).runDot", 120)
	if env("MINFER_NO_FUSE_FFN") != "1" {
		add("github.com/minfer-go/minfer/engine/cpu.(*Backend).fusedFFN", 30)
	}
	if env("MINFER_NO_FUSE_QKV") != "1" {
		add("github.com/minfer-go/minfer/engine/cpu.(*Backend).fusedQKV", 20)
	}
	// A small function goes unsampled in a short profile, as the f16 row
	// loads did in one repetition on the real profiler (2026-12-06): none
	// for one repetition, 2 for each one after it.
	if n := 2 * int64(reps-1); env("MINFER_CACHE_TYPE") == "f16" && n > 0 {
		add("github.com/minfer-go/minfer/engine/kv.loadRowF16", n)
	}
	if drafting() {
		add("github.com/minfer-go/minfer/engine/spec.Lookup.Draft", 10)
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "minfer: cpu profile:", err)
		os.Exit(1)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		fmt.Fprintln(os.Stderr, "minfer: cpu profile:", err)
		os.Exit(1)
	}
}

// speedFactor is the process's log-normal speed factor (FAKEMINFER_NOISE_SD
// is the per-round log-ratio sd; each process draws sd/sqrt2), 1 without.
func speedFactor() float64 {
	sd, _ := strconv.ParseFloat(os.Getenv("FAKEMINFER_NOISE_SD"), 64)
	if sd <= 0 {
		return 1
	}
	seed, _ := strconv.ParseUint(os.Getenv("FAKEMINFER_SEED"), 10, 64)
	n := uint64(time.Now().UnixNano())
	if file := os.Getenv("FAKEMINFER_COUNTER"); file != "" {
		b, _ := os.ReadFile(file)
		c, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		_ = os.WriteFile(file, []byte(strconv.FormatUint(c+1, 10)), 0o644)
		n = c
	}
	// splitmix64 of the counter: PCG streams of adjacent raw states start
	// correlated.
	z := n + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	rng := rand.New(rand.NewPCG(seed, z^z>>31))
	return math.Exp(sd / math.Sqrt2 * rng.NormFloat64())
}

func bench(p, n, r, depth int, mut string, frac float64, model string) schema.Bench {
	benchRun = true
	speed := speedFactor()
	seed := uint64(time.Now().UnixNano())
	noise := func() float64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return 1 + (float64(seed>>40)/float64(1<<24)-0.5)*0.004
	}
	pp, tg := 4000.0, 400.0
	if rs := os.Getenv("FAKEMINFER_RATES"); rs != "" { // "PP,TG": exact rates, no noise
		a, b, _ := strings.Cut(rs, ",")
		b, c, hasDepthRate := strings.Cut(b, ",")
		pp, _ = strconv.ParseFloat(a, 64)
		tg, _ = strconv.ParseFloat(b, 64)
		c, d, hasDepthPP := strings.Cut(c, ",") // PP,TG,TGDEPTH,PPDEPTH
		if hasDepthRate && depth > 0 {
			tg, _ = strconv.ParseFloat(c, 64)
		}
		if hasDepthPP && depth > 0 {
			pp, _ = strconv.ParseFloat(d, 64)
		}
		noise = func() float64 { return 1 }
	}
	pp, tg = pp*speed, tg*speed
	if mut == "slow_prefill" {
		pp /= 1 + frac
	}
	if mut == "slow_decode" {
		tg /= 1 + frac
	}
	if sw := os.Getenv("FAKEMINFER_SLOW_WHEN"); sw != "" {
		cond, f, _ := strings.Cut(sw, ":")
		name, val, _ := strings.Cut(cond, "=")
		if x, err := strconv.ParseFloat(f, 64); err == nil && os.Getenv(name) == val {
			pp, tg = pp/(1+x), tg/(1+x)
		}
	}
	censusOn := os.Getenv("MINFER_LAUNCH_CENSUS") == "1"
	if censusOn && os.Getenv("FAKEMINFER_CENSUS") == "fail" {
		fmt.Fprintln(os.Stderr, "minfer: cuda: launch census: out of memory")
		os.Exit(1)
	}
	if ct := os.Getenv("FAKEMINFER_CENSUS_TG"); censusOn && ct != "" {
		tg, _ = strconv.ParseFloat(ct, 64)
	}
	census := func(t *schema.BenchTest) {
		if !censusOn || os.Getenv("FAKEMINFER_CENSUS") == "none" {
			return
		}
		k := map[string]float64{"minfer_mmv_q8_0": 168, "minfer_rms_norm_f32": 49, "minfer_add_f32": 48,
			"minfer_rope_f32": 48, "minfer_attn_decode_f32": 24, "minfer_argmax_f32": 1}
		launches, replays := 338.0, 1.0
		if os.Getenv("MINFER_NO_CUDA_GRAPH") == "1" {
			replays = 0
		}
		t.LaunchesPerToken, t.GraphReplaysPerToken, t.KernelsPerToken = &launches, &replays, k
	}
	test := func(name string, nt int, rate float64) schema.BenchTest {
		var ms, ts []float64
		var sum float64
		for i := 0; i < r; i++ {
			t := rate * noise()
			ts = append(ts, t)
			ms = append(ms, float64(nt)/t*1000)
			sum += t
		}
		t := schema.BenchTest{Name: name, NTokens: nt, SamplesMS: ms, TokS: ts, MeanTokS: sum / float64(r)}
		if cuda { // device time: the same rate, a hair faster (no host work)
			for _, x := range ts {
				t.DeviceTokS = append(t.DeviceTokS, x*1.01)
				t.DeviceMS = append(t.DeviceMS, float64(nt)/(x*1.01)*1000)
			}
		}
		census(&t)
		return t
	}
	w, _ := strconv.Atoi(os.Getenv("MINFER_BENCH_WARMUP_MS"))
	sum := fileSHA256(model)

	suffix := ""
	if depth > 0 {
		suffix = fmt.Sprintf("@d%d", depth)
	}
	var tests []schema.BenchTest
	if p > 0 {
		tests = append(tests, test(fmt.Sprintf("pp%d%s", p, suffix), p, pp))
	}
	if n > 0 {
		tests = append(tests, test(fmt.Sprintf("tg%d%s", n, suffix), n, tg))
	}
	backend := "cpu"
	if cuda {
		backend = "cuda"
	}
	var kern *schema.Kernels
	if cuda {
		kern = &schema.Kernels{Path: "fake.fatbin", SHA256: strings.Repeat("f", 64), Source: fakeKernelSources, Compiler: "fake nvcc", Flags: "-O3"}
	}
	return schema.Bench{Model: model, ModelSHA256: sum, Backend: backend, KVFormat: "f32", Threads: 2, NPrompt: p, NGen: n,
		Depth: depth, Reps: r, Warmup: schema.BenchWarmup{BudgetMS: float64(w), Iterations: 3, ElapsedMS: 1}, Tests: tests,
		GoVersion: "go-fake", Date: "now", KernelSources: fakeKernelSources, Kernels: kern}
}

// fakeKernelSources is the fake's kernel-source hash (bench's
// kernel_sources_sha256 and its kernels stamp).
const fakeKernelSources = "fa4e0000000000000000000000000000000000000000000000000000000000fa"

// benchOutput settles bench's format and output file as minfer does:
// --json is --format json, and -o md|json|csv without a format is the
// deprecated spelling of the format.
func benchOutput(format string, asJSON bool, output string) (string, string) {
	if asJSON {
		format = "json"
	}
	if format == "" {
		switch output {
		case "md", "json", "csv":
			fmt.Fprintf(os.Stderr, "minfer: bench -o %s is deprecated: -o is the output file now; use --format %s\n", output, output)
			return output, ""
		}
		return "md", output
	}
	if format != "md" && format != "json" && format != "csv" {
		fmt.Fprintf(os.Stderr, "minfer: --format %q: want md, json or csv\n", format)
		os.Exit(2)
	}
	return format, output
}

// writeBench prints the bench document in format, to file when one is
// given. md and csv are one line each: enough for a caller that forgot
// --format json to fail on it.
func writeBench(format, file string, b schema.Bench) {
	var out []byte
	switch format {
	case "json":
		out, _ = json.MarshalIndent(b, "", "  ")
		if os.Getenv("FAKEMINFER_ENGINE_MEMORY") == "1" { // the engine's own figure (issue 19, item 1)
			var doc map[string]any
			_ = json.Unmarshal(out, &doc)
			mut, _ := mutation(os.Getenv("MINFER_TEST_MUTATE"))
			doc["device_memory"] = map[string]any{"peak_bytes": int64(deviceMiB(mut) * (1 << 20))}
			out, _ = json.MarshalIndent(doc, "", "  ")
		}
		out = append(out, '\n')
	case "csv":
		out = []byte("model,model_sha256,backend,kv_format,threads,test,n_tokens,reps,mean_tok_s,stddev_tok_s,samples_ms\n")
	default:
		out = []byte("| model | backend | kv | threads | test | t/s |\n")
	}
	if file == "" {
		os.Stdout.Write(out)
		return
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "minfer: bench -o:", err)
		os.Exit(1)
	}
}

// fakeModelKind reads the architecture and file type of a fake model file
// ("GGUF fake SHAPE TYPE ...", as synth and quantize write them; the
// architecture is the shape's prefix, qwen2-tiny: qwen2); any other file is
// a qwen2 of unknown type.
func fakeModelKind(path string) (arch, ftype string) {
	if f := strings.Fields(fakeHead(path)); len(f) >= 4 && f[0] == "GGUF" && f[1] == "fake" {
		a, _, _ := strings.Cut(f[2], "-")
		return a, f[3]
	}
	return "qwen2", ""
}

// fakeHead is the first 400 bytes of a file ("" when it cannot be read):
// all of a fake model.
func fakeHead(path string) string {
	fh, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer fh.Close()
	b := make([]byte, 400)
	n, _ := fh.Read(b)
	return string(b[:n])
}

// fakeTied reports whether a fake model ties its output to the embedding:
// a synth shape as the real one says (qwen2-7b and qwen3-tiny are untied),
// a trained model (not a shape) tied, unless quantize --untie wrote it.
func fakeTied(path string) bool {
	head := fakeHead(path)
	if strings.HasSuffix(strings.TrimSpace(head), " untied") {
		return false
	}
	if f := strings.Fields(head); len(f) >= 3 && f[0] == "GGUF" && f[1] == "fake" {
		if s, err := synth.ShapeByName(f[2]); err == nil {
			return s.Tied
		}
	}
	return true
}

// fileSHA256 hashes the model, cached in the temp dir by path, size and
// modification time (thousands of fake processes hash the same file).
func fileSHA256(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	key := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%d", path, st.Size(), st.ModTime().UnixNano())))
	cache := fmt.Sprintf("%s/fakeminfer-sha-%x", os.TempDir(), key[:8])
	if b, err := os.ReadFile(cache); err == nil && len(b) == 64 {
		return string(b)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	sum := hex.EncodeToString(h[:])
	_ = os.WriteFile(cache, []byte(sum), 0o644)
	return sum
}

package gates

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// CPUProfileDetail is gate 5's profiler evidence on the CPU backend: a pprof
// CPU profile of each arm's bench (MINFER_CPU_PROFILE) and the samples in
// the lever's functions (its rule's funcs).
type CPUProfileDetail struct {
	Funcs []string        `json:"funcs"`
	Arms  []ArmCPUProfile `json:"arms"`
	Note  string          `json:"note"`
	// Fail says why the profiles contradict the rule ("" when they agree
	// or could not be read: Missing then says why).
	Fail string `json:"fail,omitempty"`
}

// ArmCPUProfile is one arm's profile.
type ArmCPUProfile struct {
	Arm     string `json:"arm"`
	Samples int64  `json:"samples"`
	// InFuncs is the samples with a function of the rule on the stack
	// (inlined frames included).
	InFuncs int64 `json:"in_funcs"`
	// Matched names the rule's functions seen, Top the most sampled
	// functions (flat).
	Matched []string  `json:"matched,omitempty"`
	Top     []FuncHit `json:"top,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// FuncHit is a function and its flat samples.
type FuncHit struct {
	Func    string `json:"func"`
	Samples int64  `json:"samples"`
}

// cpuProfileReps is the profiled bench's repetitions on the CPU. The
// profiler samples at 100 Hz: one repetition of the README's main job
// (about 1.4 s) gave MINFER_CACHE_TYPE's f16 row loads, under 2% of the
// time, no sample in one run (2026-12-06), a FAIL by chance. Eight give
// such a function about ten expected samples, and a miss odds of ~e^-10.
const cpuProfileReps = 8

// withReps is bench args with its -r value set to r.
func withReps(args []string, r int) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-r" {
			out[i+1] = strconv.Itoa(r)
			return out
		}
	}
	return append(out, "-r", strconv.Itoa(r))
}

// cpuProfiles profiles both arms' bench and judges the rule's functions:
// samples in them with the path on, none with it off.
func cpuProfiles(ctx context.Context, cfg Config, env *Env, d *ProfileDetail) *CPUProfileDetail {
	out := &CPUProfileDetail{}
	if d.Rule == nil || len(d.Rule.Funcs) == 0 {
		out.Note = cfg.Lever.Name + " declares no functions for its CPU path (liveness.cpu.funcs)"
		d.Missing = append(d.Missing, "pprof: "+out.Note)
		return out
	}
	out.Funcs = d.Rule.Funcs
	var res []*regexp.Regexp
	for _, f := range d.Rule.Funcs {
		re, err := regexp.Compile(f)
		if err != nil {
			out.Note = fmt.Sprintf("function pattern %q: %v", f, err)
			d.Missing = append(d.Missing, "pprof: "+out.Note)
			return out
		}
		res = append(res, re)
	}
	for _, arm := range []Arm{cfg.A, cfg.B} {
		file := filepath.Join(cfg.TmpDir, "cpu-"+arm.Name+".pprof")
		ap := ArmCPUProfile{Arm: arm.Name}
		args := withReps(profileBench(cfg, arm), cpuProfileReps)
		e, err := env.M.R.Run(ctx, "pprof "+arm.Name, withEnv(armEnv(arm, map[string]string{"MINFER_BENCH_WARMUP_MS": ProfileWarmupMS}), map[string]string{"MINFER_CPU_PROFILE": file}), args...)
		env.Cmd("profile: pprof arm "+arm.Name, e)
		if err == nil {
			err = readCPUProfile(file, res, &ap)
		}
		if err != nil {
			ap.Error = err.Error()
			d.Missing = append(d.Missing, fmt.Sprintf("pprof of arm %s: %v", arm.Name, err))
		}
		out.Arms = append(out.Arms, ap)
	}
	if len(out.Arms) != 2 || out.Arms[0].Error != "" || out.Arms[1].Error != "" {
		out.Note = "a profile could not be read"
		return out
	}
	var on, off ArmCPUProfile
	if armOn(cfg.Lever, cfg.A) {
		on, off = out.Arms[0], out.Arms[1]
	} else {
		on, off = out.Arms[1], out.Arms[0]
	}
	out.Note = fmt.Sprintf("arm %s (path on): %d of %d samples in %s; arm %s (path off): %d of %d", on.Arm, on.InFuncs, on.Samples,
		strings.Join(out.Funcs, " | "), off.Arm, off.InFuncs, off.Samples)
	var bad []string
	if on.InFuncs == 0 {
		bad = append(bad, fmt.Sprintf("arm %s (path on) has no sample in the lever's functions (%d samples)", on.Arm, on.Samples))
	}
	if off.InFuncs > 0 {
		bad = append(bad, fmt.Sprintf("arm %s (path off) has %d samples in the lever's functions (%s)", off.Arm, off.InFuncs, strings.Join(off.Matched, ", ")))
	}
	if len(bad) > 0 {
		out.Fail = "pprof: " + strings.Join(bad, "; ")
	}
	return out
}

// readCPUProfile fills ap from the pprof file: total samples, samples with
// a matching function anywhere on the stack, and the top flat functions.
func readCPUProfile(file string, res []*regexp.Regexp, ap *ArmCPUProfile) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	idx := 0 // the "samples" (count) value
	for i, st := range p.SampleType {
		if st.Type == "samples" {
			idx = i
		}
	}
	flat := map[string]int64{}
	matched := map[string]bool{}
	for _, s := range p.Sample {
		n := s.Value[idx]
		ap.Samples += n
		hit := false
		for li, loc := range s.Location {
			for lj, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				name := line.Function.Name
				if li == 0 && lj == 0 {
					flat[name] += n
				}
				for _, re := range res {
					if re.MatchString(name) {
						hit = true
						matched[name] = true
					}
				}
			}
		}
		if hit {
			ap.InFuncs += n
		}
	}
	if ap.Samples == 0 {
		return fmt.Errorf("%s: an empty profile (the run was too short to sample)", file)
	}
	for k := range matched {
		ap.Matched = append(ap.Matched, k)
	}
	sort.Strings(ap.Matched)
	for k, v := range flat {
		ap.Top = append(ap.Top, FuncHit{Func: k, Samples: v})
	}
	sort.Slice(ap.Top, func(i, j int) bool {
		if ap.Top[i].Samples != ap.Top[j].Samples {
			return ap.Top[i].Samples > ap.Top[j].Samples
		}
		return ap.Top[i].Func < ap.Top[j].Func
	})
	if len(ap.Top) > 10 {
		ap.Top = ap.Top[:10]
	}
	return nil
}

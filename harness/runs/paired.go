package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/schema"
)

// A lever whose candidate value names a model paired with the run's model
// (harness.Lever.PairedModel: MINFER_DRAFT's draft GGUF) is fitted to the
// run here, before any gate runs:
//   - a value that is a file becomes its absolute path (the arms' processes
//     may run elsewhere); a value SHAPE:TYPE that is not a file is the model
//     `minfer synth --shape SHAPE --type TYPE --seed SEED` writes, made once
//     into --synth-dir as --shape/--type are (qwen2-0.5b:Q8_0 drafting for
//     --shape qwen2-7b --type Q4_K_M); other values (lookup) stay;
//   - parity and greedy run on the run's model, not --correctness-model: the
//     candidate was paired with the run's model, not with another file;
//   - the pair is tried once (`minfer generate -n 1` with arm B's setting):
//     a pair minfer refuses (another vocabulary or architecture: its usage
//     exit, 2) could not run, with minfer's one line; it is not a FAIL of
//     the lever.

// pairArms applies the rules above to cfg's arms.
func (s *setup) pairArms(ctx context.Context, f *Options, cfg *gates.Config, prog *harness.Progress) error {
	if !cfg.Lever.PairedModel {
		return nil
	}
	for _, arm := range []*gates.Arm{&cfg.A, &cfg.B} {
		v, err := s.pairedValue(ctx, f, arm.Value)
		if err != nil {
			return CannotRun("%s=%s: %v", cfg.Lever.Name, arm.Value, err)
		}
		if v != arm.Value {
			prog.Note("%s: arm %s's %s is %s", cfg.Lever.Name, arm.Name, arm.Value, v)
			arm.Value, arm.Env[cfg.Lever.Name] = v, v
		}
	}
	if len(f.CorrectnessModels) > 0 {
		cfg.CorrectnessFallback = fmt.Sprintf("%s pairs its value with the run's model, not with a correctness model", cfg.Lever.Name)
		prog.Note("correctness: %s: parity and greedy run on the run's model", cfg.CorrectnessFallback)
	}
	if err := s.tryPair(ctx, cfg); err != nil {
		return err
	}
	return s.planPaired(ctx, cfg, prog)
}

// planPaired fills cfg.Paired where the memory bar allows the paired
// model's memory: the engine's plan of arm B's model (`minfer info -m
// MODEL --device D -c N --json`, arm B's settings) at the context a bench
// of the run's shapes opens. A value that names no model (lookup, none)
// plans zero bytes. A plan that cannot be made is could not run: the bar
// cannot be applied, and measuring the arms against another bar would
// judge the lever by a rule it does not declare.
func (s *setup) planPaired(ctx context.Context, cfg *gates.Config, prog *harness.Progress) error {
	if !cfg.Memory.Paired || cfg.Backend == "cpu" {
		return nil
	}
	v := cfg.B.Value
	if _, err := os.Stat(v); err != nil {
		cfg.Paired = &gates.PairedPlan{Model: v, What: v + " loads no model: 0 bytes"}
		return nil
	}
	n := max(cfg.PP, cfg.TG+1, 16)
	env := map[string]string{}
	for k, x := range cfg.B.Env {
		if k != "MINFER_TEST_MUTATE" && k != cfg.Lever.Name {
			env[k] = x
		}
	}
	e, err := s.m.R.Run(ctx, "paired model plan", env, "info", "-m", v, "--device", cfg.Backend, "-c", strconv.Itoa(n), "--json")
	if err != nil {
		return CannotRun("%s: the memory bar needs %s's memory plan: minfer info: %v", cfg.Lever.Name, filepath.Base(v), err)
	}
	var doc struct {
		Plan *schema.MemoryPlan `json:"memory_plan"`
	}
	if err := json.Unmarshal(e.Stdout, &doc); err != nil || doc.Plan == nil {
		return CannotRun("%s: the memory bar needs %s's memory plan: minfer info --device %s --json gave none", cfg.Lever.Name, filepath.Base(v), cfg.Backend)
	}
	p := doc.Plan
	cfg.Paired = &gates.PairedPlan{Model: v, Bytes: p.NeedBytes,
		What: fmt.Sprintf("%s planned %s at -c %d (weights %s, derived %s, KV %s, scratch %s)", filepath.Base(v),
			mib(p.NeedBytes), n, mib(p.WeightsBytes), mib(p.DerivedBytes), mib(p.KVBytes), mib(p.ScratchBytes))}
	prog.Note("%s: the memory bar allows %s", cfg.Lever.Name, cfg.Paired.What)
	return nil
}

func mib(b uint64) string { return fmt.Sprintf("%d MiB", (b+1<<19)>>20) }

// pairedValue is value as the arms get it: an absolute path for a file, the
// synthesized model's path for SHAPE:TYPE, value itself otherwise.
func (s *setup) pairedValue(ctx context.Context, f *Options, value string) (string, error) {
	if value == "" || value == harness.Unset || !strings.ContainsAny(value, "/.:") {
		return value, nil // unset, none, lookup
	}
	if _, err := os.Stat(value); err == nil {
		return filepath.Abs(value)
	}
	w, err := harness.ParseWorkload(value)
	if err != nil || !w.HasModel() || w.PP != 0 {
		return "", fmt.Errorf("neither a file nor SHAPE:TYPE of minfer synth")
	}
	path, _, err := synthModel(ctx, s.m.R, f.SynthDir, w.Shape, w.Type, f.Seed)
	return path, err
}

// tryPair runs one short drafted generation with arm B's setting on the
// run's model and device: a refusal (minfer's usage exit) could not run.
func (s *setup) tryPair(ctx context.Context, cfg *gates.Config) error {
	m := s.m
	m.Model = cfg.Model
	args := []string{"generate"}
	if m.Model != "" {
		args = append(args, "--model", m.Model)
	}
	args = append(args, "--device", cfg.Device, "--greedy", "-n", "1", "def")
	env := map[string]string{}
	for k, v := range cfg.B.Env {
		if k != "MINFER_TEST_MUTATE" { // the pair, not the planted defect
			env[k] = v
		}
	}
	e, err := m.R.Run(ctx, "pair check", env, args...)
	if err != nil && e != nil && e.Exit == 2 {
		return CannotRun("%s=%s cannot run with %s: %s", cfg.Lever.Name, cfg.B.Value, modelName(cfg.Model), lastLine([]byte(e.Stderr)))
	}
	return nil // any other failure is the gates' to judge, with its evidence
}

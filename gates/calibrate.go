package gates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// Calibration is an A/A run (`abtest calibrate`): the same binary and lever
// settings in both arms, rounds as in gate 3, so the per-round log ratios
// are noise only. Their sd, per metric and timing basis, is what gate 3's
// power and its pre-registered rounds are computed from, for this machine
// and workload.
type Calibration struct {
	Schema      int       `json:"schema"`
	Created     time.Time `json:"created"`
	CommandLine string    `json:"command_line"`
	// The machine: GPU name ("" on the CPU), its clocks at the start, the
	// backend the arms ran on, the host's CPU.
	GPU     string          `json:"gpu"`
	Clocks  *harness.Clocks `json:"clocks,omitempty"`
	Backend string          `json:"backend"`
	Host    string          `json:"host"`
	CPU     string          `json:"cpu"`
	Commit  string          `json:"commit"`
	// The workload: model file and hash, sizes.
	Workload    string `json:"workload"`
	Model       string `json:"model"`
	ModelSHA256 string `json:"model_sha256"`
	PP          int    `json:"pp"`
	TG          int    `json:"tg"`
	Reps        int    `json:"reps"`
	// Depth is the KV cache filled before each test (0: none): noise at
	// depth 32K is not noise at depth 0, so a run matches only its own.
	Depth  int `json:"depth,omitempty"`
	Rounds int `json:"rounds"`
	// Ratios are the per-round A'/A ratios, SD their log sd, keyed
	// "pp_wall", "tg_wall", "pp_device", "tg_device" (device keys only where
	// the backend timed its splits).
	Ratios map[string][]float64 `json:"ratios"`
	SD     map[string]float64   `json:"sd"`
	// ClaimFP is how often the improvement claim fires on resampled A/A
	// rounds (at the default claim bar and the rounds needed at this sd):
	// above 5%, a claim needs more rounds or a higher bar.
	ClaimFP map[string]float64 `json:"claim_fp"`
	// Preregistered is what these sds pre-register at GATES.md's default
	// bars, per key.
	Preregistered map[string]stats.Rounds `json:"preregistered"`
	AB            *ABDetail               `json:"ab"`
}

// CalibrationKeys are the metric/basis keys of a calibration.
var CalibrationKeys = []string{"pp_" + BasisWall, "tg_" + BasisWall, "pp_" + BasisDevice, "tg_" + BasisDevice}

// ClaimFPMax is the false-positive rate of the improvement claim on A/A
// rounds above which a claim needs more rounds or a higher bar.
const ClaimFPMax = 0.05

// Calibrate runs the A/A rounds of cfg (its A arm on both sides) and
// returns the calibration; an interrupted or failed run is an error.
func Calibrate(ctx context.Context, cfg Config, env *Env, publish func(*Calibration)) (*Calibration, error) {
	aa := cfg
	aa.B = Arm{Name: "A'", Value: cfg.A.Value, Env: cfg.A.Env}
	c := &Calibration{Schema: 1, Created: time.Now().UTC(), Backend: cfg.Backend, PP: cfg.PP, TG: cfg.TG, Reps: cfg.Reps, Depth: cfg.Depth, Rounds: cfg.Rounds,
		Model: cfg.Model, Ratios: map[string][]float64{}, SD: map[string]float64{}, ClaimFP: map[string]float64{}, Preregistered: map[string]stats.Rounds{}}
	d := &ABDetail{Planned: cfg.Rounds, PP: cfg.PP, TG: cfg.TG, CensusA: ArmEvidence{Arm: cfg.A}, CensusB: ArmEvidence{Arm: aa.B}}
	c.AB = d
	err := abRounds(ctx, aa, env, d, func() {
		if publish != nil {
			publish(c)
		}
	})
	if err != nil {
		return c, err
	}
	if len(d.Warmup) > 0 {
		c.ModelSHA256 = d.Warmup[0].ModelSHA256
		if c.Model == "" {
			c.Model = d.Warmup[0].Model
		}
	}
	for _, key := range CalibrationKeys {
		k, basis, _ := strings.Cut(key, "_")
		var r []float64
		for _, rd := range d.Rounds {
			a, b := rd.A.value(k, basis), rd.B.value(k, basis)
			if !(a > 0) || !(b > 0) {
				r = nil
				break
			}
			r = append(r, b/a)
		}
		if len(r) < 2 {
			continue
		}
		c.Ratios[key] = r
		c.SD[key] = stats.LogSD(r)
		bar := harness.DefaultBars.PP
		if k == "tg" {
			bar = harness.DefaultBars.TG
		}
		plan := stats.RoundsFor(c.SD[key], bar, stats.TargetPower, stats.MinRounds, stats.MaxRounds)
		c.Preregistered[key] = plan
		c.ClaimFP[key] = stats.ClaimFalsePositiveRate(r, plan.N, harness.DefaultBars.Claim, 10000, 1)
	}
	if len(c.SD) == 0 {
		return c, errors.New("calibration: no metric had valid rounds")
	}
	return c, nil
}

// PowerPlan is a run's pre-registration from a calibration: the
// calibrated sds and the rounds they need at the lever's bars.
type PowerPlan struct {
	File    string             `json:"file"`
	Date    string             `json:"date"`
	GPU     string             `json:"gpu"`
	Commit  string             `json:"commit"`
	Rounds  int                `json:"rounds_calibrated"` // A/A rounds behind the sds
	SD      map[string]float64 `json:"sd"`
	ClaimFP map[string]float64 `json:"claim_fp,omitempty"`
	// Need is the rounds each deciding metric needs; N the run's rounds
	// (their maximum, capped).
	Need map[string]stats.Rounds `json:"need"`
	N    int                     `json:"n"`
	OK   bool                    `json:"ok"` // N reaches the target power for every metric
	Why  string                  `json:"why"`
}

// PlanFor pre-registers the rounds of a run with these bars from the
// calibration: for each metric (pp, tg) on the basis it will be decided on
// (device time unless hostWork or the calibration has none), the smallest
// rounds in [stats.MinRounds, maxRounds] refusing twice the bar with
// stats.TargetPower.
func (c *Calibration) PlanFor(file string, barPP, barTG float64, hostWork bool, maxRounds int) *PowerPlan {
	p := &PowerPlan{File: file, Date: c.Created.Format(time.RFC3339), GPU: c.GPU, Commit: c.Commit, Rounds: c.Rounds, SD: c.SD, ClaimFP: c.ClaimFP,
		Need: map[string]stats.Rounds{}, N: stats.MinRounds, OK: true}
	var why []string
	for _, k := range []string{"pp", "tg"} {
		bar := barPP
		if k == "tg" {
			bar = barTG
		}
		key := k + "_" + BasisDevice
		if _, ok := c.SD[key]; hostWork || !ok {
			key = k + "_" + BasisWall
		}
		sd, ok := c.SD[key]
		if !ok {
			p.OK = false
			why = append(why, "no "+key+" sd")
			continue
		}
		r := stats.RoundsFor(sd, bar, stats.TargetPower, stats.MinRounds, maxRounds)
		p.Need[key] = r
		p.N = max(p.N, r.N)
		if !r.OK {
			p.OK = false
			why = append(why, fmt.Sprintf("%s sd %.4f needs more than %d rounds (at %d, power %.2f; smallest slowdown caught %s)", key, sd, maxRounds, r.N, r.Power, pct(r.MinDetectable)))
		} else {
			why = append(why, fmt.Sprintf("%s sd %.4f: %d rounds, power %.2f at x%.3f", key, sd, r.N, r.Power, stats.TwiceBar(bar)))
		}
	}
	p.Why = strings.Join(why, "; ")
	return p
}

// CalibrationMaxAge is how old a calibration may be and still
// pre-register a run (a machine's noise drifts with its software).
const CalibrationMaxAge = 30 * 24 * time.Hour

// CalibrationFile is where a calibration of a machine and workload lives
// under dir: calibration/<gpu or cpu>/<model>-pp<P>-tg<T>[-d<D>]-r<R>.json.
func CalibrationFile(dir, machine, model string, pp, tg, depth, reps int) string {
	d := ""
	if depth > 0 {
		d = fmt.Sprintf("-d%d", depth)
	}
	return filepath.Join(dir, "calibration", slug(machine), fmt.Sprintf("%s-pp%d-tg%d%s-r%d.json", slug(strings.TrimSuffix(filepath.Base(model), ".gguf")), pp, tg, d, reps))
}

var slugRE = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func slug(s string) string {
	s = strings.Trim(slugRE.ReplaceAllString(s, "-"), "-")
	if s == "" {
		return "unknown"
	}
	return s
}

// MachineName names the machine a calibration belongs to: the GPU's name on
// CUDA, "cpu-<model>" on the CPU.
func MachineName(backend string, gpu *harness.Clocks, cpu string) string {
	if backend == "cuda" && gpu != nil && gpu.Name != "" {
		return gpu.Name
	}
	return "cpu-" + cpu
}

// WriteCalibration writes c as JSON (the markdown beside it is the
// report's).
func WriteCalibration(file string, c *Calibration) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// FindCalibration returns the newest calibration under dir that matches
// the machine, backend, model (by sha256), sizes, depth and repetitions and is
// younger than CalibrationMaxAge, with its file; notes say why others
// were passed over. path may also name one calibration file, which must
// match the same way.
func FindCalibration(path, machine, backend, modelSHA string, pp, tg, depth, reps int, now time.Time) (*Calibration, string, []string) {
	var files []string
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		files = []string{path}
	} else {
		files, _ = filepath.Glob(filepath.Join(path, "calibration", "*", "*.json"))
	}
	var best *Calibration
	bestFile := ""
	var notes []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var c Calibration
		if json.Unmarshal(b, &c) != nil || c.Schema != 1 {
			notes = append(notes, f+": not a calibration")
			continue
		}
		var why []string
		if c.Backend != backend {
			why = append(why, "backend "+c.Backend)
		}
		if m := MachineName(c.Backend, &harness.Clocks{Name: c.GPU}, c.CPU); m != machine {
			why = append(why, "machine "+m)
		}
		if c.ModelSHA256 != modelSHA {
			why = append(why, "another model")
		}
		if c.PP != pp || c.TG != tg || c.Reps != reps {
			why = append(why, fmt.Sprintf("pp%d tg%d r%d", c.PP, c.TG, c.Reps))
		}
		if c.Depth != depth {
			why = append(why, fmt.Sprintf("depth %d", c.Depth))
		}
		if age := now.Sub(c.Created); age > CalibrationMaxAge {
			why = append(why, fmt.Sprintf("%.0f days old", age.Hours()/24))
		}
		if len(why) > 0 {
			if len(files) == 1 {
				notes = append(notes, f+" does not match this run: "+strings.Join(why, ", "))
			}
			continue
		}
		if best == nil || c.Created.After(best.Created) {
			cc := c
			best, bestFile = &cc, f
		}
	}
	sort.Strings(notes)
	return best, bestFile, notes
}

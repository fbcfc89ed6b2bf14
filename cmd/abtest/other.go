package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/report"
	"github.com/minfer-go/minfer/harness/stats"
)

func newCompareCmd() *cobra.Command {
	var threshold string
	cmd := &cobra.Command{
		Use:   "compare BASE.json HEAD.json",
		Short: "PR-ready markdown diff of two results; exit 1 on a significant regression beyond the threshold",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			th, err := report.ParseThreshold(threshold)
			if err != nil {
				return exitError{2, err}
			}
			base, err := report.ReadJSON(args[0])
			if err != nil {
				return exitError{2, err}
			}
			head, err := report.ReadJSON(args[1])
			if err != nil {
				return exitError{2, err}
			}
			reg, err := report.CompareMarkdown(os.Stdout, base, head, filepath.Base(args[0]), filepath.Base(args[1]), th)
			if err != nil {
				return exitError{2, err}
			}
			if reg {
				return exitError{1, nil}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&threshold, "threshold", "2%", "smallest change that counts (e.g. 2% or 0.02)")
	return cmd
}

func newLeversCmd() *cobra.Command {
	var minfer string
	cmd := &cobra.Command{
		Use:   "levers",
		Short: "the levers with their arms, the path they switch, and the gates that apply",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := newSetup(cmd.Context(), &runFlags{minfer: minfer, device: "auto"})
			if err != nil {
				return err
			}
			var rows [][]string
			for _, l := range s.levers {
				arms, gs := "-", "- (not A/B-able: instrumentation or test seam)"
				if l.ABAble() {
					arms = fmt.Sprintf("A=%s B=%s", l.ArmA, l.ArmB)
					gs = "parity, greedy, ab"
					if l.Backend != "cpu" {
						gs += ", suite, profile (device)"
					}
				}
				tol := l.Tolerance
				if tol == "" {
					tol = "bitwise"
				}
				rows = append(rows, []string{l.Name, l.Kind, l.Default, arms, l.Backend, l.Path, tol, gs})
			}
			fmt.Print(report.Table([]string{"lever", "kind", "default", "arms", "backend", "path", "A-vs-B class", "gates"}, rows))
			return nil
		},
	}
	cmd.Flags().StringVar(&minfer, "minfer", "", "minfer binary")
	return cmd
}

// nightlyEntry is one lever's line of the nightly summary.
type nightlyEntry struct {
	Lever   string    `json:"lever"`
	A, B    string    `json:"-"`
	Verdict string    `json:"verdict"`
	Line    string    `json:"line"`
	Report  string    `json:"report"`
	PPB     []float64 `json:"pp_b"`
	TGB     []float64 `json:"tg_b"`
	PPRatio float64   `json:"pp_ratio"`
	TGRatio float64   `json:"tg_ratio"`
}

type nightlySummary struct {
	Date    string         `json:"date"`
	Suite   gates.Result   `json:"suite"`
	Entries []nightlyEntry `json:"entries"`
}

func newNightlyCmd() *cobra.Command {
	var f runFlags
	var leverList string
	cmd := &cobra.Command{
		Use:   "nightly [--levers all|L1,L2] [--out reports/nightly]",
		Short: "the device suite once, then every lever, then one summary page",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := newSetup(ctx, &f)
			if err != nil {
				return err
			}
			var names []string
			if leverList == "all" {
				for _, l := range s.levers {
					if l.ABAble() && (s.hasGPU || l.Backend != "cuda") {
						names = append(names, l.Name)
					}
				}
			} else {
				names = strings.Split(leverList, ",")
			}
			sum := nightlySummary{Date: time.Now().UTC().Format("2006-01-02T150405")}
			prev := previousNightly(f.out)
			// The device suite once.
			cfg0 := gates.Config{SuiteBins: f.suiteBins}
			cfg0.Defaults()
			sum.Suite = gates.Suite(ctx, cfg0, &gates.Env{M: s.m, HasGPU: s.hasGPU, GPUWhy: s.why})
			var gs []string
			for _, g := range strings.Split(f.gatesCSV, ",") {
				if g != gates.GateSuite {
					gs = append(gs, g)
				}
			}
			f.gatesCSV = strings.Join(gs, ",")
			failed := sum.Suite.Status == gates.Fail
			for _, n := range names {
				if ctx.Err() != nil {
					break
				}
				cfg, err := s.config(&f, strings.TrimSpace(n), "")
				if err != nil {
					sum.Entries = append(sum.Entries, nightlyEntry{Lever: n, Verdict: "COULD NOT RUN", Line: err.Error()})
					failed = true
					continue
				}
				rec, base := s.runConfig(ctx, cfg, f.out, strings.Join(os.Args, " ")+" # lever "+n, os.Stderr)
				e := nightlyEntry{Lever: n, Verdict: rec.Verdict, Line: rec.VerdictLine, Report: base + ".md"}
				for _, g := range rec.Gates {
					if g.AB == nil {
						continue
					}
					for _, m := range g.AB.Metrics {
						if m.Key == "pp" {
							e.PPB, e.PPRatio = m.B, float64(m.Median)
						} else {
							e.TGB, e.TGRatio = m.B, float64(m.Median)
						}
					}
				}
				failed = failed || rec.Verdict == gates.VerdictFail
				sum.Entries = append(sum.Entries, e)
			}
			path := filepath.Join(f.out, "nightly-"+sum.Date)
			b, _ := json.MarshalIndent(sum, "", "  ")
			_ = os.MkdirAll(f.out, 0o755)
			if err := os.WriteFile(path+".json", b, 0o644); err != nil {
				return exitError{2, err}
			}
			if err := os.WriteFile(path+".md", []byte(nightlyMarkdown(sum, prev)), 0o644); err != nil {
				return exitError{2, err}
			}
			fmt.Fprintf(os.Stderr, "abtest: nightly summary %s.md\n", path)
			if failed {
				return exitError{1, nil}
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&leverList, "levers", "all", "all, or a comma-separated list")
	_ = cmd.Flags().Set("out", "reports/nightly")
	return cmd
}

func previousNightly(dir string) *nightlySummary {
	ms, _ := filepath.Glob(filepath.Join(dir, "nightly-*.json"))
	sort.Strings(ms)
	if len(ms) == 0 {
		return nil
	}
	b, err := os.ReadFile(ms[len(ms)-1])
	if err != nil {
		return nil
	}
	var s nightlySummary
	if json.Unmarshal(b, &s) != nil {
		return nil
	}
	return &s
}

func nightlyMarkdown(s nightlySummary, prev *nightlySummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# abtest nightly %s\n\n", s.Date)
	fmt.Fprintf(&b, "Device suite: **%s** — %s %s\n\n", s.Suite.Status, s.Suite.Reason, s.Suite.Evidence)
	var rows [][]string
	for _, e := range s.Entries {
		reg := "-"
		if prev != nil {
			for _, p := range prev.Entries {
				if p.Lever != e.Lever {
					continue
				}
				var parts []string
				for _, m := range []struct {
					n    string
					a, b []float64
				}{{"pp", p.PPB, e.PPB}, {"tg", p.TGB, e.TGB}} {
					if len(m.a) == 0 || len(m.b) == 0 {
						continue
					}
					d := stats.CompareMedians(m.a, m.b, 0.02)
					parts = append(parts, fmt.Sprintf("%s %s %.3f", m.n, d.Verdict, d.Ratio))
				}
				reg = strings.Join(parts, ", ") + " vs " + prev.Date
			}
		}
		rows = append(rows, []string{e.Lever, e.Verdict, fmt.Sprintf("%.4f", e.PPRatio), fmt.Sprintf("%.4f", e.TGRatio), reg, e.Report})
	}
	fmt.Fprintf(&b, "%s\n", report.Table([]string{"lever", "verdict", "pp B/A", "tg B/A", "arm B against the previous nightly", "report"}, rows))
	_ = harness.Unset
	return b.String()
}

package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// Merge reads the shard summaries in args (folders holding
// nightly-*-shard-*.json, or the files) and writes into out the summary
// one unsharded nightly would have written: every lever once, each lever's
// report (its suite gate filled in from shard 0 where it was deferred), the
// comparison with the previous night in out, and the night's verdict.
func Merge(ctx context.Context, out string, args []string, cmdline string) (*gates.NightlySummary, string, error) {
	if len(args) == 0 {
		return nil, "", CannotRun("merge: give the shards' folders (or their nightly-*-shard-*.json files)")
	}
	var shards []gates.ShardResult
	var empty []string
	for _, a := range args {
		files := []string{a}
		if st, err := os.Stat(a); err != nil {
			return nil, "", CannotRun("merge: %v", err)
		} else if st.IsDir() {
			files, _ = filepath.Glob(filepath.Join(a, "nightly-*-shard-*.json")) // fixed pattern
			if len(files) == 0 {
				empty = append(empty, a)
			}
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, "", CannotRun("merge: %v", err)
			}
			var s gates.NightlySummary
			if err := json.Unmarshal(b, &s); err != nil {
				return nil, "", CannotRun("merge: %s: %v", p, err)
			}
			shards = append(shards, gates.ShardResult{Path: p, Sum: &s})
		}
	}
	m, err := gates.MergeShards(shards)
	var inc *gates.IncompatibleShards
	if errors.As(err, &inc) {
		return nil, "", CannotRun("merge: %v", err)
	} else if err != nil {
		return nil, "", &Error{2, err}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, "", &Error{2, fmt.Errorf("merge: --out: %w", err)}
	}
	var shard0 *gates.ShardInfo
	lines := []string{cmdline}
	for _, r := range shards {
		if r.Sum.Shard.Index == 0 {
			shard0 = r.Sum.Shard
		}
		lines = append(lines, "# shard "+r.Sum.Shard.Name()+": "+r.Sum.CommandLine)
	}
	m.CommandLine = strings.Join(lines, "\n")
	for i := range m.Entries {
		if ctx.Err() != nil {
			return nil, "", &Error{3, fmt.Errorf("merge: %w", ctx.Err())}
		}
		e := &m.Entries[i]
		if e.Report == "" {
			continue
		}
		if err := mergeReport(e, filepath.Dir(e.From), out, shard0); err != nil {
			e.Verdict, e.Line = gates.VerdictInconclusive, fmt.Sprintf("its report could not be merged: %v", err)
		}
	}
	var notes []string
	if len(empty) > 0 {
		notes = append(notes, "folders without a shard summary: "+strings.Join(empty, ", "))
	}
	prevPath, prev, skipped := gates.NightlyBefore(out, m.Date)
	m.Compare(prevPath, prev)
	if len(skipped) > 0 {
		notes = append(notes, "unreadable newer nightly results skipped ("+strings.Join(skipped, "; ")+")")
	}
	if len(notes) > 0 {
		if m.PrevNote != "" {
			notes = append([]string{m.PrevNote}, notes...)
		}
		m.PrevNote = strings.Join(notes, "; ")
	}
	m.Decide()
	path := filepath.Join(out, "nightly-"+m.Date)
	if err := writeNightly(path, m, true); err != nil {
		return nil, "", err
	}
	return m, path, nil
}

// mergeReport writes the entry's lever report into out at the same relative
// path. A suite gate deferred to shard 0 takes shard 0's result for the
// lever's arm B (or stays undecided, saying shard 0 is missing), and the
// lever's verdict is decided again.
func mergeReport(e *gates.NightlyEntry, dir, out string, shard0 *gates.ShardInfo) error {
	src := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(e.Report, ".md")))
	rec, err := report.ReadJSON(src + ".json")
	if err != nil {
		return err
	}
	for i, g := range rec.Gates {
		if g.Gate != gates.GateSuite || g.DeferredTo == "" {
			continue
		}
		filled := false
		if shard0 != nil {
			for _, ls := range shard0.Suites {
				if ls.Lever == rec.Lever && ls.B == rec.B {
					rec.Gates[i], filled = ls.Result, true
					break
				}
			}
		}
		if !filled {
			why := "shard 0 is missing from the merge"
			if shard0 != nil {
				why = "shard 0 did not run it (interrupted before its suites)"
			}
			rec.Gates[i].Reason = fmt.Sprintf("deferred to shard %s, which runs every lever's suite, but %s", g.DeferredTo, why)
		}
		rec.Decide()
	}
	e.Verdict, e.Line = rec.Verdict, rec.VerdictLine
	return report.WriteFinal(filepath.Join(out, filepath.FromSlash(strings.TrimSuffix(e.Report, ".md"))), rec, nil)
}

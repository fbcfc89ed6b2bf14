package runs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/minfer-go/minfer/harness/profile"
)

// NCU summarizes every file it can; a file it cannot read is an exit-2
// error naming it, after the others are written.
func NCU(files []string, out string, floor float64, stdout io.Writer) error {
	if !(floor > 0) {
		return CannotRun("ncu: --floor-gbs %v: want a positive bandwidth", floor)
	}
	var md bytes.Buffer
	if err := profile.WriteNCUHeader(&md, floor); err != nil {
		return CannotRun("ncu: %v", err)
	}
	var bad []string
	done := 0
	for _, f := range files {
		if err := ncuFile(&md, f, floor); err != nil {
			bad = append(bad, err.Error())
			fmt.Fprintf(&md, "\n## %s\n\nNot summarized: %v\n", profile.NCUTitle(f), err)
			continue
		}
		done++
	}
	if done > 0 {
		if out == "" {
			if _, err := stdout.Write(md.Bytes()); err != nil {
				return CannotRun("ncu: write: %v", err)
			}
		} else if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
			return CannotRun("ncu: %v", err)
		}
	}
	if len(bad) > 0 {
		return CannotRun("ncu: %d of %d files not summarized: %s", len(bad), len(files), strings.Join(bad, "; "))
	}
	return nil
}

func ncuFile(w io.Writer, path string, floor float64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err // names the path
	}
	ms, err := profile.ParseNCUCSV(string(b))
	if err != nil {
		return fmt.Errorf("%s: not per-launch `ncu --csv` output: %w", path, err)
	}
	win, err := profile.SummarizeNCU(ms, floor)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return profile.WriteNCUTable(w, profile.NCUTitle(path), win)
}

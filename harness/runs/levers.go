package runs

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// Levers writes the registry of the minfer binary as a table.
func Levers(ctx context.Context, minfer string, w io.Writer) error {
	s, err := newSetup(ctx, &Options{Minfer: minfer, Device: "auto"})
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(w, report.LeversTable(s.levers))
	return err
}

// Compare writes the comparison of two stored lever results; regressed is
// a significant slowdown beyond the threshold.
func Compare(oldPath, newPath, threshold string, w io.Writer) (regressed bool, err error) {
	th, err := report.ParseThreshold(threshold)
	if err != nil {
		return false, CannotRun("--threshold: %v", err)
	}
	base, err := report.ReadJSON(oldPath)
	if err != nil {
		return false, CannotRun("%v", err)
	}
	head, err := report.ReadJSON(newPath)
	if err != nil {
		return false, CannotRun("%v", err)
	}
	c, err := gates.CompareRecords(base, head, th)
	if err != nil {
		return false, CannotRun("%v", err)
	}
	return report.CompareMarkdown(w, c, base, head, filepath.Base(oldPath), filepath.Base(newPath)), nil
}

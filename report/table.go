// Package report renders a lever run as markdown (tables with tablewriter,
// plots with gonum/plot beside it) and JSON, compares two runs, and writes
// Go benchmark format.
package report

import (
	"bytes"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Table renders a markdown table: header auto-format off, '|' escaped and
// newlines flattened in cells, so it renders on GitHub and reads as text.
func Table(header []string, rows [][]string) string {
	var b bytes.Buffer
	t := tablewriter.NewTable(&b,
		tablewriter.WithRenderer(renderer.NewMarkdown()),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
	)
	t.Header(escapeRow(header))
	for _, r := range rows {
		_ = t.Append(escapeRow(r))
	}
	_ = t.Render()
	return b.String()
}

// Escape makes s safe inside a markdown table cell.
func Escape(s string) string {
	s = strings.ReplaceAll(s, `\|`, `|`)
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", " ")
}

func escapeRow(r []string) []string {
	out := make([]string, len(r))
	for i, c := range r {
		out[i] = Escape(c)
	}
	return out
}

package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Every number a report prints goes through these, so a value renders the
// same in every table.

func f4(x float64) string { return fmt.Sprintf("%.4f", x) }

func g3(x float64) string { return fmt.Sprintf("%.3g", x) }

func slowdownPct(s float64) string {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return "none (no count of these rounds can refuse)"
	}
	return fmt.Sprintf("%.2f%%", (s-1)*100)
}

func num(x float64, format string) string {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return "-"
	}
	return fmt.Sprintf(format, x)
}

// Fnum formats x, or "-" when it is undefined.
func Fnum(x float64, format string) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf(format, x)
}

// thousands renders a tok/s value with a thousands separator, as issue 6
// writes them (52,503; 863.3).
func thousands(x float64, decimals int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

func thousandsRef(x float64, decimals int) string {
	if x <= 0 {
		return "-"
	}
	return thousands(x, decimals)
}

// Pct renders a share as a percentage (two significant digits below 1%).
// Pct renders a share as a percentage ("-" when unknown).
func Pct(x float64) string {
	if math.Abs(x) < 0.01 && x != 0 {
		return Fnum(100*x, "%.2g%%")
	}
	return Fnum(100*x, "%.1f%%")
}

// GBs renders GB/s (three significant digits below 100).
// GBs renders a bandwidth in GB/s ("-" when unknown).
func GBs(x float64) string {
	if math.Abs(x) < 100 {
		return Fnum(x, "%.3g")
	}
	return Fnum(x, "%.1f")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// signedPct renders a relative change (0.031 → "+3.10%").
func signedPct(x float64) string { return Fnum(100*x, "%+.2f%%") }

// pValue renders a p-value (two significant digits).
func pValue(p float64) string { return Fnum(p, "%.2g") }

// shortSHA is a commit's first nine hex digits, as report file names carry it.
func shortSHA(c string) string {
	if len(c) > 9 {
		return c[:9]
	}
	return orDash(c)
}

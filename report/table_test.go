package report

import (
	"strings"
	"testing"
)

func TestTable_EscapesPipesAndKeepsHeaderCase(t *testing.T) {
	s := Table([]string{"gate", "max|diff|"}, [][]string{{"parity", "a|b\nc"}})
	if !strings.Contains(s, `max\|diff\|`) || !strings.Contains(s, `a\|b c`) {
		t.Fatalf("not escaped:\n%s", s)
	}
	if strings.Contains(s, "GATE") || strings.Contains(s, "MAX") {
		t.Fatalf("header auto-formatted:\n%s", s)
	}
	if n := strings.Count(strings.Split(strings.TrimSpace(s), "\n")[0], "|") - strings.Count(s[:strings.Index(s, "\n")], `\|`); n != 3 {
		t.Fatalf("header has %d separators:\n%s", n, s)
	}
}

package runs

import "testing"

// A bisect asks each build's bench help whether it takes --format (today)
// or the format as -o (before issue 14).
func TestFormatFlag_TodaysBenchHelpAndGoFlagsMatchTheOldOneDoesNot(t *testing.T) {
	for help, want := range map[string]bool{
		"      --format string   output format: md, json or csv\n":                  true,
		"  -format string\n    \toutput format\n":                                   true,
		"  -o, --output string   output format: md, json or csv (default \"md\")\n": false,
	} {
		if got := formatFlag.MatchString(help); got != want {
			t.Errorf("%q: %v, want %v", help, got, want)
		}
	}
}

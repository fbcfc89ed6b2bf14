package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// checkOptInRefusal parses env and asks optInConflict about lever: want
// is the unmet setting the refusal must name, "" when none is wanted. It
// returns the parsed settings for checks of the caller's own.
func checkOptInRefusal(t *testing.T, lever string, env []string, want string) levers.Config {
	t.Helper()
	lv, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	err = optInConflict(lv, lever)
	if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
		t.Errorf("%v: %v, want a refusal naming %q (none when empty)", env, err, want)
	}
	return lv
}

// checkOptInRequiresListed fails unless New checks lever's Requires.
func checkOptInRequiresListed(t *testing.T, lever string) {
	t.Helper()
	if !slices.Contains(optInRequires, lever) {
		t.Errorf("%s is not in optInRequires: New would not check its Requires", lever)
	}
}

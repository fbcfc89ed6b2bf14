package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// historyFolder writes 20 nightlies of one lever whose decode B/A drops 5%
// from night 12 (8 nights after: an alert) and returns the folder.
func historyFolder(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nightly")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		lvl := 1.0
		if i >= 12 {
			lvl = 0.95
		}
		e := gates.NightlyEntry{Lever: "MINFER_X", A: "1", B: "0", Backend: "any", Verdict: gates.VerdictPass}
		for r := range 5 {
			wiggle := 1 + 0.001*float64(r-2) + 0.0003*float64(i%3)
			e.PPA, e.PPB = append(e.PPA, 1000), append(e.PPB, 1000*wiggle)
			e.TGA, e.TGB = append(e.TGA, 100), append(e.TGB, 100*lvl*wiggle)
		}
		s := gates.NightlySummary{Date: fmt.Sprintf("2026-02-%02dT010000", i+1), Machine: "AMD EPYC", Commit: fmt.Sprintf("%02d%038x", i, i),
			ModelSHA256: "16bf5b3daf33", PP: 32, TG: 8, Entries: []gates.NightlyEntry{e}}
		b, _ := json.Marshal(s)
		if err := os.WriteFile(filepath.Join(dir, "nightly-"+s.Date+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestHistoryExitCodes(t *testing.T) {
	dir := historyFolder(t)
	site := filepath.Join(t.TempDir(), "site")
	if code := run([]string{"history", dir, "--html", site}); code != 1 {
		t.Errorf("an open alert: exit %d, want 1", code)
	}
	for _, f := range []string{filepath.Join(dir, "history", "history.md"), filepath.Join(dir, "history", "MINFER_X.png"), filepath.Join(site, "index.html")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("not written: %v", err)
		}
	}
	ack := filepath.Join(t.TempDir(), "ack.txt")
	if err := os.WriteFile(ack, []byte("MINFER_X=0 tg 2026-02-13T010000 # expected\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"history", dir, "--ack", ack}); code != 0 {
		t.Errorf("the alert acknowledged: exit %d, want 0", code)
	}
	if code := run([]string{"history", filepath.Join(dir, "missing")}); code != 2 {
		t.Errorf("no such folder: exit %d, want 2", code)
	}
	if code := run([]string{"history"}); code != 2 {
		t.Errorf("no folder given: exit %d, want 2", code)
	}
}

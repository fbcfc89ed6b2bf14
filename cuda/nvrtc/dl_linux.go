//go:build linux

package nvrtc

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// loadedPath is the file of the first mapping of this process whose base
// name begins with prefix (a library loaded by its bare name: where the
// dynamic loader found it); "" when there is none or maps is unreadable.
func loadedPath(prefix string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[len(fields)-1]
		if strings.HasPrefix(p, "/") && strings.HasPrefix(filepath.Base(p), prefix) {
			return p
		}
	}
	return ""
}

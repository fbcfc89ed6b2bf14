package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
)

// Helpers shared by the tests of several files.

// kernelSource is the text of kernels/<name>, failing the test when it
// cannot be read: the source tests check what the kernels spell out.
func kernelSource(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("kernels", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// qrsRefusal is one host-side refusal case of a fused rope-store launcher:
// args is what the launcher is called with, want what its error says.
type qrsRefusal[A any] struct {
	name, want string
	args       A
}

// qrsCheckRefusals calls launch with every case's args on a Kernels
// without a module and a nil stream, and checks the launcher refused on
// the host with an error that names op ("cuda: <op>: ...") and says the
// case's want: the loop of the fused rope-store launchers' refusal tables.
func qrsCheckRefusals[A any](t *testing.T, op string, cases []qrsRefusal[A], launch func(k *Kernels, s *driver.Stream, args A) error) {
	t.Helper()
	k := &Kernels{}
	var s *driver.Stream
	for _, c := range cases {
		err := launch(k, s, c.args)
		if err == nil || !strings.HasPrefix(err.Error(), "cuda: "+op+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to name %s and say %q", c.name, err, op, c.want)
		}
	}
}

// qrsWith returns the refusal tables' edit of good: a copy with f applied
// (each case breaks one field of valid params).
func qrsWith(good QkvRopeStoreParams) func(f func(*QkvRopeStoreParams)) QkvRopeStoreParams {
	return func(f func(*QkvRopeStoreParams)) QkvRopeStoreParams { p := good; f(&p); return p }
}

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
)

// refuseOp is the CUDA backend with one op refused, so the scheduler puts
// those nodes on the next backend (the CPU): a graph split between CUDA
// and CPU, as a model with a CPU-only node would have.
type refuseOp struct {
	*Backend
	op graph.Op
}

func (r refuseOp) SupportsOp(n *graph.Node) error {
	if n.Op == r.op {
		return errors.New("refused by the split test")
	}
	return r.Backend.SupportsOp(n)
}

// Issue 23 item 5 (the design's 7.1): a graph split CUDA -> CPU -> CUDA,
// with staging both ways, is bitwise the all-CPU run (every op in it is
// exactly rounded on both backends: row gathers, f32 add and mul).
func TestSplit_CUDAThenCPUThenCUDABitwiseEqualsAllCPU(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, nt := range []int{1, 5} {
		const n = 96
		var c dsCase
		c.nt, c.name = nt, fmt.Sprintf("split/nt%d", nt)
		a := dsOperand(&c, "a", dsRand(r, n*nt, 1), n)
		bb := dsOperand(&c, "b", dsRand(r, n*nt, 1), n)
		c.build = func(b *graph.Builder, ids, pos, kvw int) int {
			x, y := a(b, ids), bb(b, ids)
			sum := b.Add("sum", x, y)     // CUDA
			prod := b.Mul("prod", sum, y) // the CPU: refused on CUDA
			return b.Add("out", prod, x)  // CUDA again
		}
		host := cpu.New(cpu.Options{Threads: 2})
		want, _, err := dsRunOn(t, c, host)
		host.Close()
		if err != nil {
			t.Fatal(err)
		}
		dev := dsBackend(t, dsLevers(t))
		side := cpu.New(cpu.Options{Threads: 2})
		got, splits, err := dsRunOn(t, c, refuseOp{dev, graph.OpMul}, side)
		side.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(splits, []int{0, 1, 0}) {
			t.Fatalf("%s: splits on backends %v, want CUDA, CPU, CUDA", c.name, splits)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: element %d: %g split, %g all-CPU", c.name, i, got[i], want[i])
			}
		}
	}
}

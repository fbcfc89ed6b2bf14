package cuda

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

// opFunc checks one node on the host (shapes, weights, KV layer) and
// returns its launches as a closure to run on the device thread (nil: the
// node launches nothing). A failed check is an error naming the values;
// Execute adds the node.
type opFunc func(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error)

// opTable is the dispatch table: every op the device runs. What is not
// here is refused by SupportsOp and placed on the CPU.
func opTable() map[graph.Op]opFunc {
	return map[graph.Op]opFunc{
		graph.OpInput:             opNone,
		graph.OpView:              opNone,
		graph.OpReshape:           opNone,
		graph.OpGetRows:           opGetRows,
		graph.OpRmsNorm:           opRmsNorm,
		graph.OpQkNorm:            opRmsNorm,
		graph.OpMatMul:            opMatMul,
		graph.OpFusedQKV:          opFusedQKV,
		graph.OpFusedFFN:          opFusedFFN,
		graph.OpMatMulAdd:         opMatMulAdd,
		graph.OpAdd:               opAddMul,
		graph.OpMul:               opAddMul,
		graph.OpSilu:              opSilu,
		graph.OpSwiGLU:            opSwiGLU,
		graph.OpRope:              opRope,
		graph.OpAttn:              opAttn,
		graph.OpAttnMatMulAdd:     opAttnMatMulAdd,
		graph.OpFusedQKVRopeStore: opFusedQKVRopeStore,
		graph.OpKvcacheStore:      opKVStore,
		graph.OpKvcacheLoad:       opKVLoad,
		graph.OpPermute:           opPermute,
		graph.OpScale:             opScale,
		graph.OpSoftmax:           opSoftmax,
		graph.OpQkvBiasRopeStore:  opQkvBiasRopeStore,
	}
}

// Execute implements graph.Backend. Outside a capturing execution the
// node's launches run now (asynchronously on the stream); in a capturing
// one they are recorded and issued inside the window at Synchronize.
func (b *Backend) Execute(n *graph.Node, in []graph.Tensor, out graph.Tensor) error {
	defer b.unlock(b.lock())
	if b.closed {
		return fmt.Errorf("cuda: %s %s: backend is closed", n.Op, n.Name)
	}
	op := b.ops[n.Op]
	if op == nil {
		return fmt.Errorf("cuda: %s %s: op has no device kernel", n.Op, n.Name)
	}
	b.cap.noteNode(n)
	launch, err := op(b, n, in, out)
	if err != nil {
		err = fmt.Errorf("cuda: %s %s: %w", n.Op, n.Name, err)
		if b.cap.recording {
			b.abandon(err)
		}
		return err
	}
	if launch == nil {
		return nil
	}
	return b.issue(n, launch)
}

// issue runs node n's launches now, or records them for the capture.
func (b *Backend) issue(n *graph.Node, launch func() error) error {
	named := func() error {
		if err := launch(); err != nil {
			return fmt.Errorf("cuda: %s %s: %w", n.Op, n.Name, err)
		}
		return nil
	}
	if b.cap.recording {
		b.cap.pending = append(b.cap.pending, named)
		return nil
	}
	return b.dev.Do(named)
}

func opNone(*Backend, *graph.Node, []graph.Tensor, graph.Tensor) (func() error, error) {
	return nil, nil
}

// ptrs resolves the first k inputs and the output (when wantOut).
func (b *Backend) ptrs(in []graph.Tensor, k int, out graph.Tensor, wantOut bool) ([]driver.DevicePtr, driver.DevicePtr, error) {
	if len(in) < k {
		return nil, 0, fmt.Errorf("%d inputs, want %d", len(in), k)
	}
	ps := make([]driver.DevicePtr, k)
	for i := range k {
		p, err := b.pool.tensor(in[i])
		if err != nil {
			return nil, 0, fmt.Errorf("input %d: %w", i, err)
		}
		ps[i] = p
	}
	var o driver.DevicePtr
	if wantOut {
		if out.Len <= 0 {
			return nil, 0, errors.New("node has no output tensor")
		}
		var err error
		if o, err = b.pool.tensor(out); err != nil {
			return nil, 0, fmt.Errorf("output: %w", err)
		}
	}
	return ps, o, nil
}

// sameShape checks a one-input node whose output has its input's length
// and resolves both (the element-wise and row ops).
func (b *Backend) sameShape(n *graph.Node, in []graph.Tensor, out graph.Tensor) (x, o driver.DevicePtr, err error) {
	p, o, err := b.nodeIO(n, in, 1, out)
	if err != nil {
		return 0, 0, err
	}
	if in[0].Len != out.Len {
		return 0, 0, fmt.Errorf("input of %d elements, output %d", in[0].Len, out.Len)
	}
	return p[0], o, nil
}

// nodeIO checks the output's length against the node's shape and resolves
// the first k inputs and the output.
func (b *Backend) nodeIO(n *graph.Node, in []graph.Tensor, k int, out graph.Tensor) ([]driver.DevicePtr, driver.DevicePtr, error) {
	if err := checkOut(n, out); err != nil {
		return nil, 0, err
	}
	return b.ptrs(in, k, out, true)
}

func checkOut(n *graph.Node, out graph.Tensor) error {
	if out.Len != n.Shape.N() {
		return fmt.Errorf("output of %d elements, shape %s", out.Len, n.Shape)
	}
	return nil
}

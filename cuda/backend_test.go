package cuda

import (
	"errors"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

func TestNew_DisableCUDAIsErrNoDevice(t *testing.T) {
	cfg, err := levers.Parse([]string{"MINFER_DISABLE_CUDA=1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Levers: cfg}); !errors.Is(err, driver.ErrNoDevice) {
		t.Errorf("New with MINFER_DISABLE_CUDA: %v, want ErrNoDevice", err)
	}
}

// TestOpTable_CoversEveryUnfusedOp: every op of the CPU backend except the
// two fused kinds whose kernels come with a later issue has a device entry.
func TestOpTable_CoversEveryUnfusedOpOfTheCPU(t *testing.T) {
	tab := opTable()
	for op := graph.OpInput; op <= graph.OpFusedFFN; op++ {
		_, ok := tab[op]
		want := op != graph.OpQkvBiasRopeStore && op != graph.OpFusedFFN
		if ok != want {
			t.Errorf("op %s: in the device table %v, want %v", op, ok, want)
		}
	}
}

func TestWeightTypes_AreWhatMatmulAndGatherBothDecode(t *testing.T) {
	for _, ty := range WeightTypes() {
		if !weightTypeSupported(ty) {
			t.Errorf("%s listed but not supported by both matmul and get_rows", ty)
		}
	}
	for _, ty := range []quant.Type{quant.Q2_K, quant.Q3_K, quant.I8} {
		if weightTypeSupported(ty) {
			t.Errorf("%s has no device kernel but is accepted", ty)
		}
	}
}

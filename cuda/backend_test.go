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

// TestOpTable_CoversEveryUnfusedOp: every op of the CPU backend has a
// device entry, fused FFN included, except the fused kinds listed in
// notYet (kernels still to come); SupportsFused says yes to the fused kinds
// the table runs.
func TestOpTable_CoversEveryUnfusedOpOfTheCPU(t *testing.T) {
	tab := opTable()
	notYet := map[graph.Op]bool{}
	for op := graph.OpInput; op <= graph.OpMatMulAdd; op++ {
		_, ok := tab[op]
		if want := !notYet[op] || ok; ok != want {
			t.Errorf("op %s: in the device table %v, want %v", op, ok, want)
		}
	}
	b := &Backend{}
	for kind, op := range map[graph.FuseKind]graph.Op{graph.FuseQKV: graph.OpFusedQKV, graph.FuseFFN: graph.OpFusedFFN,
		graph.FuseQkvBiasRopeStore: graph.OpQkvBiasRopeStore, graph.FuseQkNormRopeStore: graph.OpQkvBiasRopeStore} {
		if _, ok := tab[op]; !b.SupportsFused(kind) || !ok {
			t.Errorf("fuse kind %v: SupportsFused %v, op %s in the table %v", kind, b.SupportsFused(kind), op, ok)
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

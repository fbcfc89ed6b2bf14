package cpu

import (
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// The CPU census (MINFER_LAUNCH_CENSUS=1): per executed node one count
// under a name that says which path ran, the CPU's counterpart of the CUDA
// backend's kernel launch census. The names:
//
//	cpu_matmul_<wtype>          OpMatMul (wtype: the weight's type, lower case: q8_0, f16, q4_k)
//	cpu_matmul_add_<wtype>      OpMatMulAdd
//	cpu_fused_qkv_<wtype>       OpFusedQKV (the q weight's type)
//	cpu_fused_ffn_<wtype>       OpFusedFFN (the gate weight's type)
//	cpu_kv_store_<fmt>          every K or V store (fmt: f32, f16, q8_0): one per
//	                            OpKvcacheStore node and two per fused
//	                            OpQkvBiasRopeStore node, which stores K and V itself
//	cpu_kv_load_<fmt>           OpKvcacheLoad
//	cpu_qkv_rope_store_<fmt>    OpQkvBiasRopeStore
//	cpu_attn                    OpAttn
//	cpu_<op>                    every other op: cpu_get_rows, cpu_rms_norm,
//	                            cpu_qk_norm, cpu_add, cpu_mul, cpu_silu,
//	                            cpu_swiglu, cpu_rope, cpu_permute, cpu_scale,
//	                            cpu_softmax
//
// Input, view and reshape nodes run nothing and are not counted. A KV
// store counts as a path wherever it runs so that the KV-format liveness
// rule (cpu_kv_store_f16) holds with the QKV fusion on or off.
//
// The hot path increments a map keyed by (op, type) without building a
// string; names are made only when Census is read.

type censusKey struct {
	op  graph.Op
	sub int // quant.Type or kv.Format; -1 where the name has no detail
}

// kvStoreOp keys the KV-store path, also where it runs inside the fused
// QKV tail (which has no store node of its own).
const kvStoreOp = graph.OpKvcacheStore

// countNode adds node n's execution to the census; n ran without error.
func (b *Backend) countNode(n *graph.Node) {
	f := int(b.kvSpec.Format)
	switch n.Op {
	case graph.OpInput, graph.OpView, graph.OpReshape:
		return
	case graph.OpMatMul, graph.OpMatMulAdd:
		b.census[censusKey{n.Op, b.weightType(n.Weight)}]++
	case graph.OpFusedQKV, graph.OpFusedFFN:
		w := ""
		if len(n.Weights) > 0 {
			w = n.Weights[0]
		}
		b.census[censusKey{n.Op, b.weightType(w)}]++
	case graph.OpKvcacheStore, graph.OpKvcacheLoad:
		b.census[censusKey{n.Op, f}]++
	case graph.OpQkvBiasRopeStore:
		b.census[censusKey{n.Op, f}]++
		b.census[censusKey{kvStoreOp, f}] += 2
	default:
		b.census[censusKey{n.Op, -1}]++
	}
}

func (b *Backend) weightType(name string) int {
	if w := b.weights[name]; w != nil {
		return int(w.typ)
	}
	return -1
}

// Census returns the executions per census name (nil when the census is
// off). It survives Close, so a process reads it at exit.
func (b *Backend) Census() map[string]int64 {
	if b.census == nil {
		return nil
	}
	out := make(map[string]int64, len(b.census))
	for k, n := range b.census {
		out[k.name()] += n
	}
	return out
}

func (k censusKey) name() string {
	lower := func(s string) string { return strings.ToLower(s) }
	typ := func() string {
		if k.sub < 0 {
			return "unknown"
		}
		return lower(quant.Type(k.sub).String())
	}
	format := func() string { return kv.Format(k.sub).String() }
	switch k.op {
	case graph.OpMatMul:
		return "cpu_matmul_" + typ()
	case graph.OpMatMulAdd:
		return "cpu_matmul_add_" + typ()
	case graph.OpFusedQKV:
		return "cpu_fused_qkv_" + typ()
	case graph.OpFusedFFN:
		return "cpu_fused_ffn_" + typ()
	case graph.OpKvcacheStore:
		return "cpu_kv_store_" + format()
	case graph.OpKvcacheLoad:
		return "cpu_kv_load_" + format()
	case graph.OpQkvBiasRopeStore:
		return "cpu_qkv_rope_store_" + format()
	}
	return "cpu_" + k.op.String()
}

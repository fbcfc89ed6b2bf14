package model

import (
	"path/filepath"
	"testing"

	"unsafe"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// MINFER_CPU_EXACT=1 evaluates a quantized model exactly as its F32
// dequantization (what `minfer quantize M OUT F32` writes) evaluates: the same f32
// weights, unquantized activations. Gate 1's exact reference rests on
// this; without the lever the quantized activations give other logits (the
// lever is live).
func TestCPUExact_QuantizedModelEqualsItsF32DequantizationBitwise(t *testing.T) {
	q4k := withType(tinyQwen3, quant.Q4_K)
	q4k.nEmbd, q4k.nFF, q4k.headDim = 256, 256, 64
	for _, s := range []tinySpec{withType(tinyQwen2, quant.Q8_0), q4k} {
		t.Run(s.arch+"-"+s.wtype.String(), func(t *testing.T) {
			dir := t.TempDir()
			qp := writeTiny(t, dir, s)
			fp := filepath.Join(dir, "f32.gguf")
			writeF32Copy(t, qp, fp)
			run := func(path string, lv levers.Config) []float32 {
				e, err := Load(path, Options{Device: "cpu", Threads: 2, Levers: lv})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				l, err := e.Forward(prompt, true)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			exact := run(qp, mustEnv(t, "MINFER_CPU_EXACT=1"))
			deq := run(fp, levers.Default())
			quantized := run(qp, levers.Default())
			for i := range exact {
				if exact[i] != deq[i] {
					t.Fatalf("logit %d: exact %v, the F32 dequantization %v (max|diff| %g)", i, exact[i], deq[i], maxAbsDiff(exact, deq))
				}
			}
			if d := maxAbsDiff(exact, quantized); d == 0 {
				t.Fatal("MINFER_CPU_EXACT=1 gave the quantized activations' logits bitwise: the lever switched nothing")
			}
		})
	}
}

// writeF32Copy writes every tensor of in dequantized to F32 (engine/quantize
// imports this package, so its File cannot be used here).
func writeF32Copy(t *testing.T, in, out string) {
	t.Helper()
	f, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		tr, err := quant.TraitsOf(ti.Type)
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float32, ti.NElements)
		tr.Dequantize(f.Data(ti), vals)
		if err := w.AddTensor(ti.Name, quant.F32, ti.Dims, unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), 4*len(vals))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
}

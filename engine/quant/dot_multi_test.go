package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// randomRow fills a row of nb blocks of t with random bytes (every level,
// -128 quants included) and then overwrites the f16 scales with finite ones,
// so the dots are finite and comparable bit for bit.
func randomRow(r *rand.Rand, t Type, n int) []byte {
	rb, _ := t.RowBytes(n)
	b := make([]byte, rb)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	half := func(o int) { binary.LittleEndian.PutUint16(b[o:], FP32ToFP16(float32(r.NormFloat64()))) }
	bs := rb / (n / t.BlockSize())
	for o := 0; o < rb; o += bs {
		switch t {
		case Q4_0, Q5_0, Q8_0:
			half(o)
		case Q4_1, Q5_1, Q8_1, Q4_K, Q5_K:
			half(o)
			half(o + 2)
		case Q6_K:
			half(o + q6KDOff)
		case Q8_K:
			binary.LittleEndian.PutUint32(b[o:], math.Float32bits(float32(r.NormFloat64())))
		}
	}
	return b
}

// TestDot3_BitwiseEqualsDotOnRandomBytes: the multi-token dots give Dot's
// bits for arbitrary quants (including the extreme -128 levels of Q8_0 and
// Q8_K, where the lane bound is tightest), for one, two and three lanes.
func TestDot3_BitwiseEqualsDotOnRandomBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for typ, md := range multiDots {
		tr, err := TraitsOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		n := 4 * tr.Type.BlockSize()
		q := make([]int8, n)
		p := make([]int64, n)
		for it := 0; it < 200; it++ {
			w := randomRow(r, typ, n)
			var acts [3][]byte
			for l := range acts {
				acts[l] = randomRow(r, tr.VecDot, n)
				if it == 0 { // all quants -128: the largest lane sums
					bs, _ := tr.VecDot.RowBytes(tr.VecDot.BlockSize())
					off := map[Type]int{Q8_0: 2, Q8_1: 4, Q8_K: q8KQsOff}[tr.VecDot]
					for i := 0; i < len(acts[l]); i += bs {
						for j := 0; j < tr.VecDot.BlockSize(); j++ {
							acts[l][i+off+j] = 0x80
						}
					}
					if typ == Q8_0 {
						for i := 0; i < len(w); i += q8_0BlockBytes {
							for j := 2; j < q8_0BlockBytes; j++ {
								w[i+j] = 0x80
							}
						}
					}
				}
			}
			md.Decode(n, w, q)
			for nl := 1; nl <= 3; nl++ {
				rows := [3][]byte{acts[0], nil, nil}
				for l := 1; l < nl; l++ {
					rows[l] = acts[l]
				}
				PackLanes(tr.VecDot, n, rows[0], rows[1], rows[2], p)
				var out [3]float32
				md.Dot3(n, w, q, p, &acts, &out)
				for l := 0; l < nl; l++ {
					want := tr.Dot(n, w, acts[l])
					if math.Float32bits(out[l]) != math.Float32bits(want) {
						t.Fatalf("%s iteration %d lanes %d lane %d: %v, Dot %v", typ, it, nl, l, out[l], want)
					}
				}
			}
		}
	}
}

// Package oracle is the independent float64 reference forward pass of Qwen2
// and Qwen3: every weight dequantized and widened to float64, straight loops,
// no graph, no quantized activations, no KV cache. It is written from the
// architecture alone and is what the engine's logits are checked against.
package oracle

import (
	"fmt"
	"math"
	"strconv"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

// matrix is a weight of rows x cols values (ggml: Dims[0] = cols, the row
// length; y = W x takes x of length cols to y of length rows).
type matrix struct {
	rows, cols int
	w          []float64
}

type layer struct {
	attnNorm       []float64
	wq, wk, wv, wo matrix
	bq, bk, bv     []float64 // nil without QKV bias
	qNorm, kNorm   []float64 // nil without per-head q/k norm
	ffnNorm        []float64
	gate, up, down matrix
}

// Model is a Qwen2/Qwen3 model held entirely in float64.
type Model struct {
	hp         model.HParams
	embd       matrix // NVocab rows of NEmbd
	layers     []layer
	outputNorm []float64
	output     matrix // token_embd when the output is tied
}

// HParams returns the model's hyper-parameters.
func (m *Model) HParams() model.HParams { return m.hp }

// Load reads the GGUF file at path and dequantizes every weight to float64.
// The file is closed before Load returns.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return nil, fmt.Errorf("oracle: %s: %w", path, err)
	}
	m := &Model{hp: hp, layers: make([]layer, hp.NLayer)}
	vec := func(name string) ([]float64, error) {
		mt, err := load(f, name)
		return mt.w, err
	}
	if m.embd, err = load(f, "token_embd.weight"); err != nil {
		return nil, err
	}
	for i := range m.layers {
		l := &m.layers[i]
		b := "blk." + strconv.Itoa(i) + "."
		mats := []struct {
			name string
			dst  *matrix
		}{
			{"attn_q.weight", &l.wq}, {"attn_k.weight", &l.wk}, {"attn_v.weight", &l.wv},
			{"attn_output.weight", &l.wo}, {"ffn_gate.weight", &l.gate}, {"ffn_up.weight", &l.up},
			{"ffn_down.weight", &l.down},
		}
		for _, x := range mats {
			if *x.dst, err = load(f, b+x.name); err != nil {
				return nil, err
			}
		}
		vecs := []struct {
			name string
			dst  *[]float64
			want bool
		}{
			{"attn_norm.weight", &l.attnNorm, true}, {"ffn_norm.weight", &l.ffnNorm, true},
			{"attn_q.bias", &l.bq, hp.QKVBias}, {"attn_k.bias", &l.bk, hp.QKVBias}, {"attn_v.bias", &l.bv, hp.QKVBias},
			{"attn_q_norm.weight", &l.qNorm, hp.QKNorm}, {"attn_k_norm.weight", &l.kNorm, hp.QKNorm},
		}
		for _, x := range vecs {
			if !x.want {
				continue
			}
			if *x.dst, err = vec(b + x.name); err != nil {
				return nil, err
			}
		}
	}
	if m.outputNorm, err = vec("output_norm.weight"); err != nil {
		return nil, err
	}
	if hp.TiedOutput {
		m.output = m.embd
	} else if m.output, err = load(f, "output.weight"); err != nil {
		return nil, err
	}
	return m, nil
}

// load dequantizes one tensor (to f32 with engine/quant, then widened).
func load(f *gguf.File, name string) (matrix, error) {
	ti, ok := f.Tensor(name)
	if !ok {
		return matrix{}, fmt.Errorf("oracle: tensor %s is missing", name)
	}
	if len(ti.Dims) == 0 || ti.Dims[0] == 0 {
		return matrix{}, fmt.Errorf("oracle: tensor %s has shape %v", name, ti.Dims)
	}
	data, err := f.TensorData(name)
	if err != nil {
		return matrix{}, fmt.Errorf("oracle: %w", err)
	}
	cols := int(ti.Dims[0])
	rows := int(ti.Rows())
	tmp := make([]float32, cols*rows)
	if err := quant.Dequantize(ti.Type, data, tmp); err != nil {
		return matrix{}, fmt.Errorf("oracle: tensor %s: %w", name, err)
	}
	w := make([]float64, len(tmp))
	for i, v := range tmp {
		w[i] = float64(v)
	}
	return matrix{rows: rows, cols: cols, w: w}, nil
}

// mul returns W x.
func (m matrix) mul(x []float64) []float64 {
	y := make([]float64, m.rows)
	for r := range y {
		row := m.w[r*m.cols : (r+1)*m.cols]
		s := 0.0
		for i, w := range row {
			s += w * x[i]
		}
		y[r] = s
	}
	return y
}

func rmsNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
	return out
}

func addTo(dst, b []float64) {
	for i := range dst {
		dst[i] += b[i]
	}
}

// rope rotates each head of x (nHead heads of hd values) in place at
// position pos, NeoX style: pairs (i, i+hd/2) by angle pos*theta^(-2i/hd).
func rope(x []float64, nHead, hd, pos int, theta float64) {
	half := hd / 2
	for h := 0; h < nHead; h++ {
		v := x[h*hd : (h+1)*hd]
		for i := 0; i < half; i++ {
			ang := float64(pos) * math.Pow(theta, -2*float64(i)/float64(hd))
			c, s := math.Cos(ang), math.Sin(ang)
			a, b := v[i], v[i+half]
			v[i] = a*c - b*s
			v[i+half] = a*s + b*c
		}
	}
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

// Forward returns the logits (NVocab values) of every position of tokens,
// evaluated from an empty context.
func (m *Model) Forward(tokens []int32) ([][]float64, error) {
	return m.forward(tokens, true)
}

// forward returns the logits of every position (all) or of the last only.
func (m *Model) forward(tokens []int32, all bool) ([][]float64, error) {
	hp := m.hp
	if len(tokens) == 0 {
		return nil, fmt.Errorf("oracle: forward of an empty token sequence")
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= hp.NVocab {
			return nil, fmt.Errorf("oracle: token %d at position %d is outside the vocabulary of %d", t, i, hp.NVocab)
		}
	}
	n, e, hd := len(tokens), hp.NEmbd, hp.HeadDim
	eps, theta := float64(hp.RmsEps), float64(hp.RopeTheta)
	group := hp.NHead / hp.NHeadKV
	scale := 1 / math.Sqrt(float64(hd))

	x := make([][]float64, n)
	for p, t := range tokens {
		x[p] = append([]float64(nil), m.embd.w[int(t)*e:(int(t)+1)*e]...)
	}
	for li := range m.layers {
		l := &m.layers[li]
		q := make([][]float64, n)
		k := make([][]float64, n)
		v := make([][]float64, n)
		for p := range x {
			h := rmsNorm(x[p], l.attnNorm, eps)
			q[p], k[p], v[p] = l.wq.mul(h), l.wk.mul(h), l.wv.mul(h)
			if l.bq != nil {
				addTo(q[p], l.bq)
				addTo(k[p], l.bk)
				addTo(v[p], l.bv)
			}
			if l.qNorm != nil {
				for hh := 0; hh < hp.NHead; hh++ {
					copy(q[p][hh*hd:], rmsNorm(q[p][hh*hd:(hh+1)*hd], l.qNorm, eps))
				}
				for hh := 0; hh < hp.NHeadKV; hh++ {
					copy(k[p][hh*hd:], rmsNorm(k[p][hh*hd:(hh+1)*hd], l.kNorm, eps))
				}
			}
			rope(q[p], hp.NHead, hd, p, theta)
			rope(k[p], hp.NHeadKV, hd, p, theta)
		}
		scores := make([]float64, n)
		for p := range x {
			attn := make([]float64, hp.NQ())
			for hh := 0; hh < hp.NHead; hh++ {
				kvh := hh / group
				qh := q[p][hh*hd : (hh+1)*hd]
				maxS := math.Inf(-1)
				for j := 0; j <= p; j++ {
					kh := k[j][kvh*hd : (kvh+1)*hd]
					s := 0.0
					for i := range qh {
						s += qh[i] * kh[i]
					}
					scores[j] = s * scale
					maxS = math.Max(maxS, scores[j])
				}
				sum := 0.0
				for j := 0; j <= p; j++ {
					scores[j] = math.Exp(scores[j] - maxS)
					sum += scores[j]
				}
				out := attn[hh*hd : (hh+1)*hd]
				for j := 0; j <= p; j++ {
					wj := scores[j] / sum
					vh := v[j][kvh*hd : (kvh+1)*hd]
					for i := range out {
						out[i] += wj * vh[i]
					}
				}
			}
			addTo(x[p], l.wo.mul(attn))
		}
		for p := range x {
			h := rmsNorm(x[p], l.ffnNorm, eps)
			g, u := l.gate.mul(h), l.up.mul(h)
			for i := range g {
				g[i] = silu(g[i]) * u[i]
			}
			addTo(x[p], l.down.mul(g))
		}
	}
	if !all {
		x = x[n-1:]
	}
	logits := make([][]float64, len(x))
	for p := range x {
		logits[p] = m.output.mul(rmsNorm(x[p], m.outputNorm, eps))
	}
	return logits, nil
}

// Greedy decodes n tokens after prompt by argmax (lowest id on ties), each
// step a full forward from an empty context; it returns the new ids.
func (m *Model) Greedy(prompt []int32, n int) ([]int32, error) {
	seq := append([]int32(nil), prompt...)
	var out []int32
	for i := 0; i < n; i++ {
		logits, err := m.forward(seq, false)
		if err != nil {
			return nil, err
		}
		last := logits[0]
		best := 0
		for j, v := range last {
			if v > last[best] {
				best = j
			}
		}
		seq = append(seq, int32(best))
		out = append(out, int32(best))
	}
	return out, nil
}

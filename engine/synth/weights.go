package synth

import (
	"encoding/binary"
	"hash/fnv"
	"math"
)

// The weight generator: splitmix64, one stream per (seed, tensor, row), so a
// tensor's values do not depend on the order tensors or rows are produced.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// tensorSeed derives the stream key of one tensor.
func tensorSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix(seed ^ splitmix(h.Sum64()))
}

// invSqrtThird scales a sum of four U(0,1) (variance 1/3) to variance 1.
var irwinScale = float32(math.Sqrt(3))

// dist is how one tensor's values are drawn: Mean + Std*z, z a zero-mean
// unit-variance Irwin-Hall(4) variate (bell-shaped, bounded by 3.46).
type dist struct {
	Mean, Std float32
	// Signed flips the sign of each value at random (Mean is then the mean
	// magnitude).
	Signed bool
}

// fillRow writes row r of a tensor with key k into dst.
func (d dist) fillRow(k uint64, r int, dst []float32) {
	state := splitmix(k ^ (uint64(r)+1)*0xd1b54a32d192ed03)
	for i := range dst {
		state += 0x9e3779b97f4a7c15
		x := state
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
		s := float32(x&0xffff) + float32(x>>16&0xffff) + float32(x>>32&0xffff) + float32(x>>48)
		z := (s*(1.0/65536) - 2) * irwinScale
		v := d.Mean + d.Std*z
		if d.Signed && x&1 != 0 {
			v = -v
		}
		dst[i] = v
	}
}

// f32Bytes encodes values little-endian.
func f32Bytes(v []float32, dst []byte) {
	for i, x := range v {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(x))
	}
}

package quant

import (
	"math"
	"testing"
)

// Every half value must survive f16 -> f32 -> f16 unchanged (NaN payloads aside).
func TestFP16_RoundTripsEveryHalfBitPattern(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := FP16ToFP32(uint16(h))
		if f != f {
			continue
		}
		if got := FP32ToFP16(f); got != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, got)
		}
	}
}

func TestFP32ToFP16_RoundsToNearestEven(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{1 + 1.0/2048, 0x3c00},              // tie, even stays
		{1 + 3.0/2048, 0x3c02},              // tie, odd rounds up
		{65504, 0x7bff},                     // max half
		{65520, 0x7c00},                     // rounds to inf
		{float32(math.Pow(2, -24)), 0x0001}, // smallest subnormal
		{float32(math.Pow(2, -25)), 0x0000}, // tie to even zero
		{-2, 0xc000},
	}
	for _, c := range cases {
		if got := FP32ToFP16(c.in); got != c.want {
			t.Errorf("FP32ToFP16(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestFP32ToBF16_RoundsToNearestEven(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80},
		{0x3f808000, 0x3f80}, // tie, even
		{0x3f818000, 0x3f82}, // tie, odd up
		{0x3f808001, 0x3f81},
		{0x7fc00001, 0x7fc0},
	}
	for _, c := range cases {
		if got := FP32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("FP32ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

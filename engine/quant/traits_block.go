package quant

// blockTraits: F32, F16, BF16 and the 32-value block types (owner: block-format work).
//
// Q8_0 is both a weight type and the activation format of Q4_0, Q5_0 and
// Q8_0; Q8_1 is an activation format only (the one Q4_1 and Q5_1 dot against)
// and has no Dot.
var blockTraits = map[Type]*Traits{
	F32:  {Type: F32, VecDot: F32, Dequantize: dequantizeF32, Quantize: quantizeF32, Dot: dotF32F32},
	F16:  {Type: F16, VecDot: F32, Dequantize: dequantizeF16, Quantize: quantizeF16, Dot: dotF16F32},
	BF16: {Type: BF16, VecDot: F32, Dequantize: dequantizeBF16, Quantize: quantizeBF16, Dot: dotBF16F32},
	Q4_0: {Type: Q4_0, VecDot: Q8_0, Dequantize: dequantizeQ4_0, Quantize: quantizeQ4_0, Dot: dotQ4_0Q8_0},
	Q4_1: {Type: Q4_1, VecDot: Q8_1, Dequantize: dequantizeQ4_1, Quantize: quantizeQ4_1, Dot: dotQ4_1Q8_1},
	Q5_0: {Type: Q5_0, VecDot: Q8_0, Dequantize: dequantizeQ5_0, Quantize: quantizeQ5_0, Dot: dotQ5_0Q8_0},
	Q5_1: {Type: Q5_1, VecDot: Q8_1, Dequantize: dequantizeQ5_1, Quantize: quantizeQ5_1, Dot: dotQ5_1Q8_1},
	Q8_0: {Type: Q8_0, VecDot: Q8_0, Dequantize: dequantizeQ8_0, Quantize: quantizeQ8_0, Dot: dotQ8_0Q8_0},
	Q8_1: {Type: Q8_1, VecDot: Q8_1, Dequantize: dequantizeQ8_1, Quantize: quantizeQ8_1},
}

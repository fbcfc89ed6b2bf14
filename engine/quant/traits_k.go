package quant

// kTraits: the K-quants Q4_K, Q5_K, Q6_K and the Q8_K activation format (owner: K-quant work).
// Q8_K has no Dot (its VecDot names itself): it is only ever the activation
// side of the K-quant dots.
var kTraits = map[Type]*Traits{
	Q4_K: {Type: Q4_K, VecDot: Q8_K, Dequantize: dequantizeQ4K, Quantize: quantizeQ4K, Dot: dotQ4KQ8K},
	Q5_K: {Type: Q5_K, VecDot: Q8_K, Dequantize: dequantizeQ5K, Quantize: quantizeQ5K, Dot: dotQ5KQ8K},
	Q6_K: {Type: Q6_K, VecDot: Q8_K, Dequantize: dequantizeQ6K, Quantize: quantizeQ6K, Dot: dotQ6KQ8K},
	Q8_K: {Type: Q8_K, VecDot: Q8_K, Dequantize: dequantizeQ8K, Quantize: quantizeQ8K},
}

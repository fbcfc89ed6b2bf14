package quant

// kTraits: the K-quants Q4_K, Q5_K, Q6_K and the Q8_K activation format (owner: K-quant work).
var kTraits = map[Type]*Traits{}

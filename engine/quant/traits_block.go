package quant

// blockTraits: F32, F16, BF16 and the 32-value block types (owner: block-format work).
var blockTraits = map[Type]*Traits{}

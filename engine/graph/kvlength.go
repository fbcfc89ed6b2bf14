package graph

// KVLengthSetter is the optional interface of a backend whose kernel choice
// depends on how many KV cells a step's attention reads (the CUDA backend
// routes decode attention by depth: MINFER_ATTN_DECODE_TC_FROM). The
// length is on the device already (the KV window input {start, kv_len},
// which the kernels read, so a captured graph replays at any fill), but a
// backend cannot read it back without a sync; the engine tells it on the
// host, with the same value, before each run.
type KVLengthSetter interface {
	// SetKVLength gives the kv_len of the next run's KV window (cells
	// [0, cells) are attended to at the last query): called before
	// BeginSplit of every split of that run, never inside one.
	SetKVLength(cells int)
}

// SetKVLength tells every backend of the plan that implements
// KVLengthSetter the kv_len of the window the next Run reads: call it
// wherever the KV window input is written. (Idempotent: a backend listed
// twice is told twice.)
func (p *Plan) SetKVLength(cells int) {
	for _, b := range p.backends {
		if s, ok := b.(KVLengthSetter); ok {
			s.SetKVLength(cells)
		}
	}
}

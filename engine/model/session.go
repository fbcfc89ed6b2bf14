package model

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/session"
)

// Session is what a saved session carries besides the engine's context
// (the tokens whose KV cells the engine holds: Tokens).
type Session struct {
	// Pending are the context's tokens after the cached ones, never
	// forwarded: a generation's last sampled token. A run that continues
	// the session forwards them first (before any new prompt), as the run
	// that was never stopped would have.
	Pending []int32
	// Sampler is the sampler's parameters and generator state; nil: none.
	Sampler *session.Sampler
}

// Tokens returns the ids whose cells the KV cache holds, in order (a copy).
func (e *Engine) Tokens() []int32 { return slices.Clone(e.tokens) }

// ModelSHA256 is the sha256 of the model's GGUF file (of its parts, in
// order, for a split model), computed on first use.
func (e *Engine) ModelSHA256() ([32]byte, error) {
	if e.sha != nil {
		return *e.sha, nil
	}
	h := sha256.New()
	for _, p := range e.f.Parts() {
		f, err := os.Open(p)
		if err != nil {
			return [32]byte{}, fmt.Errorf("model sha256: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return [32]byte{}, fmt.Errorf("model sha256: %s: %w", p, err)
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	e.sha = &sum
	return sum, nil
}

// SessionIdentity is what a session this engine saves shares with every
// engine that may restore it: the model, its KV format and context length.
func (e *Engine) SessionIdentity() (session.Identity, error) {
	sum, err := e.ModelSHA256()
	if err != nil {
		return session.Identity{}, err
	}
	return session.Identity{ModelSHA256: sum, Arch: string(e.h.Arch), KVFormat: e.kvFormat, NCtx: e.nCtx,
		NLayer: e.h.NLayer, RowLen: e.h.NKV(), NVocab: e.h.NVocab}, nil
}

// SaveSession writes the engine's context (Tokens and their KV cells, as
// stored in the engine's KV format) and s to path, atomically: a failed
// save leaves what path held untouched. The context is unchanged.
func (e *Engine) SaveSession(path string, s Session) error {
	kc, err := e.kvCells("save")
	if err != nil {
		return err
	}
	id, err := e.SessionIdentity()
	if err != nil {
		return fmt.Errorf("session: save: %w", err)
	}
	tokens := append(e.Tokens(), s.Pending...)
	if len(tokens) > e.nCtx {
		return fmt.Errorf("session: save: %d tokens and %d pending exceed the context of %d", e.pos, len(s.Pending), e.nCtx)
	}
	return session.Write(path, id, session.Contents{Backend: e.Backend(), Tokens: tokens, NKV: e.pos, Sampler: s.Sampler, KV: kc.ReadKVCells})
}

// LoadSession replaces the engine's context with the session saved at
// path and returns what the session carries besides it. The file is
// checked whole before a cell is written: a session of another model, KV
// format or context length, of a newer format version, or a truncated or
// corrupt file is refused (an error wrapping session.ErrRefused that names
// the field) and the context is left as it was. An I/O error while the
// cells are written leaves the context empty.
func (e *Engine) LoadSession(path string) (Session, error) {
	kc, err := e.kvCells("restore")
	if err != nil {
		return Session{}, err
	}
	id, err := e.SessionIdentity()
	if err != nil {
		return Session{}, fmt.Errorf("session: restore: %w", err)
	}
	r, err := session.Open(path, &id)
	if err != nil {
		return Session{}, err
	}
	defer r.Close()
	e.Reset()
	if err := r.ReadKV(kc.WriteKVCells); err != nil {
		e.Reset()
		return Session{}, err
	}
	toks, n := r.Tokens(), r.Header().NKV
	e.tokens, e.pos = append(e.tokens[:0], toks[:n]...), n
	return Session{Pending: slices.Clone(toks[n:]), Sampler: r.Sampler()}, nil
}

// SessionSupport says whether the engine can save and restore sessions:
// nil, or an error naming the KV backend that cannot copy its cells to and
// from the host (a device backend without graph.KVCells).
func (e *Engine) SessionSupport() error {
	_, err := e.kvCells("save or restore")
	return err
}

// kvCells is the KV backend's host copy of cells, or an error naming the
// backend that has none.
func (e *Engine) kvCells(op string) (graph.KVCells, error) {
	b := e.backends[0]
	kc, ok := b.(graph.KVCells)
	if !ok {
		return nil, fmt.Errorf("session: %s: the %s backend cannot copy KV cells to or from the host (it does not implement graph.KVCells)", op, b.Name())
	}
	return kc, nil
}

// FillKVZeros replaces the context with tokens whose KV cells hold zeros
// instead of computed values: the KV length of a long-context benchmark
// without its prefill (minfer bench --fill zeros). Attention reads and
// scores zero K and V rows at the cost of real ones; what follows computes
// meaningless logits. It goes through the KV backend's host copy of cells,
// as LoadSession does; an error leaves the context empty.
func (e *Engine) FillKVZeros(tokens []int32) error {
	kc, err := e.kvCells("zero fill")
	if err != nil {
		return err
	}
	n := len(tokens)
	if n > e.nCtx {
		return fmt.Errorf("zero fill of %d cells: the context holds %d", n, e.nCtx)
	}
	e.Reset()
	rb := kv.RowBytes(e.kvFormat, e.h.NKV())
	chunk := max(1, min(n, (16<<20)/rb)) // cells per copy: at most 16 MiB of zeros
	zeros := make([]byte, chunk*rb)
	for layer := range e.h.NLayer {
		for _, side := range []graph.KVSide{graph.SideK, graph.SideV} {
			for c := 0; c < n; c += chunk {
				if err := kc.WriteKVCells(layer, side, c, zeros[:min(chunk, n-c)*rb]); err != nil {
					return fmt.Errorf("zero fill: layer %d cells %d..: %w", layer, c, err)
				}
			}
		}
	}
	e.tokens, e.pos = append(e.tokens[:0], tokens...), n
	return nil
}

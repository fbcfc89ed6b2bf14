package spec

import "fmt"

// Score evaluates ids from the target's empty context through verify
// forwards, teacher-forced: at each position p the drafter proposes up to K
// tokens after ids[:p+1], the target forwards ids[p] and the drafts in one
// forward (as Step does), the drafts that equal the given ids are kept with
// their rows, and the cells of the rest are cut off again. row receives the
// logits of every position once, in order: each comes from a verify
// forward whose inputs up to that position are ids, so a backend whose
// verify rows equal a plain forward's gives the plain logits (the parity
// gate of MINFER_DRAFT compares exactly that). The counts go to Stats as
// Step's do.
func (d *Decoder) Score(ids []int32, row func(pos int, logits []float32) error) error {
	if pos := d.target.Pos(); pos != 0 {
		return fmt.Errorf("spec: score from a context holding %d tokens (want an empty one)", pos)
	}
	if len(ids) > d.target.NCtx() {
		return fmt.Errorf("spec: %d tokens do not fit the context of %d", len(ids), d.target.NCtx())
	}
	for p := 0; p < len(ids); {
		room := d.target.NCtx() - p
		k := min(d.opts.K, len(ids)-p-1, room-1)
		var drafts []int32
		if k > 0 {
			var err error
			if drafts, err = d.draft.Draft(ids[:p+1], k); err != nil {
				return fmt.Errorf("spec: draft (%s) at position %d: %w", d.draft.Name(), p, err)
			}
			if len(drafts) > k {
				return fmt.Errorf("spec: the drafter %s proposed %d tokens, %d asked", d.draft.Name(), len(drafts), k)
			}
			for i, t := range drafts {
				if t < 0 || int(t) >= d.opts.NVocab {
					drafts = drafts[:i]
					break
				}
			}
		}
		shape := 1
		switch {
		case len(drafts) > 0 && d.opts.FixedShape:
			shape = min(1+d.opts.K, room)
		case len(drafts) > 0:
			shape = 1 + len(drafts)
		}
		d.batch = append(append(d.batch[:0], ids[p]), drafts...)
		for len(d.batch) < shape {
			d.batch = append(d.batch, d.batch[len(d.batch)-1])
		}
		logits, err := d.target.Forward(d.batch, shape > 1)
		if err != nil {
			return fmt.Errorf("spec: verify forward of %d tokens at position %d: %w", shape, p, err)
		}
		if len(logits)%shape != 0 {
			return fmt.Errorf("spec: %d logits for %d positions", len(logits), shape)
		}
		nv := len(logits) / shape
		d.stats.Forwards++
		d.stats.Drafted += len(drafts)
		used := 1
		for used <= len(drafts) && drafts[used-1] == ids[p+used] {
			used++
		}
		d.stats.Accepted += used - 1
		d.stats.Emitted += used
		for j := 0; j < used; j++ {
			if err := row(p+j, logits[j*nv:(j+1)*nv]); err != nil {
				return err
			}
		}
		if err := d.target.Truncate(p + used); err != nil {
			return fmt.Errorf("spec: roll back the rejected drafts: %w", err)
		}
		p += used
	}
	return nil
}

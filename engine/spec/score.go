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
		drafts, logits, nv, err := d.verify(ids, p, min(d.opts.K, len(ids)-p-1, room-1), room)
		if err != nil {
			return err
		}
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

package cpu

import "sync"

// job is a unit of parallel work over an index range. Jobs are structs held
// by the backend, so dispatching one does not allocate.
type job interface {
	// run handles [lo, hi); part is the chunk index (0..parts-1), for
	// per-chunk scratch.
	run(part, lo, hi int)
}

type task struct {
	j            job
	part, lo, hi int
}

// pool runs jobs on a fixed set of worker goroutines. The partition of a range
// depends on the thread count, but every kernel computes each output element
// in exactly one chunk with a fixed reduction order, so results are bitwise
// identical for any thread count.
type pool struct {
	n     int
	tasks chan task
	wg    sync.WaitGroup
	quit  sync.Once
}

func newPool(n int) *pool {
	p := &pool{n: n}
	if n > 1 {
		p.tasks = make(chan task, n)
		for i := 1; i < n; i++ {
			go p.worker()
		}
	}
	return p
}

func (p *pool) worker() {
	for t := range p.tasks {
		t.j.run(t.part, t.lo, t.hi)
		p.wg.Done()
	}
}

// parallel runs j over [0, n) in at most p.n contiguous chunks; chunk 0 runs
// on the caller. minChunk bounds the chunk size from below so tiny ranges do
// not pay for a hand-off.
func (p *pool) parallel(n, minChunk int, j job) {
	parts := p.n
	if minChunk < 1 {
		minChunk = 1
	}
	if m := (n + minChunk - 1) / minChunk; m < parts {
		parts = m
	}
	if parts <= 1 {
		if n > 0 {
			j.run(0, 0, n)
		}
		return
	}
	chunk := (n + parts - 1) / parts
	p.wg.Add(parts - 1)
	for part := 1; part < parts; part++ {
		lo := part * chunk
		hi := min(lo+chunk, n)
		p.tasks <- task{j: j, part: part, lo: min(lo, n), hi: hi}
	}
	j.run(0, 0, min(chunk, n))
	p.wg.Wait()
}

func (p *pool) close() {
	p.quit.Do(func() {
		if p.tasks != nil {
			close(p.tasks)
		}
	})
}

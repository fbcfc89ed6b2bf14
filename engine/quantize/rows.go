package quantize

import (
	"fmt"
	"io"
	"runtime"
)

// chunkBytes is the target output size of one unit of parallel work.
const chunkBytes = 1 << 20

// StreamRows writes nrows rows of rowBytes bytes each to w in row order.
// fill computes rows [first, first+n) into dst (n*rowBytes bytes); up to
// workers fills run at once (0 means GOMAXPROCS), each on its own chunk of
// rows, and at most 2*workers chunks are held in memory. The first error of
// fill or w stops the stream and is returned.
func StreamRows(w io.Writer, nrows, rowBytes, workers int, fill func(first, n int, dst []byte) error) error {
	if nrows < 0 || rowBytes <= 0 {
		return fmt.Errorf("quantize: stream of %d rows of %d bytes", nrows, rowBytes)
	}
	if nrows == 0 {
		return nil
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	per := max(1, chunkBytes/rowBytes)
	nchunks := (nrows + per - 1) / per
	workers = min(workers, nchunks)
	if workers == 1 {
		buf := make([]byte, per*rowBytes)
		for first := 0; first < nrows; first += per {
			n := min(per, nrows-first)
			if err := fill(first, n, buf[:n*rowBytes]); err != nil {
				return err
			}
			if _, err := w.Write(buf[:n*rowBytes]); err != nil {
				return err
			}
		}
		return nil
	}

	jobs := make(chan *chunk)
	defer close(jobs)
	for range workers {
		go func() {
			for c := range jobs {
				c.err = fill(c.first, c.n, c.buf)
				close(c.done)
			}
		}()
	}
	window := 2 * workers
	var free [][]byte
	var pending []*chunk
	next := 0
	for next < nchunks || len(pending) > 0 {
		for next < nchunks && len(pending) < window {
			first := next * per
			n := min(per, nrows-first)
			var buf []byte
			if k := len(free); k > 0 {
				buf, free = free[k-1], free[:k-1]
			} else {
				buf = make([]byte, per*rowBytes)
			}
			c := &chunk{first: first, n: n, buf: buf[:n*rowBytes], done: make(chan struct{})}
			jobs <- c
			pending = append(pending, c)
			next++
		}
		c := pending[0]
		pending = pending[1:]
		<-c.done
		if c.err != nil {
			waitAll(pending)
			return c.err
		}
		if _, err := w.Write(c.buf); err != nil {
			waitAll(pending)
			return err
		}
		free = append(free, c.buf[:cap(c.buf)])
	}
	return nil
}

type chunk struct {
	first, n int
	buf      []byte
	err      error
	done     chan struct{}
}

// waitAll lets the fills in flight finish: they may read memory (a mapped
// input file) that the caller releases once StreamRows returns.
func waitAll(cs []*chunk) {
	for _, c := range cs {
		<-c.done
	}
}

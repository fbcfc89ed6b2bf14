package cuda

import (
	"errors"
	"fmt"
	"time"

	"github.com/minfer-go/minfer/cuda/driver"
)

// Device timing. Every split's device work is bracketed by two events on
// the backend's stream: the start is recorded at BeginSplit (before a
// replay's launch or the first direct launch; on a capturing execution
// before the capture window opens, which happens only at the split's
// Synchronize), the end at Synchronize right before the stream sync (on a
// capturing execution after the window closed and the fresh graph was
// launched). After the sync the elapsed time is added to a running total.
// Two event records per split, events created once, nothing recorded or
// synchronized inside a capture window.
//
// The elapsed time is the stream's timeline between the two records: the
// kernels and any gap in which the stream waited for the host (direct
// launches issued slower than they run; on a capturing execution the host
// recording and instantiating the graph). A replayed split has no such gap.

type deviceTimer struct {
	start, end *driver.Event // nil until the first split
	open       bool          // a start is recorded and its end is not yet
	total      time.Duration
	last       time.Duration // the latest interval (tests)
	splits     int64
}

// events creates the two timing events once. Inside dev.Do, outside any
// capture window.
func (t *deviceTimer) events(dev *driver.Device) error {
	if t.start != nil {
		return nil
	}
	s, err := dev.NewEvent(true)
	if err != nil {
		return fmt.Errorf("device timer: %w", err)
	}
	e, err := dev.NewEvent(true)
	if err != nil {
		return errors.Join(fmt.Errorf("device timer: %w", err), s.Destroy())
	}
	t.start, t.end = s, e
	return nil
}

// begin records the start of a split on s. Inside dev.Do, never inside a
// capture window.
func (t *deviceTimer) begin(dev *driver.Device, s *driver.Stream) error {
	if err := t.events(dev); err != nil {
		return err
	}
	if err := t.start.Record(s); err != nil {
		return fmt.Errorf("device timer: start: %w", err)
	}
	t.open = true
	return nil
}

// mark records the end of the open split on s (no-op without one): the
// last thing queued before the stream sync. Inside dev.Do, outside any
// capture window.
func (t *deviceTimer) mark(s *driver.Stream) error {
	if !t.open {
		return nil
	}
	if err := t.end.Record(s); err != nil {
		t.open = false
		return fmt.Errorf("device timer: end: %w", err)
	}
	return nil
}

// done adds the open split's elapsed time after the stream sync (no-op
// without one). Inside dev.Do.
func (t *deviceTimer) done() error {
	if !t.open {
		return nil
	}
	t.open = false
	d, err := driver.Elapsed(t.start, t.end)
	if err != nil {
		return fmt.Errorf("device timer: %w", err)
	}
	t.total += d
	t.last = d
	t.splits++
	return nil
}

// close destroys the events. Inside dev.Do.
func (t *deviceTimer) close() error {
	var errs []error
	for _, e := range []*driver.Event{t.start, t.end} {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	t.start, t.end, t.open = nil, nil, false
	return errors.Join(errs...)
}

// DeviceTime is the device time of every split this backend executed (and
// of every Delay), measured with CUDA events at the split boundaries. It
// implements model.DeviceClock with Delay.
func (b *Backend) DeviceTime() time.Duration { return b.timer.total }

// TimedSplits is how many splits (and Delays) DeviceTime covers.
func (b *Backend) TimedSplits() int64 { return b.timer.splits }

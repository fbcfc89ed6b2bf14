package cuda

import (
	"errors"
	"fmt"
	"time"

	"github.com/minfer-go/minfer/cuda/driver"
)

// InjectedFailures is how many driver calls MINFER_TEST_CALL_FAIL has
// failed on the backend's device (the call-failure sweep's evidence that
// a failure was reached).
func (b *Backend) InjectedFailures() int64 { return b.dev.InjectedFailures() }

// testSpinKernel (kernels/testseam.cu) busy-waits on %globaltimer: the
// device side of the slow_decode / slow_prefill test seams.
const testSpinKernel = "minfer_test_spin"

// spin queues minfer_test_spin for ns nanoseconds on s. It is not counted
// in the launch census: the census is the evidence of which lever's path
// ran, and a planted slowdown is no path (a census that moved with it
// would make the liveness gate "catch" a timing mutation).
func (k *Kernels) spin(s *driver.Stream, ns uint64) error {
	f, err := k.Function(testSpinKernel)
	if err != nil {
		return err
	}
	if err := f.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, ns); err != nil {
		return fmt.Errorf("test spin of %d ns: %w", ns, err)
	}
	return nil
}

// Delay implements model.DeviceClock: it keeps the device busy for d after
// the work queued so far (one spin kernel), bracketed by the device timer's
// events like a split, so DeviceTime grows by d, and returns after the
// stream has drained, so wall time grows by d too. The engine calls it
// between forwards, never inside a split or a capture window.
func (b *Backend) Delay(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if b.closed {
		return errors.New("cuda: delay: backend is closed")
	}
	if b.cap.recording || b.timer.open {
		return errors.New("cuda: delay inside an open split")
	}
	err := b.dev.Do(func() error {
		if err := b.timer.begin(b.dev, b.s); err != nil {
			return err
		}
		if err := b.k.spin(b.s, uint64(d.Nanoseconds())); err != nil {
			b.timer.open = false
			return err
		}
		return b.syncTimed()
	})
	if err != nil {
		return fmt.Errorf("cuda: delay of %v: %w", d, err)
	}
	return nil
}

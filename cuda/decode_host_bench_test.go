package cuda

import "testing"

// BenchmarkDecodeStep_HostHandoffs times one decode step of qwen2-0.5b Q8_0
// on the CUDA backend as bench's tg loop runs it (engine Forward of one
// token, its graph replayed, the logits read back) and counts the step's
// handoffs to the device thread (driver.Device.Handoffs: each Do that
// crosses threads wakes two). It is a measurement for issue 20's
// small-model decode row, where the H200 showed 0.76 ms of device time in
// ~1.15 ms per token: run it there with
//
//	bin/cuda.test -test.run '^$' -test.bench DecodeStep -test.benchtime 2000x
//
// beside bin/driver.test -test.bench DeviceDo (the cost of one handoff).
func BenchmarkDecodeStep_HostHandoffs(b *testing.B) {
	dsNeedDevice(b)
	path := dsSynth(b, "qwen2-0.5b", "Q8_0")
	e := dsEngine(b, path, "cuda", 8192)
	be := dsDeviceBackend(b, e)
	if _, err := e.Forward(dsPrompt, false); err != nil {
		b.Fatal(err)
	}
	pos, tok := len(dsPrompt), int32(100)
	step := func() {
		if pos >= 8192 {
			b.Fatalf("the context (8192) is full: run at most %d steps (-test.benchtime Nx)", 8192-len(dsPrompt)-8)
		}
		if _, err := e.Forward([]int32{tok}, false); err != nil {
			b.Fatal(err)
		}
		pos, tok = pos+1, tok%30000+1
	}
	for range 8 { // capture the decode graph and replay it a few times
		step()
	}
	h0, n := be.dev.Handoffs(), 0
	for b.Loop() {
		step()
		n++
	}
	b.ReportMetric(float64(be.dev.Handoffs()-h0)/float64(n), "handoffs/step")
}

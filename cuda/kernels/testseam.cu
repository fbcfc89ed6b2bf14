// testseam.cu: the engine's test seam only (MINFER_TEST_MUTATE=slow_decode /
// slow_prefill, cuda/testseam.go). Not an engine op.

// Busy-waits on the global nanosecond timer until ns have passed, so the
// stream's timeline (and the split's device time) grows by ns whatever the
// clocks. One thread is enough: the work queued after it waits on the stream.
extern "C" __global__ void minfer_test_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

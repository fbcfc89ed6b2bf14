// smoke.cu: the driver's device tests only (cuda/driver). Not an engine op.

// y[i] = a * x[i] + y[i] as one fused multiply-add, so the result is fixed
// bit for bit (the tests compare graph replay with direct launches).
extern "C" __global__ void minfer_smoke_axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __fmaf_rn(a, x[i], y[i]);
    }
}

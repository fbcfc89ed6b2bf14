extern "C" __global__ void ka(float* y) { y[threadIdx.x] = 1.0f; }

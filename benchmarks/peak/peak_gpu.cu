// FP32 FMA peak of a CUDA GPU: independent FMA chains per thread, all SMs busy.
// Build and run: nvcc -O3 -arch=sm_90 peak_gpu.cu -o peak_gpu && ./peak_gpu
// Prints one JSON line {"gflops": ..., "sms": ..., "clock_mhz": ...}.
#include <cstdio>
#include <cuda_runtime.h>

constexpr int kChains = 8;     // independent accumulators hide the FMA latency
constexpr int kIters = 4096;   // FMAs per chain

__global__ void fma_peak(float *out, float a, float b) {
  float acc[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc[c] = threadIdx.x + c;
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) acc[c] = fmaf(acc[c], a, b);
  }
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += acc[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the chains alive
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int threads = 256, blocks = prop.multiProcessorCount * 16;
  float *out;
  cudaMalloc(&out, sizeof(float) * threads * blocks);
  fma_peak<<<blocks, threads>>>(out, 0.999f, 0.001f);  // warm up
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  const int reps = 10;
  cudaEventRecord(t0);
  for (int r = 0; r < reps; ++r) fma_peak<<<blocks, threads>>>(out, 0.999f, 0.001f);
  cudaEventRecord(t1);
  cudaEventSynchronize(t1);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, t0, t1);
  double flops = 2.0 * kChains * kIters * double(threads) * blocks * reps;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  printf("{\"gflops\": %.1f, \"sms\": %d, \"clock_mhz\": %d, \"name\": \"%s\"}\n",
         flops / (ms * 1e-3) / 1e9, prop.multiProcessorCount, clock_khz / 1000, prop.name);
  cudaFree(out);
  return 0;
}

// timeline_phases.cu - a persistent multi-phase kernel instrumented with kernelscope's probe
// header; the source of the timeline fixtures. Built three ways by tools/make_timeline_fixtures.py:
//   no probes:       nvcc -O3 -arch=sm_90 -I mcp_server/timeline/include
//   probes:          ... -DKERNELSCOPE_PROBE
//   legacy tags:     ... -DKERNELSCOPE_PROBE -DKERNELSCOPE_PROBE_TAG_LEGACY
//
// One block per SM (cooperative launch, so every block is resident), 256 threads in two
// groups of 128 (ngroups = 2; thread 0 of each group writes). ROUNDS rounds of four phases
// (events 0 load, 1 compute, 2 reduce, 3 store), each followed by a grid barrier; an instant
// (event 4, done) at the end. A phase is a dependent FMA chain whose length is
// base_iters * work[phase][block], so its duration is set by the work table:
//   balanced:   work = {2, 4, 2, 1} for every block
//   imbalanced: compute x4 on blocks 5, 37, 90; reduce x3 on block 17
//
// usage: timeline_phases OUT_DIR BUILD_NAME [reps]
// writes OUT_DIR/<variant>_<build>.bin (probe builds) and prints
//   KS_TIMING <build> <variant> <us> <us> ...   (one kernel time per timed launch, CUDA events)
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernelscope_probe.cuh"

#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__,   \
              __LINE__, cudaGetErrorString(e_));                                        \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

constexpr int kThreads = 256;
constexpr int kGroups = 2;
constexpr int kPhases = 4;
constexpr int kRounds = 3;
constexpr int kEventDone = 4;
// Records per writer: a begin and an end per phase per round, plus one slot for the final
// instant (an instant is written at the writer's next slot, so it needs room too).
constexpr int kRecordsPerWriter = 2 * kPhases * kRounds + 1;

__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* gen, unsigned nblocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* vgen = gen;
    const unsigned g = *vgen;
    __threadfence();
    if (atomicAdd(count, 1u) == nblocks - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(gen, 1u);
    } else {
      while (*vgen == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ __forceinline__ void group_sync(int group) {
  // named barrier per group of 128 threads (id 0 is __syncthreads)
  asm volatile("bar.sync %0, %1;" ::"r"(group + 1), "r"(128) : "memory");
}

__global__ void __launch_bounds__(kThreads) phases_kernel(float* data, const int* work, int base_iters,
                                                          unsigned* bar, uint64_t* probe,
                                                          unsigned long long probe_slots) {
  const unsigned nblocks = gridDim.x;
  const int group = threadIdx.x / 128;
  KS_PROBE_INIT(probe, probe_slots, kGroups, group, (threadIdx.x % 128) == 0);
  float x = data[blockIdx.x * kThreads + threadIdx.x];
  float y = x * 0.5f + 1.0f;
  for (int r = 0; r < kRounds; ++r) {
    for (int p = 0; p < kPhases; ++p) {
      KS_PROBE_BEGIN(p);
      const int iters = base_iters * work[p * nblocks + blockIdx.x];
      for (int i = 0; i < iters; ++i) {
        x = fmaf(x, 0.9999f, 0.0001f);
        y = fmaf(y, 1.0001f, -0.0001f);
      }
      group_sync(group);
      KS_PROBE_END(p);
      grid_barrier(bar, bar + 1, nblocks);
    }
  }
  KS_PROBE_INSTANT(kEventDone);
  data[blockIdx.x * kThreads + threadIdx.x] = x + y;
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s OUT_DIR BUILD_NAME [reps]\n", argv[0]);
    return 2;
  }
  const char* out_dir = argv[1];
  const char* build = argv[2];
  const int reps = argc > 3 ? atoi(argv[3]) : 30;
#if defined(KERNELSCOPE_PROBE)
  const bool probes = true;
#else
  const bool probes = false;
#endif

  int dev = 0, nsm = 0, coop = 0;
  CK(cudaSetDevice(dev));
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, phases_kernel, kThreads, 0));
  if (!coop || per_sm < 1) {
    fprintf(stderr, "cooperative launch unavailable (coop=%d, blocks/SM=%d)\n", coop, per_sm);
    return 1;
  }
  const unsigned nblocks = (unsigned)nsm;  // one block per SM
  printf("KS_INFO build=%s sms=%d blocks=%u threads=%d groups=%d probes=%d\n", build, nsm, nblocks,
         kThreads, kGroups, (int)probes);

  // Inputs: random, not zeros.
  std::vector<float> h(nblocks * kThreads);
  srand(1234);
  for (auto& v : h) v = (float)rand() / RAND_MAX + 0.5f;
  float* d_data = nullptr;
  CK(cudaMalloc(&d_data, h.size() * sizeof(float)));
  unsigned* d_bar = nullptr;
  CK(cudaMalloc(&d_bar, 2 * sizeof(unsigned)));
  CK(cudaMemset(d_bar, 0, 2 * sizeof(unsigned)));

  const int base[kPhases] = {2, 4, 2, 1};
  const int slow_compute[3] = {5, 37, 90};
  const int slow_reduce = 17;
  std::vector<int> w_bal(kPhases * nblocks), w_imb(kPhases * nblocks);
  for (int p = 0; p < kPhases; ++p)
    for (unsigned b = 0; b < nblocks; ++b) w_bal[p * nblocks + b] = w_imb[p * nblocks + b] = base[p];
  for (int s : slow_compute)
    if ((unsigned)s < nblocks) w_imb[1 * nblocks + s] = base[1] * 4;
  if ((unsigned)slow_reduce < nblocks) w_imb[2 * nblocks + slow_reduce] = base[2] * 3;
  int *d_wbal = nullptr, *d_wimb = nullptr;
  CK(cudaMalloc(&d_wbal, w_bal.size() * sizeof(int)));
  CK(cudaMalloc(&d_wimb, w_imb.size() * sizeof(int)));
  CK(cudaMemcpy(d_wbal, w_bal.data(), w_bal.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_wimb, w_imb.data(), w_imb.size() * sizeof(int), cudaMemcpyHostToDevice));

  uint64_t* d_probe = nullptr;
  uint64_t slots = 0;
  CK(kernelscope::probe::alloc_buffer(nblocks, kGroups, kRecordsPerWriter, &d_probe, &slots));
  // A second, deliberately small buffer (room for 5 of 25 records per writer) to exercise the guard.
  uint64_t* d_small = nullptr;
  uint64_t small_slots = 0;
  CK(kernelscope::probe::alloc_buffer(nblocks, kGroups, 5, &d_small, &small_slots));

  int base_iters = 4000;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  struct Variant {
    const char* name;
    int* work;
  } variants[2] = {{"balanced", d_wbal}, {"imbalanced", d_wimb}};

  for (auto& v : variants) {
    std::vector<float> times;
    for (int it = 0; it < reps + 5; ++it) {
      CK(cudaMemcpy(d_data, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
      CK(kernelscope::probe::reset_buffer(d_probe, slots, nblocks, kGroups));
      unsigned long long s = slots;
      void* args[] = {&d_data, &v.work, &base_iters, &d_bar, &d_probe, &s};
      CK(cudaEventRecord(e0));
      CK(cudaLaunchCooperativeKernel((void*)phases_kernel, dim3(nblocks), dim3(kThreads), args, 0, 0));
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 5) times.push_back(ms * 1000.0f);
    }
    printf("KS_TIMING %s %s", build, v.name);
    for (float t : times) printf(" %.3f", t);
    printf("\n");
    printf("KS_INFO %s %s median_us=%.2f\n", build, v.name, median(times));
    if (probes) {
      // the buffer of the last timed launch
      std::vector<uint64_t> hb(slots);
      CK(cudaMemcpy(hb.data(), d_probe, slots * sizeof(uint64_t), cudaMemcpyDeviceToHost));
      char path[1024];
      snprintf(path, sizeof path, "%s/%s_%s.bin", out_dir, v.name, build);
      FILE* f = fopen(path, "wb");
      if (!f || fwrite(hb.data(), sizeof(uint64_t), slots, f) != slots) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
      }
      fclose(f);
      size_t nz = 0;
      for (uint64_t x : hb) nz += x != 0;
      printf("KS_INFO wrote %s slots=%llu nonzero=%zu header=0x%016llx\n", path,
             (unsigned long long)slots, nz, (unsigned long long)hb[0]);
    }
  }

  if (probes) {
    // Overflow: the small buffer holds 5 of the 25 records per writer; the guard must drop the
    // rest and set the header's overflow bit.
    unsigned long long s = small_slots;
    void* args[] = {&d_data, &d_wimb, &base_iters, &d_bar, &d_small, &s};
    CK(cudaLaunchCooperativeKernel((void*)phases_kernel, dim3(nblocks), dim3(kThreads), args, 0, 0));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint64_t> hb(small_slots);
    CK(cudaMemcpy(hb.data(), d_small, small_slots * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    char path[1024];
    snprintf(path, sizeof path, "%s/overflow_%s.bin", out_dir, build);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(hb.data(), sizeof(uint64_t), small_slots, f) != small_slots) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
    fclose(f);
    printf("KS_INFO wrote %s slots=%llu header=0x%016llx\n", path, (unsigned long long)small_slots,
           (unsigned long long)hb[0]);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

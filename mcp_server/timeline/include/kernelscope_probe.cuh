// kernelscope_probe.cuh - in-kernel phase probes for kernelscope's timeline analysis.
//
// Writes the probe-buffer format that `kernelscope timeline analyze` decodes (the same
// layout as FlashInfer's profiler buffers):
//
//   uint64 buf[0]      header: low 32 bits nblocks, high 32 bits ngroups
//                      (bit 63 is set by the bounds guard when a writer ran out of room)
//   uint64 buf[1 + k*nblocks*ngroups + block*ngroups + group]
//                      the k-th record of writer (block, group):
//                      low 32 bits tag, high 32 bits %globaltimer_lo (ns, wraps every ~4.29 s)
//   tag (default)      sm_id<<24 | (block & 0xFFF)<<12 | event<<2 | type
//   tag (legacy, -DKERNELSCOPE_PROBE_TAG_LEGACY)
//                      (block*ngroups + group)<<12 | event<<2 | type
//   type               0 begin, 1 end, 2 instant (an instant does not advance the writer,
//                      so only the last instant before the next record survives)
//
// Everything compiles to nothing unless KERNELSCOPE_PROBE is defined, so the probes can
// stay in the source. Usage (one writer thread per block and group):
//
//   #include "kernelscope_probe.cuh"
//   __global__ void k(..., uint64_t* probe_buf, uint32_t probe_slots) {
//     KS_PROBE_INIT(probe_buf, probe_slots, /*ngroups=*/1, /*group=*/0, threadIdx.x == 0);
//     KS_PROBE_BEGIN(0);  ...work...;  __syncthreads();  KS_PROBE_END(0);
//   }
//   host: ks_probe_alloc(nblocks, ngroups, records_per_writer, &buf, &slots);  // sized, zeroed
//
// probe_slots is the buffer's length in uint64 slots; pass 0 to switch the bounds guard off
// at run time, or define KERNELSCOPE_PROBE_NO_GUARD to compile it out. With the guard on, a
// writer whose next slot lies past the end writes nothing and sets bit 63 of the header, which
// the decoder reports as an overflow warning.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <stdint.h>
#include <cuda_runtime.h>
#endif

namespace kernelscope {
namespace probe {

#if defined(__CUDACC_RTC__)
// NVRTC has no <stdint.h> without the toolkit's include path: the two widths the probes use, inside this
// namespace so that they cannot clash with a global definition the including program may have
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#endif

constexpr uint32_t kBegin = 0u;
constexpr uint32_t kEnd = 1u;
constexpr uint32_t kInstant = 2u;
constexpr uint32_t kEventShift = 2u;
constexpr uint32_t kEventMask = 0x3FFu;  // 10 bits of event id
constexpr uint32_t kBlockShift = 12u;
constexpr uint32_t kSmShift = 24u;
constexpr uint64_t kOverflowBit = 1ull << 63;

// Slots a buffer needs: the header plus `records_per_writer` rounds of every writer.
// Count a begin and an end as two records; instants need no room of their own except
// when they are the last thing a writer records.
inline __host__ __device__ uint64_t buffer_slots(uint32_t nblocks, uint32_t ngroups,
                                                 uint32_t records_per_writer) {
  return 1ull + (uint64_t)nblocks * ngroups * records_per_writer;
}

inline __host__ __device__ uint64_t header_word(uint32_t nblocks, uint32_t ngroups) {
  return (uint64_t)nblocks | ((uint64_t)ngroups << 32);
}

struct Writer {
  uint64_t* buf;      // slot 0 of the buffer
  uint64_t pos;       // slot the next record goes to
  uint64_t cap;       // buffer length in slots (0: unchecked)
  uint32_t stride;    // nblocks * ngroups
  uint32_t tag_base;  // sm / block bits of every tag this writer makes
  bool active;        // only the writer thread of a (block, group) records
};

__device__ __forceinline__ uint32_t timer_lo() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t) : : "memory");
  return t;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ uint32_t linear_block() {
  return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}

__device__ __forceinline__ uint32_t grid_blocks() { return gridDim.x * gridDim.y * gridDim.z; }

__device__ __forceinline__ void init(Writer& w, uint64_t* buf, uint64_t cap_slots, uint32_t ngroups,
                                     uint32_t group, bool is_writer) {
  const uint32_t nblocks = grid_blocks();
  const uint32_t block = linear_block();
  const uint32_t lane = block * ngroups + group;
  w.buf = buf;
  w.cap = cap_slots;
  w.stride = nblocks * ngroups;
  w.pos = 1ull + lane;
#if defined(KERNELSCOPE_PROBE_TAG_LEGACY)
  w.tag_base = lane << kBlockShift;
#else
  w.tag_base = (sm_id() << kSmShift) | ((block & 0xFFFu) << kBlockShift);
#endif
  w.active = is_writer && buf != nullptr;
  if (w.active && lane == 0) {
    // Same value the host helper writes; keeps a buffer valid when only zeroed on the host.
    // atomicOr keeps an overflow bit another writer may already have set.
    atomicOr(reinterpret_cast<unsigned long long*>(buf),
             (unsigned long long)header_word(nblocks, ngroups));
  }
}

__device__ __forceinline__ void put(Writer& w, uint32_t event, uint32_t type, bool advance) {
  if (!w.active) return;
#if !defined(KERNELSCOPE_PROBE_NO_GUARD)
  if (w.cap != 0 && w.pos >= w.cap) {
    atomicOr(reinterpret_cast<unsigned long long*>(w.buf), (unsigned long long)kOverflowBit);
    return;
  }
#endif
  const uint32_t tag = w.tag_base | ((event & kEventMask) << kEventShift) | type;
  const uint32_t t = timer_lo();
  w.buf[w.pos] = ((uint64_t)t << 32) | tag;
  if (advance) w.pos += w.stride;
}

__device__ __forceinline__ void begin(Writer& w, uint32_t event) { put(w, event, kBegin, true); }
__device__ __forceinline__ void end(Writer& w, uint32_t event) { put(w, event, kEnd, true); }
__device__ __forceinline__ void instant(Writer& w, uint32_t event) { put(w, event, kInstant, false); }

#if !defined(__CUDACC_RTC__)
// Host helper: zero a buffer (all records and the overflow bit) and write its header.
// Call before every launch that records into it.
inline cudaError_t reset_buffer(uint64_t* buf, uint64_t slots, uint32_t nblocks, uint32_t ngroups,
                                cudaStream_t stream = 0) {
  cudaError_t e = cudaMemsetAsync(buf, 0, slots * sizeof(uint64_t), stream);
  if (e != cudaSuccess) return e;
  e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return e;
  const uint64_t header = header_word(nblocks, ngroups);
  return cudaMemcpy(buf, &header, sizeof(uint64_t), cudaMemcpyHostToDevice);
}

// Host helper: allocate a probe buffer sized for `records_per_writer` records of every
// (block, group) writer, zeroed and with its header written.
inline cudaError_t alloc_buffer(uint32_t nblocks, uint32_t ngroups, uint32_t records_per_writer,
                                uint64_t** out_buf, uint64_t* out_slots, cudaStream_t stream = 0) {
  const uint64_t slots = buffer_slots(nblocks, ngroups, records_per_writer);
  uint64_t* buf = nullptr;
  cudaError_t e = cudaMalloc(&buf, slots * sizeof(uint64_t));
  if (e != cudaSuccess) return e;
  e = reset_buffer(buf, slots, nblocks, ngroups, stream);
  if (e != cudaSuccess) {
    cudaFree(buf);
    return e;
  }
  *out_buf = buf;
  *out_slots = slots;
  return cudaSuccess;
}
#endif

}  // namespace probe
}  // namespace kernelscope

// The macros: the only part a kernel needs. Without KERNELSCOPE_PROBE they expand to nothing.
#if defined(KERNELSCOPE_PROBE)
#define KS_PROBE_INIT(buf, slots, ngroups, group, is_writer) \
  ::kernelscope::probe::Writer ks_probe_writer_;             \
  ::kernelscope::probe::init(ks_probe_writer_, (buf), (slots), (ngroups), (group), (is_writer))
#define KS_PROBE_BEGIN(event) ::kernelscope::probe::begin(ks_probe_writer_, (event))
#define KS_PROBE_END(event) ::kernelscope::probe::end(ks_probe_writer_, (event))
#define KS_PROBE_INSTANT(event) ::kernelscope::probe::instant(ks_probe_writer_, (event))
#else
#define KS_PROBE_INIT(buf, slots, ngroups, group, is_writer) \
  do {                                                       \
  } while (0)
#define KS_PROBE_BEGIN(event) \
  do {                        \
  } while (0)
#define KS_PROBE_END(event) \
  do {                      \
  } while (0)
#define KS_PROBE_INSTANT(event) \
  do {                          \
  } while (0)
#endif

// KV cache elements: a pool holds K and V rows as float32, or as IEEE
// float16 (kernels.KVSpec.Half: half the memory, half the bytes a long
// context's decode reads). The attention kernels are templates over the
// element type T, and read and write the cache only through these
// overloads, so that one body serves both pools. A float16 pool rounds a
// row to nearest-even when it is stored and widens it exactly when it is
// read, as the CPU backend's half pools do (kernels/cpu/kvpool.go), and
// the newest position, which the decode kernels use from registers, is
// rounded the same way first: so a step sees the cache a later step reads
// back.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float kvLd(const float* p) { return *p; }
__device__ __forceinline__ float kvLd(const __half* p) { return __half2float(*p); }

__device__ __forceinline__ void kvSt(float* p, float v) { *p = v; }
__device__ __forceinline__ void kvSt(__half* p, float v) { *p = __float2half_rn(v); }

// kvLd2 / kvLd4 load 2 or 4 consecutive elements (aligned to their size).
__device__ __forceinline__ float2 kvLd2(const float* p) { return *(const float2*)p; }
__device__ __forceinline__ float2 kvLd2(const __half* p) { return __half22float2(*(const __half2*)p); }

__device__ __forceinline__ float4 kvLd4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ float4 kvLd4(const __half* p) {
    uint2 u = *(const uint2*)p;
    float2 a = __half22float2(*(const __half2*)&u.x), b = __half22float2(*(const __half2*)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

// Raw loads: a row's elements as stored, widened only where they are used
// (kvWiden4, KVRow::at). Kernels load a batch of rows under conditions (a
// position past the context, a row past the tile); where the widening
// sat right after each load, inside the condition's branch, ptxas made
// every load wait for its data before the next branch issued its own:
// the first float16 build of attn_decode decoded at an 8000-position
// context at 125 tok/s against 205 with float32 rows (Llama-3-8B, H200).
template <class KT>
struct KVRaw4 {
    using type = float4;
};
template <>
struct KVRaw4<__half> {
    using type = uint2;
};
__device__ __forceinline__ float4 kvRaw4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ uint2 kvRaw4(const __half* p) { return *(const uint2*)p; }
__device__ __forceinline__ float4 kvWiden4(float4 r) { return r; }
__device__ __forceinline__ float4 kvWiden4(uint2 u) {
    float2 a = __half22float2(*(const __half2*)&u.x), b = __half22float2(*(const __half2*)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}

// KVRow holds a lane's E consecutive elements of a cache row in registers
// as stored (E/2 words for float16), loaded by load and read by at.
template <class KT, int E>
struct KVRow {
    float v[E];
    __device__ __forceinline__ void load(const float* p) {
        if constexpr (E == 2) {
            float2 a = *(const float2*)p;
            v[0] = a.x, v[1] = a.y;
        } else {
#pragma unroll
            for (int i = 0; i < E / 4; i++) {
                float4 a = *(const float4*)(p + 4 * i);
                v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
            }
        }
    }
    __device__ __forceinline__ float at(int e) const { return v[e]; }
    __device__ __forceinline__ void put(int e, float x) { v[e] = x; }
};
template <int E>
struct KVRow<__half, E> {
    uint32_t w[E / 2];
    __device__ __forceinline__ void load(const __half* p) {
        if constexpr (E == 2) {
            w[0] = *(const uint32_t*)p;
        } else if constexpr (E == 4) {
            uint2 a = *(const uint2*)p;
            w[0] = a.x, w[1] = a.y;
        } else {
#pragma unroll
            for (int i = 0; i < E / 8; i++) {
                uint4 a = *(const uint4*)(p + 8 * i);
                w[4 * i] = a.x, w[4 * i + 1] = a.y, w[4 * i + 2] = a.z, w[4 * i + 3] = a.w;
            }
        }
    }
    __device__ __forceinline__ float at(int e) const {
        uint32_t x = w[e >> 1];
        return __half2float(__ushort_as_half((unsigned short)(e & 1 ? x >> 16 : x & 0xffffu)));
    }
    // put stores x rounded to float16, as a store to the cache would.
    __device__ __forceinline__ void put(int e, float x) {
        uint32_t h = __half_as_ushort(__float2half_rn(x));
        w[e >> 1] = e & 1 ? (w[e >> 1] & 0xffffu) | h << 16 : (w[e >> 1] & 0xffff0000u) | h;
    }
};

// Package cuda is the NVIDIA GPU Backend (build tag `cuda`): weights are
// uploaded once in their stored format (bf16, f16, f32, FP8 E4M3 with
// block scales — never a widened copy), activations and the paged KV pool
// are float32 in device memory, and every op is a kernel from kernels.cu,
// compiled to compute_90 PTX and embedded, except the bf16 prefill GEMMs,
// which go to cuBLASLt (loaded with dlopen; cublaslt.go) when the host has
// it, with the activations rounded to bf16 on the device. It links gorgonia.org/cu, whose
// init exits on a host without a driver, so only the GPU rank binary
// (cmd/pocket-worker) imports it; without the tag this package is empty.
//
// Threading: a CUDA context is current per OS thread. Every Backend method
// takes the backend's mutex, pins the calling goroutine to its OS thread
// for the duration of the call and makes the context current there, so one
// caller at a time drives the GPU from whatever goroutine it runs on. We
// chose this over marshalling each op to a dedicated goroutine because a
// hand-off costs a thread wake-up (several µs) per op, more than most
// decode kernels run; with the lock, an op is one cgo call. A decode step is
// replayed as one CUDA graph (Graph) anyway, so the launch path matters
// only for prefill and for eager steps.
package cuda

//go:generate nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o kernels.ptx kernels.cu

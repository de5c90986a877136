// Package models owns everything between a checkpoint on disk and a
// forward pass: config parsing, the weight Source abstraction (safetensors
// and GGUF loaders live in subpackages), the architecture registry, and one
// file per architecture built over the shared transformer builders in
// transformer.go. Model code calls kernels.Backend ops only.
package models

// Package asmcheck holds the repository's checks on its hand-written
// amd64 assembly (kernels/cpu, kernels/quant, internal/vmath). It has no
// code of its own: its test assembles every *_amd64.s file with the Go
// assembler and reads the listing.
package asmcheck

package kernels

// Capabilities answers "which weight formats can backend X execute"
// without linking that backend: pocketd (no cgo) reports CUDA support in
// `pocketd inspect` from this table, and the CUDA backend's own tests
// check that its LoadWeight agrees with it, so the two cannot drift.
var capabilities = map[string]func(DType) bool{
	"cpu": func(d DType) bool { return d.Valid() },
	"cuda": func(d DType) bool {
		// Stored formats, and every GGUF block format: each has GEMV,
		// Embed and prefill kernels in kernels/cuda/quant.cu (the IQ1..IQ3
		// lattice formats in quant_iq.cuh).
		switch d {
		case F32, F16, BF16, F8E4M3,
			Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4,
			IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S:
			return true
		}
		return false
	},
}

// Executes reports whether the named backend can run MatMul/Embed on
// weights stored as d.
func Executes(backend string, d DType) bool {
	f, ok := capabilities[backend]
	return ok && f(d)
}

// BackendNames lists the backends the capability table knows.
func BackendNames() []string { return []string{"cpu", "cuda"} }

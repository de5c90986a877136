package kernels

// Collective is the communication one rank of a tensor-parallel group
// needs. A sharding plan (models.Plan) calls it where a row-split
// projection leaves each rank with a partial sum: after the attention
// output projection, after the MLP (or expert) down projection, and to
// assemble the vocabulary-parallel logits. Backends that run on one device
// never see it; a device backend's implementation (NCCL for CUDA) queues
// the operation on the rank's stream, in order with the ops around it, so
// it can be captured into a decode graph like any kernel.
type Collective interface {
	// AllReduceSum replaces the first n elements of buf, on every rank of
	// the group, by their sum over the ranks. Every rank must call it with
	// the same n in the same order. An error means the group is broken
	// (a failed or timed-out peer): the model must be rebuilt.
	AllReduceSum(buf Buf, n int) error
}

// AllReduceAdder is an optional extension of Collective: acc += the sum of
// buf over the ranks, as one step where the transport can (tensor-parallel
// decode adds each row-split projection's summed partials to the
// replicated residual right after the all-reduce). It reports whether it
// did; false (no error) means nothing was done and the caller runs
// AllReduceSum and an Add, which compute the same values. Every rank must
// get the same answer for the same n.
type AllReduceAdder interface {
	AllReduceSumAdd(acc, buf Buf, n int) (bool, error)
}

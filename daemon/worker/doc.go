// Package worker runs a model in a separate rank process (cmd/pocket-worker
// serve-rank), or in the N rank processes of a tensor-parallel group, and
// drives it from pocketd: the wire protocol, the daemon-side Proxy that
// implements session.Runner and kernels.KVOps over it, the supervision
// that restarts a lost worker (rebuilds a group), and the rank side's
// server loop (ServeRank), which any kernels.Backend can run behind.
//
// # Protocol
//
// One stream socket per rank (a socketpair; the worker gets its end as
// fd 3). Every message is a frame: a 9-byte header — payload length
// (uint32), message type (uint8), request id (uint32), all little-endian —
// then the payload. The daemon sends one request at a time and waits for
// its reply, which carries the same id. Payloads are sequences of
// little-endian fixed-width integers, length-prefixed strings and
// length-prefixed int32/float32 arrays (see codec.go).
//
//	daemon → worker                      worker → daemon
//	Hello{version, backend, device,      Ready{version, config JSON, KV shape,
//	      threads, model, KV pool spec,        recurrent, EOS ids, weight bytes,
//	      ...                                  shared, state length}
//	      rank, world, rendezvous dir,
//	      join and collective timeouts}
//	NewKVPool{spec}                      OK
//	Forward{state, start, want,          Logits{float32[]} (empty for NoLogits)
//	        tokens, table}
//	ForwardArgmax{same, want=Last}       Token{int32}: the argmax of the last
//	                                           token's logits (session.Argmax)
//	ForwardSample{same, want=Last,       Token{int32}: the token drawn from the
//	        temperature, top-k, top-p,         last token's logits, changed by
//	        min-p, u, next, adjust}            adjust, with u (session.Drawer)
//	CopyKVBlock{dst, src}                OK
//	ReadKVBlock{block}                   Block{float32[]}
//	WriteKVBlock{block, float32[]}       OK
//	Ping                                 OK
//	NewState{id}, CloneState{src, dst},  OK
//	ResetState{id}, FreeStates{ids}
//	SnapshotState{id}                    Block{float32[]} / BlockShared{ref}
//	RestoreState{id, pos, float32[]}     OK
//	HoldState{src, dst, reserve}         OK{held}: a clone kept on the device
//	                                     (a held snapshot, state_held.go), or
//	                                     declined where memory is short
//	CopyState{src, dst}                  OK (a held snapshot restored)
//	                                     Error{code, message} for any request
//
// Greedy generations (no penalties, no logprobs) step with ForwardArgmax
// (session.GreedyRunner): the rank computes the argmax from its logits,
// with the session's tie rule (the lowest index), so the daemon gets 4
// bytes per token instead of the vocabulary's floats. After answering one
// the rank runs the step a continuing generation asks for next (the
// answered token at the next position) before it reads the next request,
// and answers that request from it; any other request drops the guess
// (rank_ahead.go; RankOptions.NoLookahead, POCKET_LOOKAHEAD=0 off).
// Sampled generations without a constraint or logprobs step alike with
// ForwardSample (session.SamplingRunner): the request carries the
// sampler's rule, its uniform variates for this step and the next, and
// the step's penalties and logit bias as a list of changed logits
// (session.Adjust), so the rank draws the token itself and runs the next
// step ahead with the second (a penalised draw waits for its request,
// whose Adjust counts the token before it: only a replay, which keeps its
// logits, is run ahead for one).
//
// Single-token steps (ForwardArgmax, and Forward of the last logits) are
// replayed as recorded graphs when the backend can record them
// (RankOptions.Graphs: CUDA graphs), one recording per block-table length
// bucket, and for hybrid models per recurrent state as well (graphs.go);
// a greedy step then takes its argmax on the device
// and reads back one int32. Other steps, and every step after a recording
// failed, run eagerly.
//
// Shared memory: each rank gets a memfd region (Options.SharedBytes,
// default 64 MiB; sealed against resizing) as fd 4, whose size the Hello
// gives; the worker maps it and says so in Ready. Then bulk data that
// fits travels there and frames carry {offset u64, count u32} instead:
// WriteKVBlockShared{block, ref} (the daemon pwrites the block first),
// BlockShared{ref} and LogitsShared{ref} replies (the daemon preads
// them, after checking the reference lies inside the region). Data that
// does not fit, or a worker without the region, uses the inline frames
// above. One request at a time per rank keeps the region free between
// them. A reference outside the region is a malformed frame: the worker
// is lost. A worker holds one KV pool; the Hello of a restarted
// worker carries its spec so the pool comes back with the process.
//
// # Tensor-parallel groups
//
// With Options.World = N the supervisor starts N serve-rank processes
// (rank r on Options.Devices[r]) and makes a private rendezvous directory
// (mode 0700, a new one per generation, removed with the group) that it
// names in every rank's Hello. The ranks join each other there before
// loading: CPU ranks connect to rank 0's Unix socket (cpu.Group, a
// float32 sum with a deadline per all-reduce); CUDA ranks get the NCCL
// unique id that rank 0 makes and writes there (the daemon links no
// NCCL), then join the communicator. Each rank loads only its shard
// (models.NewRank with its Plan) and allocates only its KV heads. Every
// request goes to every rank alike, sent and answered concurrently (a
// rank blocks in its collectives until all have the request); rank 0
// returns the logits, the others empty lists. To the cache a group's KV
// block is the ranks' blocks one after the other, so ReadKVBlock
// concatenates them and WriteKVBlock splits them. A rank whose collective
// fails or times out answers a fatal Error and exits.
//
// # Failure
//
// A worker that exits, hangs past the request timeout, or sends a frame
// that does not decode is lost: the Proxy kills it, its calls return an
// error wrapping ErrWorkerLost, and the supervisor starts a new process,
// repeats the handshake and reallocates the pool. In a group, the loss of
// any rank (or ranks that disagree on a reply) loses the whole group: all
// ranks are killed and a new group, with a new rendezvous, is started. The first Forward after
// a loss returns an error that also wraps session.ErrKVLost, so the
// scheduler drops all KV and recomputes it from the durable token
// histories.
//
// # Recurrent state
//
// Hybrid models (Gated DeltaNet layers: qwen3_5, qwen3_next) keep a
// per-sequence recurrent state besides the KV. It stays in the worker,
// under an id the daemon picks (never reused), and Forward requests name
// it (0: none); the Proxy's NewState returns a handle that implements
// models.RecurrentState over the state requests above (state.go), so the
// session's snapshots, restores and clones work as on the CPU. A handle
// is allocated in the worker on first use; the session frees the handles
// it drops (batched into the next request; a cleanup is the backstop).
// A worker restart loses every state: a handle of an older generation is
// never sent again, and a Forward with it reports session.ErrKVLost, so
// the scheduler recomputes from the token histories. On a
// tensor-parallel group each rank holds its heads' share of every state
// under the same id; snapshots are the ranks' shares in rank order.
// Hybrids' steps run eagerly (no recorded graphs).
package worker

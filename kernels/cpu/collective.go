package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrGroupBroken is wrapped by every error of a Group after its first
// failure (a peer gone, a deadline missed, a peer that disagrees): the
// group cannot be used again and must be rebuilt.
var ErrGroupBroken = errors.New("cpu tensor-parallel group broken")

// GroupSocket is the name of rank 0's Unix socket inside the rendezvous
// directory.
const GroupSocket = "cpu-group.sock"

// Group is kernels.Collective for CPU rank processes of one
// tensor-parallel group (the CPU counterpart of an NCCL communicator, so
// that the whole multi-process path runs without a GPU). The ranks meet
// in a rendezvous directory that only they can reach: rank 0 listens on
// GroupSocket there, ranks 1..N-1 connect and say who they are. An
// all-reduce is a star through rank 0: every other rank sends its part,
// rank 0 adds the parts in rank order (0 + p0 + p1 + …, so every rank
// gets the same bits however the messages arrive) and sends the sum
// back. Every all-reduce has a deadline: a peer that is stopped, hung or
// gone makes it fail with ErrGroupBroken instead of hanging, and the
// failure closes the group's sockets so that the other ranks fail at
// once too.
type Group struct {
	be          kernels.Backend
	rank, world int
	timeout     time.Duration
	peers       []net.Conn // rank 0: peers[r] for r ≥ 1; other ranks: peers[0] is rank 0

	mu   sync.Mutex
	err  error
	seq  uint32
	part []float32
	sum  []float32
	hdr  [8]byte
}

var _ kernels.Collective = (*Group)(nil)

const groupMagic = 0x50545047 // "GPTP"

// JoinGroup joins rank of a group of world ranks meeting in dir. It
// returns once every rank has joined, or fails after join. Each
// all-reduce must complete within timeout. be reads and writes the
// buffers being reduced.
func JoinGroup(be kernels.Backend, dir string, rank, world int, join, timeout time.Duration) (*Group, error) {
	if world < 2 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("cpu group: rank %d of %d", rank, world)
	}
	if timeout <= 0 || join <= 0 {
		return nil, fmt.Errorf("cpu group: timeouts must be positive")
	}
	g := &Group{be: be, rank: rank, world: world, timeout: timeout}
	path := filepath.Join(dir, GroupSocket)
	deadline := time.Now().Add(join)
	var err error
	if rank == 0 {
		err = g.accept(path, deadline)
	} else {
		err = g.connect(path, deadline)
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("cpu group rank %d of %d in %s: %w", rank, world, dir, err)
	}
	return g, nil
}

// accept is rank 0's side of the join: one connection from every other
// rank, each introduced by (magic, rank, world).
func (g *Group) accept(path string, deadline time.Time) error {
	os.Remove(path) // a leftover of an earlier group in the same directory
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer ln.Close()
	ln.(*net.UnixListener).SetDeadline(deadline)
	g.peers = make([]net.Conn, g.world)
	for joined := 1; joined < g.world; {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("waiting for %d more ranks: %w", g.world-joined, err)
		}
		c.SetDeadline(deadline)
		var h [12]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			c.Close()
			continue // not a rank (or one that gave up): keep waiting
		}
		r, w := int(binary.LittleEndian.Uint32(h[4:])), int(binary.LittleEndian.Uint32(h[8:]))
		if binary.LittleEndian.Uint32(h[:]) != groupMagic || w != g.world || r < 1 || r >= g.world || g.peers[r] != nil {
			c.Close()
			return fmt.Errorf("a peer introduced itself as rank %d of %d", r, w)
		}
		if _, err := c.Write([]byte{1}); err != nil {
			c.Close()
			return err
		}
		c.SetDeadline(time.Time{})
		g.peers[r] = c
		joined++
	}
	return nil
}

// connect is the side of ranks 1..N-1: dial rank 0 (retrying until it
// listens), introduce ourselves and wait for its acknowledgement.
func (g *Group) connect(path string, deadline time.Time) error {
	for {
		c, err := net.DialTimeout("unix", path, time.Until(deadline))
		if err == nil {
			c.SetDeadline(deadline)
			var h [12]byte
			binary.LittleEndian.PutUint32(h[:], groupMagic)
			binary.LittleEndian.PutUint32(h[4:], uint32(g.rank))
			binary.LittleEndian.PutUint32(h[8:], uint32(g.world))
			var ack [1]byte
			if _, err = c.Write(h[:]); err == nil {
				_, err = io.ReadFull(c, ack[:])
			}
			if err != nil {
				c.Close()
				return fmt.Errorf("joining rank 0: %w", err)
			}
			c.SetDeadline(time.Time{})
			g.peers = []net.Conn{c}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rank 0 never listened: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Rank and World place the group member.
func (g *Group) Rank() int  { return g.rank }
func (g *Group) World() int { return g.world }

// Err is the failure that broke the group, nil while it works.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Close closes the group's sockets; the peers' next (or current)
// all-reduce fails.
func (g *Group) Close() error {
	for _, c := range g.peers {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

// AllReduceSum implements kernels.Collective: the first n floats of buf
// become their sum over the group, on every rank, bit-identical.
func (g *Group) AllReduceSum(buf kernels.Buf, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	if n <= 0 {
		return nil
	}
	if cap(g.part) < n {
		g.part, g.sum = make([]float32, n), make([]float32, n)
	}
	part, sum := g.part[:n], g.sum[:n]
	g.be.Read(buf, 0, part)
	g.seq++
	deadline := time.Now().Add(g.timeout)
	for _, c := range g.peers {
		if c != nil {
			c.SetDeadline(deadline)
		}
	}
	var err error
	if g.rank == 0 {
		err = g.reduce(part, sum)
	} else {
		err = g.contribute(part, sum)
	}
	if err != nil {
		g.err = fmt.Errorf("%w: rank %d of %d, all-reduce %d of %d floats: %w", ErrGroupBroken, g.rank, g.world, g.seq, n, err)
		g.Close()
		return g.err
	}
	g.be.Write(buf, 0, sum)
	return nil
}

// reduce is rank 0's part: read every peer's part in rank order, add it,
// send the sum to all.
func (g *Group) reduce(part, sum []float32) error {
	n := len(part)
	clear(sum)
	for i, v := range part {
		sum[i] += v
	}
	for r := 1; r < g.world; r++ {
		c := g.peers[r]
		if err := g.readHeader(c, n); err != nil {
			return fmt.Errorf("from rank %d: %w", r, err)
		}
		if _, err := io.ReadFull(c, f32bytes(part)); err != nil {
			return fmt.Errorf("from rank %d: %w", r, err)
		}
		for i, v := range part {
			sum[i] += v
		}
	}
	for r := 1; r < g.world; r++ {
		if err := g.send(g.peers[r], sum); err != nil {
			return fmt.Errorf("to rank %d: %w", r, err)
		}
	}
	return nil
}

// contribute sends this rank's part to rank 0 and reads the sum back.
func (g *Group) contribute(part, sum []float32) error {
	c := g.peers[0]
	if err := g.send(c, part); err != nil {
		return fmt.Errorf("to rank 0: %w", err)
	}
	if err := g.readHeader(c, len(sum)); err != nil {
		return fmt.Errorf("from rank 0: %w", err)
	}
	if _, err := io.ReadFull(c, f32bytes(sum)); err != nil {
		return fmt.Errorf("from rank 0: %w", err)
	}
	return nil
}

// Every message is (sequence number, count) then count floats; both must
// match: ranks that disagree on the order of collectives break the group.
func (g *Group) send(c net.Conn, v []float32) error {
	binary.LittleEndian.PutUint32(g.hdr[:], g.seq)
	binary.LittleEndian.PutUint32(g.hdr[4:], uint32(len(v)))
	bufs := net.Buffers{g.hdr[:], f32bytes(v)}
	_, err := bufs.WriteTo(c)
	return err
}

func (g *Group) readHeader(c net.Conn, n int) error {
	var h [8]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return err
	}
	seq, cnt := binary.LittleEndian.Uint32(h[:]), int(binary.LittleEndian.Uint32(h[4:]))
	if seq != g.seq || cnt != n {
		return fmt.Errorf("peer is at all-reduce %d of %d floats", seq, cnt)
	}
	return nil
}

// f32bytes views floats as their in-memory (little-endian on every
// platform pocketd runs on) bytes.
func f32bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*4)
}

package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestConcurrentSessions: many goroutines generate on many sessions at
// once (and some share a session); every session ends up with exactly the
// tokens a lone cold decode gives, events arrive in order and unmixed.
func TestConcurrentSessions(t *testing.T) {
	model := loadFixture(t, "qwen3")
	// A small pool forces eviction of other sessions' KV while they run.
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model, KVBlocks: 12, HostTierBytes: 1 << 20})
	const sessions, perSession, steps = 6, 2, 5
	prompts := make([][]int32, sessions)
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = mustOpen(t, m, "qwen3")
		prompts[i] = prompt(20+3*i, int32(i))
		mustAppend(t, m, ids[i], prompts[i])
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*perSession+3)
	for i := range sessions {
		for range perSession {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var streamed []int32
				res, err := m.Generate(context.Background(), 1, ids[i], GenerateParams{MaxTokens: steps},
					func(ev TokenEvent) error { streamed = append(streamed, ev.ID); return nil })
				if err == nil && !slices.Equal(streamed, res.IDs) {
					err = fmt.Errorf("session %d: streamed %v, result %v", i, streamed, res.IDs)
				}
				errs <- err
			}()
		}
	}
	// Stateless requests interleave too.
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := prompt(18, int32(40+i))
			res, err := m.Complete(context.Background(), 1, "qwen3", p, GenerateParams{MaxTokens: 4}, nil)
			if err == nil && !slices.Equal(res.IDs, greedy(t, model, p, 4)) {
				err = fmt.Errorf("completion %d: %v", i, res.IDs)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i, id := range ids {
		toks, _ := m.Tokens(1, id)
		want := slices.Concat(prompts[i], greedy(t, model, prompts[i], steps*perSession))
		equalIDs(t, fmt.Sprintf("session %d", i), toks, want)
	}
	if st := m.Stats(); st.InFlight != 0 || st.QueueDepth != 0 {
		t.Errorf("stats after the work: %+v", st)
	}
}

// TestFairness: a long generation does not hold off a short one; the
// short one finishes while the long one is still running.
func TestFairness(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	long, short := mustOpen(t, m, "qwen3"), mustOpen(t, m, "qwen3")
	mustAppend(t, m, long, prompt(10, 1))
	mustAppend(t, m, short, prompt(10, 2))
	started := make(chan struct{})
	var longTokens int
	var mu sync.Mutex
	done := make(chan error)
	go func() {
		n := 0
		_, err := m.Generate(context.Background(), 1, long, GenerateParams{MaxTokens: 400}, func(TokenEvent) error {
			n++
			if n == 1 {
				close(started)
			}
			mu.Lock()
			longTokens = n
			mu.Unlock()
			return nil
		})
		done <- err
	}()
	<-started
	mustGenerate(t, m, short, 5)
	mu.Lock()
	n := longTokens
	mu.Unlock()
	if n >= 400 {
		t.Errorf("short generation waited for the long one (%d tokens)", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCancel: a cancelled context stops a generation within one token and
// the tokens generated so far stay in the session.
func TestCancel(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model})
	id := mustOpen(t, m, "qwen3")
	mustAppend(t, m, id, prompt(10, 1))
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	res, err := m.Generate(ctx, 1, id, GenerateParams{MaxTokens: 100}, func(TokenEvent) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(res.IDs) != 3 {
		t.Fatalf("cancelled generation: %d tokens, %v", len(res.IDs), err)
	}
	toks, _ := m.Tokens(1, id)
	if len(toks) != 13 {
		t.Errorf("session has %d tokens, want 13", len(toks))
	}
	// Closing a session stops its generation.
	go func() {
		time.Sleep(50 * time.Millisecond)
		m.Close(1, id)
	}()
	_, err = m.Generate(context.Background(), 1, id, GenerateParams{MaxTokens: 4000}, nil)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("generation on a closed session: %v", err)
	}
}

// TestQueueFull: requests beyond QueueLimit are refused.
func TestQueueFull(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model, QueueLimit: 1})
	a, b := mustOpen(t, m, "qwen3"), mustOpen(t, m, "qwen3")
	mustAppend(t, m, a, prompt(5, 1))
	mustAppend(t, m, b, prompt(5, 2))
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Generate(ctx, 1, a, GenerateParams{MaxTokens: 4000}, func(TokenEvent) error {
			select {
			case <-started:
			default:
				close(started)
			}
			return nil
		})
	}()
	<-started
	if _, err := m.Generate(context.Background(), 1, b, GenerateParams{MaxTokens: 1}, nil); !errors.Is(err, ErrQueueFull) {
		t.Errorf("second request: %v", err)
	}
	cancel()
	<-done
	mustGenerate(t, m, b, 1)
}

// TestPoolPressure: a pool smaller than the sessions' total still serves
// each one (evicting the others' KV to the host tier or dropping it), and
// a sequence larger than the pool fails cleanly.
func TestPoolPressure(t *testing.T) {
	model := loadFixture(t, "qwen3")
	for _, host := range []int64{0, 1 << 20} {
		m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model, KVBlocks: 4, HostTierBytes: host})
		a, b := mustOpen(t, m, "qwen3"), mustOpen(t, m, "qwen3")
		pa, pb := prompt(40, 1), prompt(45, 2)
		mustAppend(t, m, a, pa)
		mustAppend(t, m, b, pb) // evicts a
		equalIDs(t, "a", mustGenerate(t, m, a, 4).IDs, greedy(t, model, pa, 4))
		equalIDs(t, "b", mustGenerate(t, m, b, 4).IDs, greedy(t, model, pb, 4))
		c := mustOpen(t, m, "qwen3")
		_, err := m.Append(context.Background(), 1, c, AppendInput{Tokens: prompt(65, 3)})
		if !errors.Is(err, ErrContextLength) {
			t.Errorf("sequence larger than the pool: %v", err)
		}
		if toks, _ := m.Tokens(1, c); len(toks) != 0 {
			t.Errorf("failed append changed the session")
		}
		if host > 0 {
			if st := m.Models()[0]; st.HostTierBytes == 0 {
				t.Errorf("host tier unused: %+v", st)
			}
		}
	}
}

// TestIdleSpill: with the pool nearly full of cached prefix blocks, the
// idle scheduler copies the ones next in line for eviction to the host
// tier by itself, and a later request reuses them exactly.
func TestIdleSpill(t *testing.T) {
	model := loadFixture(t, "qwen3")
	m := newManager(t, "", ModelConfig{Name: "qwen3", Model: model, KVBlocks: 4, HostTierBytes: 1 << 20})
	p := prompt(60, 7) // three full blocks stay cached; one of four is free
	res, err := m.Complete(context.Background(), 1, "qwen3", p, GenerateParams{MaxTokens: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.Models()[0].HostTierBytes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle scheduler copied nothing to the host tier: %+v", m.Models()[0])
		}
		time.Sleep(time.Millisecond)
	}
	// Another prompt evicts the cached blocks; the first prompt then comes
	// back from the host tier with the same continuation.
	if _, err := m.Complete(context.Background(), 1, "qwen3", prompt(60, 8), GenerateParams{MaxTokens: 1}, nil); err != nil {
		t.Fatal(err)
	}
	again, err := m.Complete(context.Background(), 1, "qwen3", p, GenerateParams{MaxTokens: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "from the host tier", again.IDs, res.IDs)
	if again.Usage.CachedTokens == 0 {
		t.Errorf("no prompt token reused: %+v", again.Usage)
	}
}

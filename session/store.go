package session

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// store keeps session metadata and token histories in
// StateDir/sessions.db. Why bbolt: a single file in pure Go (no cgo, as
// the daemon must stay), transactions whose commit fsyncs before it
// returns, so once a call has answered its effect survives kill -9, and a
// file lock that keeps a second daemon off the same state directory. The
// volume is small (one write per call, not per token), so a B+tree with one
// writer is plenty. KV memory is never stored: it is rebuilt from the
// tokens on the next use.
type store struct {
	db *bolt.DB
	// puts and putNs count history writes and their time (fsync included).
	puts, putNs atomic.Int64
}

// timing returns the number of history writes and their total seconds.
func (st *store) timing() (int64, float64) {
	if st == nil {
		return 0, 0
	}
	return st.puts.Load(), time.Duration(st.putNs.Load()).Seconds()
}

var (
	bucketMeta   = []byte("sessions")
	bucketTokens = []byte("tokens")
)

// record is a session's durable metadata (tokens are stored apart).
type record struct {
	ID      string    `json:"id"`
	Model   string    `json:"model"`
	Owner   Owner     `json:"owner"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, "sessions.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketTokens} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &store{db: db}, nil
}

// put writes a session's metadata and its whole token history in one
// fsynced transaction.
func (st *store) put(r record, tokens []int32) error {
	if st == nil {
		return nil
	}
	meta, err := json.Marshal(r)
	if err != nil {
		return err
	}
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
	}
	t0 := time.Now()
	err = st.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put([]byte(r.ID), meta); err != nil {
			return err
		}
		return tx.Bucket(bucketTokens).Put([]byte(r.ID), buf)
	})
	st.puts.Add(1)
	st.putNs.Add(int64(time.Since(t0)))
	if err != nil {
		return fmt.Errorf("store session %s: %w", r.ID, err)
	}
	return nil
}

func (st *store) delete(id string) error {
	if st == nil {
		return nil
	}
	err := st.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketTokens).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// load reads every session. A record that does not parse is skipped with
// an error joined into the result, so one bad entry does not hide the rest.
func (st *store) load() ([]record, map[string][]int32, error) {
	var recs []record
	toks := map[string][]int32{}
	var errs []error
	err := st.db.View(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTokens)
		return tx.Bucket(bucketMeta).ForEach(func(k, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil || r.ID != string(k) {
				errs = append(errs, fmt.Errorf("session %q: bad record", k))
				return nil
			}
			raw := tb.Get(k)
			if len(raw)%4 != 0 {
				errs = append(errs, fmt.Errorf("session %q: bad token history", k))
				return nil
			}
			ids := make([]int32, len(raw)/4)
			for i := range ids {
				ids[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			recs = append(recs, r)
			toks[r.ID] = ids
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return recs, toks, errors.Join(errs...)
}

func (st *store) close() error {
	if st == nil {
		return nil
	}
	return st.db.Close()
}

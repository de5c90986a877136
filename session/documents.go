package session

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Documents are small records other parts of the daemon keep durably
// beside the sessions, in the same database (the gateway's stored
// Responses, so that a conversation continued by previous_response_id
// survives a restart as a /v0 session does). A kind of documents is a
// bucket of its own holding the latest ones: Put drops the oldest of the
// kind beyond a count and a byte budget. The bytes are the caller's
// format; ownership checks are the caller's too. Without a state
// directory nothing is kept (Put does nothing, Document finds nothing).

var bucketDocs = []byte("documents")

// Keys inside a kind's bucket: "id/"+id → the insertion number (8 bytes,
// big-endian) then the document; "seq/"+number → id; "bytes" → the kind's
// total bytes (8 bytes).
var (
	docByID   = []byte("id/")
	docBySeq  = []byte("seq/")
	docsBytes = []byte("bytes")
)

// ErrNoStore is returned by PutDocument where the daemon has no state
// directory.
var ErrNoStore = errors.New("session: no state directory: nothing is stored durably")

// PutDocument stores data as document id of kind (replacing one of that
// id) in one fsynced transaction, then drops the kind's oldest documents
// until at most keep of them and maxBytes of their bytes are left (the
// newest is always kept).
func (m *Manager) PutDocument(kind, id string, data []byte, keep int, maxBytes int64) error {
	if m.store == nil {
		return ErrNoStore
	}
	err := m.store.db.Update(func(tx *bolt.Tx) error {
		docs, err := tx.CreateBucketIfNotExists(bucketDocs)
		if err != nil {
			return err
		}
		b, err := docs.CreateBucketIfNotExists([]byte(kind))
		if err != nil {
			return err
		}
		total := docTotal(b)
		if old := b.Get(docKey(docByID, id)); len(old) >= 8 {
			if err := b.Delete(docKey(docBySeq, string(old[:8]))); err != nil {
				return err
			}
			total -= int64(len(old) - 8)
		}
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], n)
		if err := b.Put(docKey(docByID, id), append(seq[:], data...)); err != nil {
			return err
		}
		if err := b.Put(docKey(docBySeq, string(seq[:])), []byte(id)); err != nil {
			return err
		}
		total += int64(len(data))
		// The oldest first: "seq/" keys sort by their big-endian numbers.
		c := b.Cursor()
		count := 0
		for k, _ := c.Seek(docBySeq); k != nil && bytes.HasPrefix(k, docBySeq); k, _ = c.Next() {
			count++
		}
		for k, v := c.Seek(docBySeq); k != nil && bytes.HasPrefix(k, docBySeq) && (count > keep || total > maxBytes) && count > 1; k, v = c.Seek(docBySeq) {
			key := docKey(docByID, string(v))
			total -= int64(max(len(b.Get(key))-8, 0))
			if err := b.Delete(key); err != nil {
				return err
			}
			if err := b.Delete(k); err != nil {
				return err
			}
			count--
		}
		var tb [8]byte
		binary.BigEndian.PutUint64(tb[:], uint64(max(total, 0)))
		return b.Put(docsBytes, tb[:])
	})
	if err != nil {
		return fmt.Errorf("store %s %s: %w", kind, id, err)
	}
	return nil
}

// Document returns document id of kind (a copy), if stored.
func (m *Manager) Document(kind, id string) ([]byte, bool, error) {
	if m.store == nil {
		return nil, false, nil
	}
	var out []byte
	err := m.store.db.View(func(tx *bolt.Tx) error {
		b := docBucket(tx, kind)
		if b == nil {
			return nil
		}
		if v := b.Get(docKey(docByID, id)); len(v) >= 8 {
			out = append([]byte(nil), v[8:]...)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("read %s %s: %w", kind, id, err)
	}
	return out, out != nil, nil
}

// DeleteDocument forgets document id of kind; it reports whether there
// was one.
func (m *Manager) DeleteDocument(kind, id string) (bool, error) {
	if m.store == nil {
		return false, nil
	}
	found := false
	err := m.store.db.Update(func(tx *bolt.Tx) error {
		b := docBucket(tx, kind)
		if b == nil {
			return nil
		}
		v := b.Get(docKey(docByID, id))
		if len(v) < 8 {
			return nil
		}
		found = true
		total := docTotal(b) - int64(len(v)-8)
		if err := b.Delete(docKey(docBySeq, string(v[:8]))); err != nil {
			return err
		}
		if err := b.Delete(docKey(docByID, id)); err != nil {
			return err
		}
		var tb [8]byte
		binary.BigEndian.PutUint64(tb[:], uint64(max(total, 0)))
		return b.Put(docsBytes, tb[:])
	})
	if err != nil {
		return false, fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	return found, nil
}

func docBucket(tx *bolt.Tx, kind string) *bolt.Bucket {
	docs := tx.Bucket(bucketDocs)
	if docs == nil {
		return nil
	}
	return docs.Bucket([]byte(kind))
}

func docKey(prefix []byte, s string) []byte { return append(append([]byte(nil), prefix...), s...) }

func docTotal(b *bolt.Bucket) int64 {
	if v := b.Get(docsBytes); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

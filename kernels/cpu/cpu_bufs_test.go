package cpu

import "testing"

func TestNewBufs(t *testing.T) {
	bufs := New(1).NewBufs([]int{3, 0, 5})
	if len(bufs) != 3 || bufs[0].Len() != 3 || bufs[1].Len() != 0 || bufs[2].Len() != 5 {
		t.Fatalf("lengths: %v", bufs)
	}
	a, c := bufs[0].(*Buf), bufs[2].(*Buf)
	a.D = append(a.D, 7) // a part that grows moves, never into the next
	if c.D[0] != 0 {
		t.Fatalf("append wrote into the next part: %v", c.D)
	}
	for i := range c.D {
		c.D[i] = float32(i + 1)
	}
	if bufs[0].(*Buf).D[0] != 0 {
		t.Fatal("parts overlap")
	}
}

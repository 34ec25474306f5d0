package kube

import (
	"testing"
	"time"
)

func TestNotBefore(t *testing.T) {
	sec := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := NotBefore(sec); !got.Equal(sec.Add(time.Second)) {
		t.Errorf("second-precision time: got %v, want %v", got, sec.Add(time.Second))
	}
	exact := sec.Add(400 * time.Millisecond)
	if got := NotBefore(exact); !got.Equal(exact) {
		t.Errorf("sub-second time: got %v, want it unchanged", got)
	}
	if got := NotBefore(time.Time{}); !got.IsZero() {
		t.Errorf("zero time: got %v", got)
	}
}

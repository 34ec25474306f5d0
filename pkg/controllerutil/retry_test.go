package controllerutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A key that failed for a long time is tried again within MaxRetryDelay,
// and a key that succeeded starts over at 5 ms.
func TestRetryLimiterCapsTheBackoff(t *testing.T) {
	l := RetryLimiter[string]()
	var last = l.When("node")
	for i := 0; i < 60; i++ {
		last = l.When("node")
	}
	if last > MaxRetryDelay || last < MaxRetryDelay/2 {
		t.Errorf("after 61 failures the next try waits %v, want at most %v (and the cap reached)", last, MaxRetryDelay)
	}
	l.Forget("node")
	if d := l.When("node"); d > 5*time.Millisecond {
		t.Errorf("after Forget the next try waits %v, want about 5ms", d)
	}
}

// Every controller's queues use RetryLimiter: client-go's default limiter
// waits up to 1000 s between a failing key's tries.
func TestControllersUseRetryLimiter(t *testing.T) {
	root := filepath.Join("..", "controller")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "DefaultTypedControllerRateLimiter") || strings.Contains(string(b), "DefaultControllerRateLimiter") {
			t.Errorf("%s: uses client-go's default controller rate limiter (up to 1000 s between tries): use controllerutil.RetryLimiter", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNewValidation(t *testing.T) {
	for _, c := range []Config{{URL: "http://x"}, {URL: "https://"}, {URL: "::"}, {URL: "https://x", CAFile: "/nonexistent"}, {URL: "https://x", Timeout: -time.Second}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// Answers that are not answers are errors, so nothing is ever deleted on them.
func TestMalformedAnswersAreErrors(t *testing.T) {
	answers := map[string]string{
		"missing field": `{"apiVersion":"nodeshepherd.io/v1alpha1","kind":"InstanceAnswer"}`,
		"wrong type":    `{"exists":"no"}`,
		"unknown field": `{"exists":false,"gone":true}`,
		"not JSON":      `<html>`,
	}
	for name, body := range answers {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
		p, err := New(Config{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		p.client = srv.Client()
		exists, err := p.InstanceExists(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
		if err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("%s: exists=%v err=%v, want a malformed-answer error", name, exists, err)
		}
		srv.Close()
	}
}

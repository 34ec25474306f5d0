package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
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

// TestRedirectsAreNotFollowed: an https webhook redirecting to plain http
// (or anywhere) is an error; the target is never asked.
func TestRedirectsAreNotFollowed(t *testing.T) {
	asked := false
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked = true
		_, _ = w.Write([]byte(`{"exists":false}`))
	}))
	defer plain.Close()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	p, err := New(Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p.client.Transport = srv.Client().Transport // trust the test server; keep the client's redirect policy
	exists, err := p.InstanceExists(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	if err == nil || !strings.Contains(err.Error(), "redirects are not followed") {
		t.Errorf("exists=%v err=%v, want a redirect error", exists, err)
	}
	if asked {
		t.Error("the redirect target was asked")
	}
}

// FuzzDecodeAnswer: any bytes decode to an answer or an error, never a
// panic, and a decoded answer re-encodes to an equivalent one.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{`{"exists":true}`, `{"shutdown":false}`, `{"metadata":{"providerID":"fake://n"}}`,
		`{"exists":false}{"exists":true}`, `{"exists":"no"}`, `<html>`, ``, `null`, `{"apiVersion":"nodeshepherd.io/v1alpha1","kind":"InstanceAnswer","exists":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeAnswer(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", r, err)
		}
		if _, err := decodeAnswer(again); err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
	})
}

// TestRepairRequests: Reboot and Replace send the request ID and the boot
// they are for; "accepted": true is nil, false a RefusedError with the
// provider's message, and anything without "accepted" (or no answer) an
// error that is not a refusal.
func TestRepairRequests(t *testing.T) {
	var got []Request
	answer := `{"accepted":true}`
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("request body: %v", err)
		}
		got = append(got, req)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	p, err := New(Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p.client = srv.Client()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u-1"}, Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "boot-1"}}}
	ctx := context.Background()
	id := nscloud.RequestID(node, "reboot")
	if err := p.Reboot(ctx, node, id, nscloud.NoPremise); err != nil {
		t.Fatalf("accepted reboot: %v", err)
	}
	if r := got[0]; r.Question != QuestionReboot || r.RequestID != "u-1/boot-1/reboot" || r.Node.BootID != "boot-1" || r.Premise != "" {
		t.Errorf("request %+v", r)
	}
	// A request decided on the machine being off says so, for the webhook
	// to refuse it if the machine runs again.
	if err := p.Replace(ctx, node, nscloud.RequestID(node, "replace"), nscloud.PremiseMachineOff); err != nil {
		t.Fatalf("accepted replace: %v", err)
	}
	if r := got[1]; r.Question != QuestionReplace || r.Premise != "machineOff" {
		t.Errorf("request with a premise %+v", r)
	}
	answer = `{"accepted":false,"message":"machine is in a maintenance hold"}`
	var refused *nscloud.RefusedError
	if err := p.Replace(ctx, node, nscloud.RequestID(node, "replace"), nscloud.NoPremise); !errors.As(err, &refused) || !strings.Contains(err.Error(), "maintenance hold") {
		t.Errorf("refused replace: %v", err)
	}
	for _, a := range []string{`{}`, `{"exists":true}`, `{"accepted":"yes"}`} {
		answer = a
		if err := p.Reboot(ctx, node, id, nscloud.NoPremise); err == nil || errors.As(err, &refused) {
			t.Errorf("answer %s: %v, want an error that is not a refusal", a, err)
		}
	}
	if err := p.Reboot(ctx, node, "", nscloud.NoPremise); err == nil {
		t.Error("a request without an ID was sent")
	}
	if _, ok := nscloud.RepairerOf(p); !ok {
		t.Error("the webhook provider is no Repairer")
	}

	// PowerOff (the Fence step): the same request hygiene.
	got, answer = nil, `{"accepted":true}`
	off := nscloud.RequestID(node, "gpu/4/Fence")
	if err := p.PowerOff(ctx, node, off, nscloud.NoPremise); err != nil {
		t.Fatalf("accepted power-off: %v", err)
	}
	if err := p.PowerOff(ctx, node, off, nscloud.NoPremise); err != nil { // sent again after a lost answer
		t.Fatalf("power-off sent again: %v", err)
	}
	if len(got) != 2 || got[0].Question != QuestionPowerOff || got[0].RequestID != "u-1/boot-1/gpu/4/Fence" || got[1].RequestID != got[0].RequestID || got[0].Node.BootID != "boot-1" {
		t.Errorf("power-off requests %+v", got)
	}
	answer = `{"accepted":false,"message":"no BMC credentials"}`
	if err := p.PowerOff(ctx, node, off, nscloud.NoPremise); !errors.As(err, &refused) || !strings.Contains(err.Error(), "no BMC credentials") {
		t.Errorf("refused power-off: %v", err)
	}
	for _, a := range []string{`{}`, `{"poweredOff":true}`} {
		answer = a
		if err := p.PowerOff(ctx, node, off, nscloud.NoPremise); err == nil || errors.As(err, &refused) {
			t.Errorf("power-off answer %s: %v, want an error that is not a refusal", a, err)
		}
	}
	if err := p.PowerOff(ctx, node, "", nscloud.NoPremise); err == nil {
		t.Error("a power-off without an ID was sent")
	}
	if f, inst, ok := nscloud.FencerOf(p); !ok || f == nil || inst == nil {
		t.Error("the webhook provider cannot fence")
	}
}

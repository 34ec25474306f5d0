// Package controllertest holds what the controllers' fast tests share: the
// writes a fake clientset received and the events a fake recorder holds, in
// one readable form, so that every sync-handler test asserts them the same way.
package controllertest

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// Writes lists the client's writes so far as "verb resource[/subresource]
// name"; reads (get, list, watch) are left out. The name of a binding is
// "pod->node" and that of an eviction "namespace/pod".
func Writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		res := a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			res += "/" + s
		}
		out = append(out, fmt.Sprintf("%s %s %s", a.GetVerb(), res, name(a)))
	}
	return out
}

func name(a clienttesting.Action) string {
	switch a := a.(type) {
	case clienttesting.PatchAction:
		return a.GetName()
	case clienttesting.DeleteAction:
		return a.GetName()
	case clienttesting.CreateAction: // updates too: they have the same methods
		switch o := a.GetObject().(type) {
		case *v1.Binding:
			return o.Name + "->" + o.Target.Name
		case *policyv1.Eviction:
			return o.Namespace + "/" + o.Name
		}
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			return m.GetName()
		}
	}
	return ""
}

// TakeWrites is Writes, then forgets them, for tests that check step by step.
func TakeWrites(client *fake.Clientset) []string {
	out := Writes(client)
	client.ClearActions()
	return out
}

// Events takes the events the recorder holds ("Type Reason message"),
// leaving it empty.
func Events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

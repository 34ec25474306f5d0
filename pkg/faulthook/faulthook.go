// Package faulthook breaks a controller on purpose, for the failover tests
// only. Its hooks exist in binaries built with the faulthook build tag
// (`make build GO_BUILD_TAGS=faulthook`, which the tests do); the release
// build (`make build`) has none of them and refuses Env when it is set, so a
// production process can never be broken by an environment variable.
package faulthook

// Env names the environment variable that `nodeshepherd run` reads the
// fault from (manager.Options.Fault):
//
//	panic:NAME[:AFTER]  controller NAME panics AFTER (a duration) its start
//	exit:NAME[:AFTER]   controller NAME returns an error AFTER its start
//	hang:NAME           every tracked step of controller NAME (a work item,
//	                    a loop's turn) blocks for good once begun: its
//	                    health check must notice
const Env = "NODESHEPHERD_TEST_FAULT"

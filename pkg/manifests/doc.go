// Package manifests composes and renders the project's manifests, deploy/
// (kustomize) and charts/nodeshepherd (Helm), for the tests that check them.
// Its own tests check them without a cluster (same objects from the chart as
// from kustomize, no RBAC wildcards, least-privilege ServiceAccounts, the
// chart's refusals, the service-account scenarios of test/integration), so
// they run in make test-unit and fail within a minute; what needs an API
// server stays in test/integration.
package manifests

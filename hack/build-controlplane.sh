#!/usr/bin/env bash
# Builds the upstream control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) and kubemark's hollow node (the real
# kubelet with a fake runtime, for rehearsals on real kubelet code; with
# nodeshepherd's --boot-id, hack/controlplane/kubemark/bootid.go) from the Go
# module proxy into bin/.
# A cold build compiles a few thousand packages: progress is printed as it goes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/hack/controlplane"
kver=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
major=$(echo "${kver#v}" | cut -d. -f1)
minor=$(echo "${kver#v}" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
mkdir -p "$root/bin"
echo "controlplane: building etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubemark ($kver) into bin/"
echo "controlplane: a cold build takes about 8 minutes on 2 cores; progress below"
start=$(date +%s)
total=$(CGO_ENABLED=0 go list -deps ./etcd ./kube-apiserver ./kube-controller-manager ./kube-scheduler ./kubemark 2>/dev/null | wc -l)
# go build -v names each package as it is compiled; count them for progress.
# CGO_ENABLED=0 and -trimpath as make build, go vet and staticcheck (Makefile):
# the dependencies they share (client-go, apimachinery, ...) compile once.
CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$root/bin/" ./etcd ./kube-apiserver ./kube-controller-manager ./kube-scheduler ./kubemark 2>&1 |
  awk -v total="$total" -v start="$start" '
    /^#|error|cannot|undefined/ { print; next }
    { n++; if (n % 200 == 0) { printf "controlplane: compiled %d of at most %d packages (%ds)\n", n, total, systime()-start; fflush() } }'
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then echo "controlplane: build failed" >&2; exit "$status"; fi
touch "$root/bin/etcd" "$root/bin/kube-apiserver" "$root/bin/kube-controller-manager" "$root/bin/kube-scheduler" "$root/bin/kubemark"
echo "controlplane: done in $(( $(date +%s) - start ))s"

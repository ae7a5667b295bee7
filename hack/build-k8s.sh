#!/usr/bin/env bash
# Build the Kubernetes binaries Horae's tests and demo run on, at pinned versions,
# from the Go module proxy, into a cache outside the repository: kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl (k8s.io/kubernetes), etcd,
# helm, kwok (simulated nodes and pod lifecycles: sigs.k8s.io/kwok) and promtool
# (checks and unit-tests the chart's alerting rules).
#
#   hack/build-k8s.sh            build what is missing, print the bin directory
#
# If HORAE_K8S_BIN or KUBEBUILDER_ASSETS points at a directory that has all the
# binaries, nothing is built and that directory is printed. If it has only some
# (setup-envtest's has no helm), those are used and only the missing ones are
# built into the cache: the printed directory, under the cache, holds links to
# both.
set -euo pipefail

K8S_VERSION=${HORAE_K8S_VERSION:-v1.34.3}
ETCD_VERSION=${HORAE_ETCD_VERSION:-v3.6.13}
HELM_VERSION=${HORAE_HELM_VERSION:-v3.19.5}
KWOK_VERSION=${HORAE_KWOK_VERSION:-v0.8.0}
# Prometheus's Go module v0.316.x is Prometheus 3.6's code (github.com/prometheus/prometheus).
PROMETHEUS_VERSION=${HORAE_PROMETHEUS_VERSION:-v0.316.0}
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm kwok promtool)

die() { echo "build-k8s: $*" >&2; exit 1; }

has_all() {
  local dir=$1 b
  for b in "${BINARIES[@]}"; do [ -x "$dir/$b" ] || return 1; done
}

provided= provided_var=
for var in HORAE_K8S_BIN KUBEBUILDER_ASSETS; do
  dir=${!var:-}
  if [ -n "$dir" ]; then
    has_all "$dir" && { echo "$dir"; exit 0; }
    [ -d "$dir" ] || die "$var=$dir is not a directory"
    provided=$(cd "$dir" && pwd) provided_var=$var
    break
  fi
done

CACHE=${HORAE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/horae}/k8s/$K8S_VERSION-etcd$ETCD_VERSION-helm$HELM_VERSION
BIN=$CACHE/bin
# The directory's name carries the Kubernetes, etcd and helm versions; kwok and promtool,
# added later, carry theirs in a stamp beside the binary, so a cache built before them
# is completed rather than rebuilt.
declare -A STAMPED=([kwok]=$KWOK_VERSION [promtool]=$PROMETHEUS_VERSION)
cached() {  # the cache has binary $1 at the pinned version
  [ -x "$BIN/$1" ] || return 1
  [ -z "${STAMPED[$1]:-}" ] || [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "${STAMPED[$1]}" ]
}

# What to build: the binaries neither the provided directory nor the cache has.
missing=()
for b in "${BINARIES[@]}"; do
  [ -n "$provided" ] && [ -x "$provided/$b" ] && continue
  cached "$b" || missing+=("$b")
done
needs() { [[ " ${missing[*]} " == *" $1 "* ]]; }

# A directory of links: the provided binaries, and the cache's for the rest. One per
# provided directory, so different ones never overwrite each other's links.
print_bin() {
  local dir=$BIN b
  if [ -n "$provided" ]; then
    dir=$CACHE/with/$(printf '%s' "$provided" | sha256sum | cut -c1-16)
    mkdir -p "$dir"
    for b in "${BINARIES[@]}"; do
      if [ -x "$provided/$b" ]; then ln -sfn "$provided/$b" "$dir/$b"; else ln -sfn "$BIN/$b" "$dir/$b"; fi
    done
  fi
  has_all "$dir" || die "binaries are missing in $dir"
  echo "$dir"
}

if [ ${#missing[@]} = 0 ]; then print_bin; exit 0; fi

[ -n "$provided" ] && echo "build-k8s: $provided_var=$provided has no ${missing[*]}: building only that into $BIN" >&2
command -v go >/dev/null || die "no Go toolchain on PATH: install Go >= 1.24 to build the Kubernetes binaries"
mkdir -p "$BIN"
LOG=$CACHE/build.log
: >"$LOG"
echo "build-k8s: building ${missing[*]} (kubernetes $K8S_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, kwok $KWOK_VERSION, prometheus $PROMETHEUS_VERSION) into $BIN (log: $LOG)" >&2

export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One throwaway module per product: a go.mod that requires the product and, for
# Kubernetes, replaces every staging module (required at v0.0.0 upstream) with
# its published v0.X.Y.
build_module() {  # name, module require lines, replace lines, then pkg=>out pairs
  local name=$1 requires=$2 replaces=$3; shift 3
  local dir=$work/$name
  mkdir -p "$dir"
  {
    echo "module horae.dev/hack/$name"; echo; echo "go 1.24"; echo
    echo "require ("; echo "$requires"; echo ")"
    [ -n "$replaces" ] && { echo "replace ("; echo "$replaces"; echo ")"; }
  } >"$dir/go.mod"
  {
    echo "//go:build tools"; echo; echo "package tools"; echo; echo "import ("
    local pair; for pair in "$@"; do echo "	_ \"${pair%%=>*}\""; done
    echo ")"
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy >>"$LOG" 2>&1) || die "go mod tidy failed for $name (see $LOG)"
  local pair
  for pair in "$@"; do
    # A name of its own per build: two builds at once never write the same file.
    (cd "$dir" && go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/${pair##*=>}.tmp.$$" "${pair%%=>*}" >>"$LOG" 2>&1) \
      || die "go build ${pair%%=>*} failed (see $LOG)"
    mv "$BIN/${pair##*=>}.tmp.$$" "$BIN/${pair##*=>}"
    local out=${pair##*=>}
    [ -z "${STAMPED[$out]:-}" ] || echo "${STAMPED[$out]}" >"$BIN/.$out.version"
  done
}

if needs kube-apiserver || needs kube-controller-manager || needs kube-scheduler || needs kubectl; then
  gomod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>>"$LOG" \
    | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p') || true
  [ -f "$gomod" ] || die "could not fetch k8s.io/kubernetes@$K8S_VERSION from the Go module proxy (see $LOG)"
  staging_version=v0.${K8S_VERSION#v1.}
  replaces=$(grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}')
  [ -n "$replaces" ] || die "no staging replaces found in k8s.io/kubernetes go.mod"
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  LDFLAGS="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS="$LDFLAGS -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  pairs=()
  needs kube-apiserver && pairs+=("k8s.io/kubernetes/cmd/kube-apiserver=>kube-apiserver")
  needs kube-controller-manager && pairs+=("k8s.io/kubernetes/cmd/kube-controller-manager=>kube-controller-manager")
  needs kube-scheduler && pairs+=("k8s.io/kubernetes/cmd/kube-scheduler=>kube-scheduler")
  needs kubectl && pairs+=("k8s.io/kubernetes/cmd/kubectl=>kubectl")
  build_module kubernetes "	k8s.io/kubernetes $K8S_VERSION" "$replaces" "${pairs[@]}"
fi

if needs etcd; then
  LDFLAGS="-s -w"
  build_module etcd "	go.etcd.io/etcd/server/v3 $ETCD_VERSION" "" "go.etcd.io/etcd/server/v3=>etcd"
fi

if needs helm; then
  LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  build_module helm "	helm.sh/helm/v3 $HELM_VERSION" "" "helm.sh/helm/v3/cmd/helm=>helm"
fi

if needs kwok; then
  LDFLAGS="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
  build_module kwok "	sigs.k8s.io/kwok $KWOK_VERSION" "" "sigs.k8s.io/kwok/cmd/kwok=>kwok"
fi

if needs promtool; then
  LDFLAGS="-s -w"
  build_module prometheus "	github.com/prometheus/prometheus $PROMETHEUS_VERSION" "" \
    "github.com/prometheus/prometheus/cmd/promtool=>promtool"
fi

print_bin

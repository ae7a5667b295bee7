#!/usr/bin/env bash
# Start etcd + kube-apiserver on loopback: generated service-account keys, a
# token-authenticated admin (system:masters), RBAC authorization on. Writes
# DIR/kubeconfig and DIR/env; hack/k8s-down.sh DIR stops them.
#
#   hack/k8s-up.sh [DIR]     default DIR: $HORAE_K8S_DIR or ~/.cache/horae/run/k8s
#
# Ports come from HORAE_ETCD_PORT (default 2379), HORAE_ETCD_PEER_PORT (2380)
# and HORAE_APISERVER_PORT (6443). A port already taken fails at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-${HORAE_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/horae/run/k8s}}
ETCD_PORT=${HORAE_ETCD_PORT:-2379}
ETCD_PEER_PORT=${HORAE_ETCD_PEER_PORT:-2380}
API_PORT=${HORAE_APISERVER_PORT:-6443}
TIMEOUT=${HORAE_K8S_TIMEOUT:-60}

die() { echo "k8s-up: $*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

BIN=$("$here/build-k8s.sh") || die "could not get the Kubernetes binaries (hack/build-k8s.sh failed)"
mkdir -p "$DIR"

if alive etcd && alive kube-apiserver && [ -f "$DIR/kubeconfig" ]; then
  "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz >/dev/null 2>&1 && { echo "$DIR"; exit 0; }
fi
"$here/k8s-down.sh" "$DIR" >/dev/null 2>&1 || true

for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT"; do
  port_open "$p" && die "port $p on 127.0.0.1 is already taken: stop what holds it or set HORAE_ETCD_PORT/HORAE_ETCD_PEER_PORT/HORAE_APISERVER_PORT"
done
command -v openssl >/dev/null || die "openssl is missing: apt-get install openssl"

rm -rf "$DIR/etcd-data" "$DIR/certs"
mkdir -p "$DIR/certs"
if [ ! -f "$DIR/sa.key" ]; then
  openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
fi
if [ ! -f "$DIR/tokens.csv" ]; then
  token=$(openssl rand -hex 24)
  echo "$token,horae-admin,horae-admin,system:masters" >"$DIR/tokens.csv"
  chmod 600 "$DIR/tokens.csv"
fi
token=$(cut -d, -f1 "$DIR/tokens.csv")

setsid "$BIN/etcd" --name horae --data-dir "$DIR/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "horae=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn \
  >"$DIR/etcd.log" 2>&1 </dev/null &
echo $! >"$DIR/etcd.pid"

deadline=$((SECONDS + TIMEOUT))
until port_open "$ETCD_PORT"; do
  alive etcd || die "etcd exited at start: $(tail -1 "$DIR/etcd.log")"
  [ $SECONDS -lt $deadline ] || die "etcd not listening on $ETCD_PORT after ${TIMEOUT}s (see $DIR/etcd.log)"
  sleep 0.2
done

setsid "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --cert-dir "$DIR/certs" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$DIR/sa.pub" --service-account-signing-key-file "$DIR/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --token-auth-file "$DIR/tokens.csv" \
  --authorization-mode RBAC \
  --service-cluster-ip-range 10.96.0.0/16 \
  --disable-admission-plugins ServiceAccount \
  --enable-priority-and-fairness=false \
  --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
  --profiling=false --v 1 \
  >"$DIR/kube-apiserver.log" 2>&1 </dev/null &
echo $! >"$DIR/kube-apiserver.pid"

cat >"$DIR/kubeconfig" <<KUBE
apiVersion: v1
kind: Config
clusters:
- name: horae
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $DIR/certs/apiserver.crt
users:
- name: horae-admin
  user:
    token: $token
contexts:
- name: horae
  context: {cluster: horae, user: horae-admin, namespace: default}
current-context: horae
KUBE
chmod 600 "$DIR/kubeconfig"

until "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz >/dev/null 2>&1; do
  alive kube-apiserver || die "kube-apiserver exited at start: $(grep -E '^[EF][0-9]' "$DIR/kube-apiserver.log" | tail -1)"
  [ $SECONDS -lt $deadline ] || die "kube-apiserver not ready on $API_PORT after ${TIMEOUT}s (see $DIR/kube-apiserver.log)"
  sleep 0.3
done
# The default namespace's default ServiceAccount; no controller manager runs here.
until "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get namespace default >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "namespace default never appeared"
  sleep 0.2
done

cat >"$DIR/env" <<ENV
export KUBECONFIG=$DIR/kubeconfig
export PATH=$BIN:\$PATH
ENV
echo "$DIR"

#!/usr/bin/env bash
# Start a local Kubernetes control plane on loopback: etcd and kube-apiserver (generated
# service-account keys, token authentication, RBAC authorization) and, unless
# HORAE_K8S_CONTROLLERS=0, kube-controller-manager, kube-scheduler and kwok with two
# simulated nodes, so that Deployments get ReplicaSets and pods, Jobs complete, pods are
# bound, Running and Ready, and garbage collection, namespaces, ServiceAccounts and
# PodDisruptionBudgets work as on a real cluster (no container ever runs: kwok plays the
# kubelets, hack/kwok/stages.yaml). Writes DIR/kubeconfig and DIR/env;
# hack/k8s-down.sh DIR stops them all.
#
#   hack/k8s-up.sh [DIR]     default DIR: $HORAE_K8S_DIR or ~/.cache/horae/run/k8s
#
# HORAE_K8S_CONTROLLERS=1 (default) starts the whole cluster above; 0 only etcd and
# kube-apiserver, with the ServiceAccount admission plugin off (nothing would create the
# ServiceAccounts it looks for): a bare API server for tests that need no controller.
# A plane already up in DIR is reused when it runs in the mode asked for.
#
# The API server runs the aggregation layer (as kubeadm sets it up): a front-proxy CA of
# its own in DIR/certs signs the client certificate (CN front-proxy-client) it presents to
# extension API servers such as `horae aggregated-api`, which trust the X-Remote-User,
# X-Remote-Group and X-Remote-Extra-* headers only from it; the API server publishes that
# CA, the allowed name and the header names in the ConfigMap
# kube-system/extension-apiserver-authentication. With no kube-proxy or pod network here,
# an APIService reaches its server through an ExternalName Service (`localhost`) at the
# APIService's service.port.
#
# Identities: the admin (DIR/kubeconfig) and kwok use a token of group system:masters;
# kube-controller-manager and kube-scheduler log in as system:kube-controller-manager and
# system:kube-scheduler, which Kubernetes's bootstrap RBAC roles bind, and the controller
# manager gives each controller a ServiceAccount of its own, as a real cluster does.
#
# Ports come from HORAE_ETCD_PORT (default 2379), HORAE_ETCD_PEER_PORT (2380)
# and HORAE_APISERVER_PORT (6443). A port already taken fails at once. The controller
# manager and the scheduler serve no port (their readiness is read from the cluster).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-${HORAE_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/horae/run/k8s}}
ETCD_PORT=${HORAE_ETCD_PORT:-2379}
ETCD_PEER_PORT=${HORAE_ETCD_PEER_PORT:-2380}
API_PORT=${HORAE_APISERVER_PORT:-6443}
TIMEOUT=${HORAE_K8S_TIMEOUT:-60}
CONTROLLERS=${HORAE_K8S_CONTROLLERS:-1}

die() { echo "k8s-up: $*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

case $CONTROLLERS in
  0) components=(etcd kube-apiserver) ;;
  1) components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok) ;;
  *) die "HORAE_K8S_CONTROLLERS must be 1 (controllers, scheduler and kwok nodes) or 0 (etcd and kube-apiserver only), not '$CONTROLLERS'" ;;
esac
# `aggregation`: a plane of an older script (without the front-proxy flags) is restarted.
mode="controllers=$CONTROLLERS aggregation=1"

BIN=$("$here/build-k8s.sh") || die "could not get the Kubernetes binaries (hack/build-k8s.sh failed)"
mkdir -p "$DIR"
kubectl() { "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }

all_alive() { local c; for c in "${components[@]}"; do alive "$c" || return 1; done; }
if all_alive && [ -f "$DIR/kubeconfig" ] && [ "$(cat "$DIR/mode" 2>/dev/null)" = "$mode" ]; then
  kubectl get --raw /readyz >/dev/null 2>&1 && { echo "$DIR"; exit 0; }
fi
"$here/k8s-down.sh" "$DIR" >/dev/null 2>&1 || true

for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT"; do
  port_open "$p" && die "port $p on 127.0.0.1 is already taken: stop what holds it or set HORAE_ETCD_PORT/HORAE_ETCD_PEER_PORT/HORAE_APISERVER_PORT"
done
command -v openssl >/dev/null || die "openssl is missing: apt-get install openssl"

rm -rf "$DIR/etcd-data" "$DIR/certs" "$DIR/mode"
mkdir -p "$DIR/certs"
if [ ! -f "$DIR/sa.key" ]; then
  openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
fi
# token,user,uid[,groups]: the admin first (a DIR of an older script has only that line).
if ! grep -q ',system:kube-scheduler,' "$DIR/tokens.csv" 2>/dev/null; then
  {
    echo "$(openssl rand -hex 24),horae-admin,horae-admin,system:masters"
    echo "$(openssl rand -hex 24),system:kube-controller-manager,system:kube-controller-manager"
    echo "$(openssl rand -hex 24),system:kube-scheduler,system:kube-scheduler"
  } >"$DIR/tokens.csv"
  chmod 600 "$DIR/tokens.csv"
fi
# The aggregation layer's front-proxy CA and the client certificate it signs.
certs=$DIR/certs
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=horae-front-proxy-ca \
  -keyout "$certs/front-proxy-ca.key" -out "$certs/front-proxy-ca.crt" 2>/dev/null ||
  die "openssl could not make the front-proxy CA"
openssl req -new -newkey rsa:2048 -nodes -subj /CN=front-proxy-client \
  -keyout "$certs/front-proxy-client.key" -out "$certs/front-proxy-client.csr" 2>/dev/null &&
  openssl x509 -req -in "$certs/front-proxy-client.csr" -days 3650 -CA "$certs/front-proxy-ca.crt" \
    -CAkey "$certs/front-proxy-ca.key" -CAcreateserial -out "$certs/front-proxy-client.crt" \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n') 2>/dev/null ||
  die "openssl could not make the front-proxy client certificate"

token_of() { awk -F, -v user="$1" '$2 == user { print $1 }' "$DIR/tokens.csv"; }

start() {  # name, then its command line
  local name=$1; shift
  setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

# Wait until a command succeeds, as long as `component` runs: its last error otherwise.
deadline=$((SECONDS + TIMEOUT))
wait_for() {  # component, what, command...
  local component=$1 what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    alive "$component" || die "$component exited at start: $(grep -E '^[EF][0-9]|[Ee]rror' "$DIR/$component.log" | tail -1)"
    [ $SECONDS -lt $deadline ] || die "$what after ${TIMEOUT}s (see $DIR/$component.log)"
    sleep 0.2
  done
}

start etcd "$BIN/etcd" --name horae --data-dir "$DIR/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "horae=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for etcd "etcd not listening on $ETCD_PORT" port_open "$ETCD_PORT"

# Without controllers nothing creates the ServiceAccounts pods name (not even `default`),
# so the admission plugin that requires them is off; with them it is on, as in a cluster.
admission=()
[ "$CONTROLLERS" = 0 ] && admission=(--disable-admission-plugins ServiceAccount)
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --cert-dir "$DIR/certs" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$DIR/sa.pub" --service-account-signing-key-file "$DIR/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --token-auth-file "$DIR/tokens.csv" \
  --authorization-mode RBAC \
  --requestheader-client-ca-file "$certs/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$certs/front-proxy-client.crt" \
  --proxy-client-key-file "$certs/front-proxy-client.key" \
  --service-cluster-ip-range 10.96.0.0/16 \
  "${admission[@]}" \
  --enable-priority-and-fairness=false \
  --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
  --profiling=false --v 1

write_kubeconfig() {  # file, user, token
  cat >"$1" <<KUBE
apiVersion: v1
kind: Config
clusters:
- name: horae
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $DIR/certs/apiserver.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: horae
  context: {cluster: horae, user: $2, namespace: default}
current-context: horae
KUBE
  chmod 600 "$1"
}
write_kubeconfig "$DIR/kubeconfig" horae-admin "$(token_of horae-admin)"
wait_for kube-apiserver "kube-apiserver not ready on $API_PORT" kubectl get --raw /readyz
wait_for kube-apiserver "namespace default never appeared" kubectl get namespace default
# What every extension API server reads to trust the front proxy.
requestheader_published() {
  [ -n "$(kubectl get configmap extension-apiserver-authentication -n kube-system \
    -o 'jsonpath={.data.requestheader-client-ca-file}')" ]
}
wait_for kube-apiserver "no request-header CA in ConfigMap kube-system/extension-apiserver-authentication" \
  requestheader_published

if [ "$CONTROLLERS" = 1 ]; then
  write_kubeconfig "$DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager \
    "$(token_of system:kube-controller-manager)"
  write_kubeconfig "$DIR/kube-scheduler.kubeconfig" system:kube-scheduler "$(token_of system:kube-scheduler)"
  # The API server's self-signed certificate is the cluster's CA: what pods find in the
  # kube-root-ca.crt ConfigMap the controller manager publishes in every namespace.
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kube-controller-manager.kubeconfig" --use-service-account-credentials \
    --service-account-private-key-file "$DIR/sa.key" --root-ca-file "$DIR/certs/apiserver.crt" \
    --cluster-name horae --secure-port 0 --profiling=false --v 1
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$DIR/kube-scheduler.kubeconfig" --secure-port 0 --profiling=false --v 1
  # kwok plays the kubelet of each node annotated kwok.x-k8s.io/node=fake: it keeps the
  # node's Lease and status, and moves its pods through hack/kwok/stages.yaml.
  start kwok "$BIN/kwok" --kubeconfig "$DIR/kubeconfig" --config "$here/kwok/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr 10.244.0.0/16
  for i in 0 1; do
    cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: zone-$i
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
NODE
  done | kubectl apply -f - >/dev/null || die "could not create the kwok nodes"

  wait_for kube-controller-manager "no ServiceAccount default in namespace default (the controller manager's)" \
    kubectl get serviceaccount default -n default
  wait_for kube-controller-manager "no ConfigMap kube-root-ca.crt in namespace default (the controller manager's)" \
    kubectl get configmap kube-root-ca.crt -n default
  scheduler_leads() { [ -n "$(kubectl get lease kube-scheduler -n kube-system -o 'jsonpath={.spec.holderIdentity}')" ]; }
  wait_for kube-scheduler "kube-scheduler never took its Lease" scheduler_leads
  # Ready, and untainted (the node lifecycle controller lifts the not-ready taint): a pod
  # created from now on is bound at once.
  nodes_ready() {
    [ "$(kubectl get nodes -l type=kwok -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{.spec.taints}{" "}{end}')" = "True True " ]
  }
  wait_for kwok "the kwok nodes are not Ready and untainted" nodes_ready
fi

echo "$mode" >"$DIR/mode"
cat >"$DIR/env" <<ENV
export KUBECONFIG=$DIR/kubeconfig
export PATH=$BIN:\$PATH
ENV
echo "$DIR"

#!/usr/bin/env bash
# `make demo`: services, a local cluster (hack/k8s-up.sh: controllers, scheduler and
# kwok's simulated nodes) and every Horae component on this machine; applies a WorkerPool
# (a Deployment, ReplicaSet and pods the cluster makes) and the example ScheduledJobs, and
# shows their executions live until interrupted (or for HORAE_DEMO_DURATION seconds).
# `kubectl get executions` meanwhile reads the store through the aggregation layer: the
# demo runs `horae aggregated-api` on HORAE_DEMO_AGGREGATED_PORT (8443) behind the
# APIService v1alpha1.runs.horae.dev, which it deletes again when it stops.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD

RUN=${HORAE_DEMO_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/horae/run}
NS=${HORAE_DEMO_NAMESPACE:-horae-demo}
AGGREGATED_PORT=${HORAE_DEMO_AGGREGATED_PORT:-8443}
mkdir -p "$RUN/demo"
log() { echo "demo: $*" >&2; }

hack/services.sh
set -a; eval "$(hack/services.sh env)"; set +a
hack/k8s-up.sh "$RUN/k8s" >/dev/null
# shellcheck disable=SC1091
source "$RUN/k8s/env"
export HORAE_NAMESPACE=$NS HORAE_LOG_LEVEL=${HORAE_LOG_LEVEL:-INFO}

.venv/bin/horae migrate
kubectl apply -f crds/ >/dev/null
# Until each is Established (`kubectl wait --for=condition=Established` fails at once on a
# CRD the API server has not given conditions yet).
for crd in $(kubectl get -f crds/ -o name); do
    for _ in $(seq 300); do
        [ "$(kubectl get "$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ] && break
        sleep 0.2
    done
done
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS" >/dev/null

pids=()
cleanup() {
  log "stopping Horae components (services and control plane keep running; hack/k8s-down.sh $RUN/k8s stops the latter)"
  # An APIService whose server is gone would fail every client's discovery.
  kubectl delete apiservice v1alpha1.runs.horae.dev --ignore-not-found >/dev/null 2>&1 || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
start() {
  local name=$1; shift
  HORAE_IDENTITY="demo-$name" .venv/bin/horae "$@" >"$RUN/demo/$name.log" 2>&1 &
  pids+=($!)
}
start operator operator
start scheduler scheduler
start worker worker --tasks worker/examples/demo.py

# The aggregated API, with a serving certificate for the name kube-apiserver checks
# (horae-aggregated-api.horae-system.svc), signed by a CA of the demo's own; with no
# kube-proxy here, an ExternalName Service `localhost` leads kube-apiserver to it.
(exec 3<>"/dev/tcp/127.0.0.1/$AGGREGATED_PORT") 2>/dev/null &&
  { log "port $AGGREGATED_PORT is taken: set HORAE_DEMO_AGGREGATED_PORT"; exit 1; }
certs=$RUN/demo/certs
mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=horae-demo-ca \
  -keyout "$certs/ca.key" -out "$certs/ca.crt" 2>/dev/null
openssl req -new -newkey rsa:2048 -nodes -subj /CN=horae-aggregated-api.horae-system.svc \
  -keyout "$certs/tls.key" -out "$certs/tls.csr" 2>/dev/null
openssl x509 -req -in "$certs/tls.csr" -days 30 -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
  -CAcreateserial -out "$certs/tls.crt" 2>/dev/null \
  -extfile <(echo "subjectAltName=DNS:horae-aggregated-api.horae-system.svc,DNS:localhost,IP:127.0.0.1")
HORAE_AGGREGATED_HOST=127.0.0.1 HORAE_AGGREGATED_PORT=$AGGREGATED_PORT \
  HORAE_TLS_CERT_FILE=$certs/tls.crt HORAE_TLS_KEY_FILE=$certs/tls.key \
  start aggregated-api aggregated-api
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: horae-system}
---
apiVersion: v1
kind: Service
metadata: {name: horae-aggregated-api, namespace: horae-system}
spec: {type: ExternalName, externalName: localhost, ports: [{name: https, port: $AGGREGATED_PORT}]}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.runs.horae.dev}
spec:
  group: runs.horae.dev
  version: v1alpha1
  service: {namespace: horae-system, name: horae-aggregated-api, port: $AGGREGATED_PORT}
  caBundle: $(base64 -w0 "$certs/ca.crt")
  groupPriorityMinimum: 1100
  versionPriority: 100
YAML
kubectl wait --for=condition=Available apiservice/v1alpha1.runs.horae.dev --timeout=60s >/dev/null \
  || { log "APIService v1alpha1.runs.horae.dev is not Available (see $RUN/demo/aggregated-api.log)"; exit 1; }
kubectl api-resources --api-group runs.horae.dev >/dev/null  # kubectl's discovery, refreshed
log "components started; logs in $RUN/demo/"
# The pool's Deployment, ReplicaSet and pods (kwok's: no container runs in them; the worker
# above serves the pool's queue).
kubectl apply -n "$NS" -f examples/workerpool.yaml >/dev/null
for _ in $(seq 1 120); do kubectl get deployment default -n "$NS" >/dev/null 2>&1 && break; sleep 0.5; done
kubectl rollout status deployment/default -n "$NS" --timeout=60s >/dev/null \
  || { log "WorkerPool default has no ready Deployment (see $RUN/demo/operator.log)"; exit 1; }
# A previous demo's jobs go first (the operator's finalizer cancels them in the store).
kubectl delete scheduledjobs --all -n "$NS" --timeout=60s >/dev/null

run_at=$(date -u -d '+5 seconds' +%Y-%m-%dT%H:%M:%SZ)
sed "s/runAt: .*/runAt: \"$run_at\"/" examples/once.yaml | kubectl apply -n "$NS" -f - >/dev/null
for f in examples/every-5s.yaml examples/flaky.yaml examples/doomed.yaml; do
  kubectl apply -n "$NS" -f "$f" >/dev/null
done
kubectl get scheduledjobs -n "$NS"
log "watching executions (Ctrl-C to stop)"

watch_args=()
[ -n "${HORAE_DEMO_DURATION:-}" ] && watch_args=(--for "$HORAE_DEMO_DURATION")
.venv/bin/horae executions "$NS/hello-once" "$NS/hello-every-5s" "$NS/flaky" "$NS/doomed" \
  --watch "${watch_args[@]}" || true
echo  # the live table's last frame ends without a newline
kubectl get scheduledjobs -n "$NS"
kubectl get executions -n "$NS"
kubectl get workerpools,deployments,replicasets,pods -n "$NS"

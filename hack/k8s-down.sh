#!/usr/bin/env bash
# Stop the control plane that hack/k8s-up.sh started in DIR (TERM, then KILL).
set -uo pipefail
DIR=${1:-${HORAE_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/horae/run/k8s}}
for name in kube-apiserver etcd; do
  pidfile=$DIR/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
done

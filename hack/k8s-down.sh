#!/usr/bin/env bash
# Stop the control plane that hack/k8s-up.sh started in DIR: every process at once (a
# throwaway cluster keeps nothing worth an orderly stop), TERM, then KILL after 5 s.
set -uo pipefail
DIR=${1:-${HORAE_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/horae/run/k8s}}
pids=()
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  pidfile=$DIR/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  rm -f "$pidfile"
done
for _ in $(seq 1 50); do
  running=()
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running+=("$pid"); done
  [ ${#running[@]} = 0 ] && break
  sleep 0.1
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
rm -f "$DIR/mode"

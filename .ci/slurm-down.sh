#!/usr/bin/env bash
# Stop the daemons started by .ci/slurm-up.sh, by their pid files (never by name).
set -uo pipefail

stop() {  # stop <name> <pidfile>
  local pidfile=$2 pid
  [[ -s "$pidfile" ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "slurm-down: $1 (pid $pid) ignored SIGTERM for 30s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

stop slurmd /run/slurm/slurmd.pid
stop slurmctld /run/slurm/slurmctld.pid
stop slurmdbd /run/slurm/slurmdbd.pid
stop mariadbd /run/mysqld/mysqld.pid
stop munged /run/munge/munged.pid
echo "slurm-down: stopped" >&2

#!/usr/bin/env bash
# A one-node SLURM cluster on this host, for trying launcher=slurm and for the slow suite
# (tests/experiments/test_slurm.py; docs/running.md#a-slurm-cluster-on-one-machine).
#
#   benchmarks/local_slurm.sh start   # prints the SLURM_CONF line to export
#   export SLURM_CONF=/tmp/rpd-slurm/slurm.conf
#   sinfo; python -m experiments.figure experiment=e3_nesterov fanout=true launcher=slurm
#   benchmarks/local_slurm.sh stop    # stops exactly the daemons `start` started
#
# Needs Debian's slurm-wlm and munge (apt-get install -y slurm-wlm munge) and root (slurmd runs
# jobs as their user). Everything lives in $RPD_SLURM_DIR (default /tmp/rpd-slurm): slurm.conf
# with this host's CPU count and memory, its own munge key and socket, state, logs and the
# daemons' pid files; nothing under /etc is read or written, so a host's own SLURM is untouched.
# Ports $RPD_SLURM_PORT (controller) and the next one (node daemon), default 16817/16818.
set -euo pipefail
DIR=${RPD_SLURM_DIR:-/tmp/rpd-slurm}
PORT=${RPD_SLURM_PORT:-16817}
CONF=$DIR/slurm.conf
DAEMONS=(slurmd slurmctld munged) # stopped in this order: node, controller, then authentication

say() { echo "local_slurm: $*" >&2; }

stop() {
  local name pid
  for name in "${DAEMONS[@]}"; do
    [[ -f $DIR/$name.pid ]] || continue
    pid=$(cat "$DIR/$name.pid")
    # only a process of that name: a stale pid file must not stop someone else's process
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]]; then
      kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$DIR/$name.pid"
  done
}

start() {
  for exe in munged slurmctld slurmd sinfo; do
    command -v "$exe" >/dev/null || { say "$exe not found: apt-get install -y slurm-wlm munge"; exit 2; }
  done
  [[ $(id -u) == 0 ]] || { say "needs root (slurmd runs each job as its user)"; exit 2; }
  stop # a previous start's daemons, if any
  mkdir -p "$DIR"/{state,spool,log}
  chmod 700 "$DIR"
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  # MemTotal less 5 %: slurmd refuses to start a node whose RealMemory exceeds what it measures
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)
  [[ -f $DIR/munge.key ]] || { dd if=/dev/urandom of="$DIR/munge.key" bs=1024 count=1 status=none; }
  chmod 400 "$DIR/munge.key"
  cat >"$CONF" <<EOF
# written by benchmarks/local_slurm.sh: one node, this host ($cpus CPUs, $mem_mb MB)
ClusterName=rpd-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
# jobs of at most 1 minute: a longer request pends for PartitionTimeLimit (the tests' never-starting job)
PartitionName=short Nodes=$host MaxTime=1 State=UP
EOF
  munged --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge.seed" --force
  export SLURM_CONF=$CONF
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  # the node is usable once the controller lists it idle (a few seconds)
  for _ in $(seq 150); do
    if [[ $(sinfo -h -N -o %t 2>/dev/null | sort -u) == idle ]]; then
      say "node $host idle ($cpus CPUs, $mem_mb MB) in partition local"
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    sleep 0.2
  done
  say "the node did not become idle in 30 s (logs: $DIR/log/); stopping"
  sinfo -N -l >&2 || true
  stop
  exit 1
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) say "usage: $0 start|stop"; exit 2 ;;
esac

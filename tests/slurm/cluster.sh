#!/usr/bin/env bash
# A one-node SLURM cluster with job accounting on this machine, for the SLURM tests
# (tests/test_slurm.py): Debian's slurm-wlm, slurmdbd, munge and MariaDB, bound to localhost.
# Needs root. `cluster.sh start DIR` installs what is missing, writes every config and state
# below DIR and starts munged, MariaDB, slurmdbd, slurmctld and slurmd; `cluster.sh stop DIR`
# stops them. Idempotent: a running cluster is left as it is. Prints the partition's name.
set -euo pipefail
action="${1:?start|stop}"
root="$(realpath -m "${2:?the directory of the cluster}")"
node="$(hostname -s)"
run="$root/run"
mkdir -p "$run"

descendants() {  # every process below PID, deepest first
  local child
  for child in $(pgrep -P "$1"); do descendants "$child"; echo "$child"; done
}

stop() {
  # jobs first, while the daemons can still end them; then whatever a step left behind, so that
  # no job script or srun outlives the cluster
  if squeue -h >/dev/null 2>&1; then
    scancel --full --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 40); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  for step in $(pgrep -x slurmstepd); do
    kill -9 $(descendants "$step") 2>/dev/null || true
  done
  pkill -9 -x slurmstepd 2>/dev/null || true
  for daemon in slurmd slurmctld slurmdbd; do
    pkill -x "$daemon" 2>/dev/null || true
  done
  pkill -f "mariadbd --user=root --datadir=.* --port=3307" 2>/dev/null || true  # any cluster's
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 60); do  # until the port and the daemons are free
    pgrep -x slurmctld >/dev/null || pgrep -f "mariadbd.*--port=3307" >/dev/null || break
    sleep 0.5
  done
}

if [ "$action" = stop ]; then stop; exit 0; fi

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null \
    || ! command -v munged >/dev/null || ! command -v mariadbd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q slurm-wlm slurmdbd munge mariadb-server >/dev/null
fi

if sinfo -h -o %P 2>/dev/null | grep -q debug && sacct -n -X -S now >/dev/null 2>&1; then
  echo debug; exit 0
fi
stop

# munge: a key of its own, the daemon as root with its socket in the usual place
mkdir -p /etc/munge /var/run/munge /var/log/munge /var/lib/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
chmod 400 /etc/munge/munge.key
chown -R root:root /etc/munge /var/run/munge /var/log/munge /var/lib/munge
munged --force

# MariaDB on a socket and port of localhost, the accounting database and its user
db="$root/mariadb"
if [ ! -d "$db/mysql" ]; then
  mkdir -p "$db"
  mariadb-install-db --user=root --datadir="$db" --auth-root-authentication-method=normal >/dev/null
fi
mariadbd --user=root --datadir="$db" --socket="$run/mariadb.sock" --bind-address=127.0.0.1 \
  --port=3307 --pid-file="$run/mariadb.pid" --skip-log-error >"$run/mariadb.log" 2>&1 &
for _ in $(seq 120); do
  mariadb --socket="$run/mariadb.sock" -uroot -e 'select 1' >/dev/null 2>&1 && break
  sleep 0.5
done
mariadb --socket="$run/mariadb.sock" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'linrec';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'linrec';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL

mkdir -p /etc/slurm "$root/spool/ctld" "$root/spool/d" "$root/log"
cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=slurm
StoragePass=linrec
StorageLoc=slurm_acct_db
LogFile=$root/log/slurmdbd.log
PidFile=$run/slurmdbd.pid
EOF
chmod 600 /etc/slurm/slurmdbd.conf

memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > /etc/slurm/slurm.conf <<EOF
ClusterName=linrec
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$root/spool/ctld
SlurmdSpoolDir=$root/spool/d
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
KillWait=5
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

slurmdbd
for _ in $(seq 120); do
  sacctmgr -n list cluster >/dev/null 2>&1 && break
  sleep 0.5
done
sacctmgr -i add cluster linrec >/dev/null 2>&1 || true
slurmctld
slurmd
for _ in $(seq 120); do
  [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] && break
  scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
  sleep 0.5
done
sinfo -h -o %P | tr -d '*'

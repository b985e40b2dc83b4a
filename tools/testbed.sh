#!/usr/bin/env bash
# Multi-node test bed on one machine: N "nodes" as Linux network namespaces on a
# private bridge, a real Slurm (one slurmd per namespace, slurmctld in the root
# namespace) and munge, all under one base directory. Needs root.
#
#   tools/testbed.sh up          # create namespaces, bridge, munge, slurmctld, slurmds (idempotent)
#   tools/testbed.sh down        # stop what `up` started (pid files, namespaces), remove the network
#   tools/testbed.sh status      # namespaces, daemons, sinfo, qdiscs, veth byte counters
#   tools/testbed.sh shape RATE  # tc tbf at RATE (e.g. 2gbit, 500mbit) on every veth; `shape off`
#   tools/testbed.sh selftest    # srun on every node + an MPI allreduce whose bytes must cross the veths
#   tools/testbed.sh env         # the exports to use the test bed: eval "$(tools/testbed.sh env)"
#   tools/testbed.sh run RATE CMD...  # CMD with the test bed up, shaped at RATE and its exports
#                                # set, holding /work/testbed.lock; the test bed is taken down after
#
# Settings (environment):
#   NODES=2                        number of nodes for `up` (the other verbs use the count `up` recorded)
#   TESTBED_DIR=/tmp/ml_comm-testbed  config, state, logs, munge key/socket, pid files
#   TESTBED_NET=10.213.77          the private /24: bridge .1 (slurmctld), node i at .(10+i)
#   TESTBED_PREFIX=mlctb           prefix of namespace, bridge and veth names
#   TESTBED_PORT=6917              slurmctld port (slurmd uses the next one)
#
# The /24 has no default route, no forwarding and no NAT: it exists only on this
# machine. Packages (Debian): slurmd slurmctld slurm-client munge iproute2.
# Pitfalls handled here (found when the test bed was built): slurmd starts under
# `nsenter --net` (not `ip netns exec`, which remounts /sys and breaks cgroup
# detection), cgroup.conf pins cgroup/v1 without automount, slurmctld and each
# slurmd get their own UTS hostname, MpiDefault=pmi2 for the mpich wheel. MPI
# jobs must set UCX_TLS=self,tcp UCX_NET_DEVICES=eth0 (see `env`), or UCX moves
# the data through shared memory and nothing crosses the veths.
set -euo pipefail

BASE=${TESTBED_DIR:-/tmp/ml_comm-testbed}
NET=${TESTBED_NET:-10.213.77}
PREFIX=${TESTBED_PREFIX:-mlctb}
CTL_PORT=${TESTBED_PORT:-6917}
SLURMD_PORT=$((CTL_PORT + 1))
BRIDGE=${PREFIX}-br0
CTL_HOST=tbctl
CTL_ADDR=${NET}.1
CONF=$BASE/etc/slurm.conf
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "testbed: $*" >&2; exit 1; }
say() { echo "testbed: $*"; }

nodes() {
    # `up` takes NODES from the environment; the other verbs use the count `up` recorded.
    if [[ ${1:-} == up && -n ${NODES:-} ]]; then echo "$NODES"
    elif [[ -s $BASE/nodes ]]; then cat "$BASE/nodes"
    else echo "${NODES:-2}"; fi
}
ns_name() { echo "${PREFIX}-node$1"; }
veth_name() { echo "${PREFIX}-v$1"; }
node_addr() { echo "${NET}.$((10 + $1))"; }

# A pid file's process is alive and is the program we started (not a reused pid).
alive() {
    local pidfile=$1 comm=$2 pid
    # The daemon may delete its pid file (or exit) between these reads: a read
    # that fails means "not alive", never an error that stops the script.
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
    ! grep -q '^State:.*zombie' "/proc/$pid/status" 2>/dev/null
}

stop_pidfile() {
    local pidfile=$1 comm=$2 pid i
    if alive "$pidfile" "$comm"; then
        pid=$(<"$pidfile")
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pidfile" "$comm" || break
            sleep 0.1
        done
        if alive "$pidfile" "$comm"; then kill -KILL "$pid" 2>/dev/null || true; fi
        say "stopped $comm (pid $pid)"
    fi
    rm -f "$pidfile"
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, veths, daemons)"
}

need_tools() {
    local missing=() t
    for t in ip tc nsenter unshare munged mungekey slurmctld slurmd srun sinfo scontrol; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    if ((${#missing[@]})); then
        die "missing ${missing[*]}; install: apt-get install -y slurmd slurmctld slurm-client munge iproute2"
    fi
}

# ------------------------------------------------------------------ network

net_up() {
    local n=$1 i ns veth
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1" || true
        ip addr add "$CTL_ADDR/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    for ((i = 1; i <= n; i++)); do
        ns=$(ns_name "$i")
        veth=$(veth_name "$i")
        [[ -e /run/netns/$ns ]] || ip netns add "$ns"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$ns"
            sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" || true
            nsenter --net="/run/netns/$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
            nsenter --net="/run/netns/$ns" ip addr add "$(node_addr "$i")/24" dev eth0
        fi
        ip link set "$veth" master "$BRIDGE" up
        nsenter --net="/run/netns/$ns" ip link set lo up
        nsenter --net="/run/netns/$ns" ip link set eth0 up
    done
}

net_down() {
    local ns veth
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-node[0-9]*$" || true); do
        ip netns del "$ns" && say "removed namespace $ns"
    done
    for veth in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
        grep "^${PREFIX}-v[0-9]*$" || true); do
        ip link del "$veth" 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" && say "removed bridge $BRIDGE"
    fi
}

# ------------------------------------------------------------------ config

write_config() {
    local n=$1 i cpus
    cpus=$(nproc)
    mkdir -p "$BASE"/{etc,state,log,run,spool,tmp}
    for ((i = 1; i <= n; i++)); do mkdir -p "$BASE/spool/node$i" "$BASE/tmp/node$i"; done
    echo "$n" >"$BASE/nodes"
    {
        echo "# written by tools/testbed.sh; regenerated by every \`up\`"
        echo "ClusterName=mlcomm-testbed"
        echo "SlurmctldHost=$CTL_HOST($CTL_ADDR)"
        echo "SlurmctldPort=$CTL_PORT"
        echo "SlurmdPort=$SLURMD_PORT"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$BASE/munge/munge.socket"
        echo "StateSaveLocation=$BASE/state"
        echo "SlurmdSpoolDir=$BASE/spool/%n"
        echo "SlurmctldPidFile=$BASE/run/slurmctld.pid"
        echo "SlurmdPidFile=$BASE/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$BASE/log/slurmctld.log"
        echo "SlurmdLogFile=$BASE/log/slurmd-%n.log"
        echo "TmpFS=$BASE/tmp/%n"
        echo "MpiDefault=pmi2"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/none"
        echo "SchedulerType=sched/backfill"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core"
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "InactiveLimit=0"
        echo "KillWait=5"
        echo "MinJobAge=30"
        echo "SlurmdTimeout=60"
        echo "MailProg=/bin/true"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        for ((i = 1; i <= n; i++)); do
            echo "NodeName=node$i NodeAddr=$(node_addr "$i") CPUs=$cpus State=UNKNOWN"
        done
        echo "PartitionName=testbed Nodes=ALL Default=YES MaxTime=60 OverSubscribe=EXCLUSIVE State=UP"
    } >"$CONF"
    {
        echo "CgroupPlugin=cgroup/v1"
        echo "CgroupAutomount=no"
    } >"$BASE/etc/cgroup.conf"
    # Names the daemons resolve, bind-mounted over /etc/hosts in their own mount
    # namespace only, so that no name lookup leaves the machine.
    {
        echo "127.0.0.1 localhost"
        echo "$CTL_ADDR $CTL_HOST"
        for ((i = 1; i <= n; i++)); do echo "$(node_addr "$i") node$i"; done
    } >"$BASE/etc/hosts"
}

# ------------------------------------------------------------------ daemons

munge_up() {
    mkdir -p "$BASE/munge"
    chmod 700 "$BASE/munge"
    if [[ ! -s $BASE/munge/munge.key ]]; then
        mungekey --create --keyfile="$BASE/munge/munge.key" 2>/dev/null ||
            dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 600 "$BASE/munge/munge.key"
    alive "$BASE/munge/munged.pid" munged && return 0
    rm -f "$BASE/munge/munge.socket" "$BASE/munge/munge.socket.lock"
    munged --force --socket="$BASE/munge/munge.socket" --key-file="$BASE/munge/munge.key" \
        --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" \
        --seed-file="$BASE/munge/munged.seed" ||
        die "munged failed to start; see $BASE/log/munged.log"
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -S $BASE/munge/munge.socket ]] && alive "$BASE/munge/munged.pid" munged && break
        sleep 0.1
    done
    alive "$BASE/munge/munged.pid" munged || die "munged did not start; see $BASE/log/munged.log"
    say "munged up (socket $BASE/munge/munge.socket)"
}

# Run a daemon under its own UTS hostname and in a private mount namespace that
# shows $BASE/etc/hosts as /etc/hosts (nothing is written to /etc):
#   [nsenter --net=...] "${IN_HOST[@]}" NAME HOSTS_FILE CMD...
IN_HOST=(unshare --uts --mount --propagation private -- /bin/sh -c
    'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"')

slurmctld_up() {
    alive "$BASE/run/slurmctld.pid" slurmctld && return 0
    # -c: start without the job records of an earlier test bed
    "${IN_HOST[@]}" "$CTL_HOST" "$BASE/etc/hosts" slurmctld -c -f "$CONF" ||
        die "slurmctld failed; see $BASE/log/slurmctld.log"
    say "slurmctld up ($CTL_HOST, $CTL_ADDR:$CTL_PORT)"
}

slurmd_up() {
    local i=$1 ns
    ns=$(ns_name "$i")
    alive "$BASE/run/slurmd-node$i.pid" slurmd && return 0
    # nsenter, not `ip netns exec` (which remounts /sys and hides the cgroups from slurmd)
    nsenter --net="/run/netns/$ns" -- "${IN_HOST[@]}" "node$i" "$BASE/etc/hosts" \
        slurmd -f "$CONF" -N "node$i" ||
        die "slurmd node$i failed; see $BASE/log/slurmd-node$i.log"
    say "slurmd node$i up (namespace $ns, $(node_addr "$i"))"
}

wait_idle() {
    local n=$1 i idle states=""
    for ((i = 0; i < 300; i++)); do
        states=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %T' 2>/dev/null || true)
        idle=$(grep -c ' idle$' <<<"$states" || true)
        ((idle == n)) && return 0
        if ((i % 20 == 19)) && grep -qE ' (down|drained|draining)' <<<"$states"; then
            SLURM_CONF=$CONF scontrol update nodename="node[1-$n]" state=resume 2>/dev/null || true
        fi
        sleep 0.1
    done
    echo "$states" >&2
    die "nodes not idle after 30 s; logs in $BASE/log"
}

# ------------------------------------------------------------------ verbs

cmd_up() {
    need_root
    need_tools
    local n i t0=$SECONDS
    n=$(nodes up)
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "NODES must be 1..200, got $n"
    if [[ -f $BASE/nodes && $(<"$BASE/nodes") != "$n" ]] && alive "$BASE/run/slurmctld.pid" slurmctld; then
        die "the test bed is up with $(<"$BASE/nodes") nodes; run \`$0 down\` first"
    fi
    write_config "$n"
    net_up "$n"
    munge_up
    slurmctld_up
    for ((i = 1; i <= n; i++)); do slurmd_up "$i"; done
    wait_idle "$n"
    say "up: $n nodes idle after $((SECONDS - t0)) s; use: export SLURM_CONF=$CONF"
}

cmd_down() {
    need_root
    local pidfile ns pid pids
    for pidfile in "$BASE"/run/slurmd-node*.pid; do
        [[ -e $pidfile ]] && stop_pidfile "$pidfile" slurmd
    done
    # Job steps (slurmstepd and the tasks) outlive slurmd; they are the only
    # processes in the test bed's namespaces.
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-node[0-9]*$" || true); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [[ -n $pids ]]; then
            say "killing leftover processes in $ns: $(tr '\n' ' ' <<<"$pids")"
            for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
            sleep 0.2
        fi
    done
    stop_pidfile "$BASE/run/slurmctld.pid" slurmctld
    stop_pidfile "$BASE/munge/munged.pid" munged
    rm -f "$BASE/munge/munge.socket" "$BASE/munge/munge.socket.lock"
    rm -rf "$BASE/state" "$BASE/spool" "$BASE/tmp"
    net_down
    say "down (logs kept in $BASE/log)"
}

cmd_status() {
    local n i veth ns rc=0
    n=$(nodes)
    echo "base: $BASE  nodes: $n  net: $NET.0/24  bridge: $BRIDGE"
    if alive "$BASE/munge/munged.pid" munged; then echo "munged: running (pid $(<"$BASE/munge/munged.pid"))"
    else echo "munged: not running"; rc=1; fi
    if alive "$BASE/run/slurmctld.pid" slurmctld; then
        echo "slurmctld: running (pid $(<"$BASE/run/slurmctld.pid"))"
    else echo "slurmctld: not running"; rc=1; fi
    for ((i = 1; i <= n; i++)); do
        ns=$(ns_name "$i")
        veth=$(veth_name "$i")
        if alive "$BASE/run/slurmd-node$i.pid" slurmd; then
            printf 'node%d: slurmd pid %s, ' "$i" "$(<"$BASE/run/slurmd-node$i.pid")"
        else printf 'node%d: slurmd not running, ' "$i"; rc=1; fi
        if [[ -r /sys/class/net/$veth/statistics/tx_bytes ]]; then
            printf '%s %s, veth %s tx %s B rx %s B, qdisc: %s\n' "$ns" "$(node_addr "$i")" "$veth" \
                "$(<"/sys/class/net/$veth/statistics/tx_bytes")" \
                "$(<"/sys/class/net/$veth/statistics/rx_bytes")" \
                "$(tc qdisc show dev "$veth" root | head -n 1)"
        else echo "no veth $veth"; rc=1; fi
    done
    if alive "$BASE/run/slurmctld.pid" slurmctld; then SLURM_CONF=$CONF sinfo -N || rc=1; fi
    return $rc
}

# RATE (tc syntax: bit, kbit, mbit, gbit, tbit, or bps, kbps, mbps, gbps = bytes) -> bytes/s
rate_bytes() {
    local r=${1,,} num unit
    [[ $r =~ ^([0-9]+(\.[0-9]+)?)([a-z]*)$ ]] || die "cannot read rate '$1' (e.g. 2gbit, 500mbit)"
    num=${BASH_REMATCH[1]}
    unit=${BASH_REMATCH[3]}
    case $unit in
    bit | "") awk -v x="$num" 'BEGIN{printf "%d", x / 8}' ;;
    kbit) awk -v x="$num" 'BEGIN{printf "%d", x * 1e3 / 8}' ;;
    mbit) awk -v x="$num" 'BEGIN{printf "%d", x * 1e6 / 8}' ;;
    gbit) awk -v x="$num" 'BEGIN{printf "%d", x * 1e9 / 8}' ;;
    tbit) awk -v x="$num" 'BEGIN{printf "%d", x * 1e12 / 8}' ;;
    bps) awk -v x="$num" 'BEGIN{printf "%d", x}' ;;
    kbps) awk -v x="$num" 'BEGIN{printf "%d", x * 1e3}' ;;
    mbps) awk -v x="$num" 'BEGIN{printf "%d", x * 1e6}' ;;
    gbps) awk -v x="$num" 'BEGIN{printf "%d", x * 1e9}' ;;
    *) die "unknown rate unit '$unit' in '$1'" ;;
    esac
}

cmd_shape() {
    need_root
    local rate=${1:-} n i veth ns bytes burst
    [[ -n $rate ]] || die "usage: $0 shape RATE|off   (e.g. 2gbit)"
    n=$(nodes)
    if [[ $rate != off ]]; then
        bytes=$(rate_bytes "$rate")
        # 2 ms of traffic, at least 128 KiB (a GSO packet is up to 64 KiB)
        burst=$((bytes / 500))
        ((burst >= 131072)) || burst=131072
    fi
    for ((i = 1; i <= n; i++)); do
        veth=$(veth_name "$i")
        ns=$(ns_name "$i")
        ip link show "$veth" >/dev/null 2>&1 || die "no $veth: run \`$0 up\` first"
        if [[ $rate == off ]]; then
            tc qdisc del dev "$veth" root 2>/dev/null || true
            nsenter --net="/run/netns/$ns" tc qdisc del dev eth0 root 2>/dev/null || true
        else
            # both ends: egress of the node (eth0) and egress towards it (host veth)
            tc qdisc replace dev "$veth" root tbf rate "$rate" burst "$burst" latency 50ms
            nsenter --net="/run/netns/$ns" tc qdisc replace dev eth0 root tbf rate "$rate" \
                burst "$burst" latency 50ms
        fi
    done
    if [[ $rate == off ]]; then say "shaping removed on $n nodes"
    else say "tbf $rate (burst $burst B) on both ends of $n veths"; fi
}

veth_bytes() { # tx and rx bytes of node i's host-side veth (tx: into the node)
    local stats
    stats=/sys/class/net/$(veth_name "$1")/statistics
    echo "$(<"$stats/tx_bytes") $(<"$stats/rx_bytes")"
}

cmd_selftest() {
    need_root
    local n i out want="" before=() py need tx0 rx0 tx1 rx1 nbytes=$((16 << 20))
    n=$(nodes)
    cmd_status >/dev/null || die "test bed not (fully) up; run \`$0 up\`"
    for ((i = 1; i <= n; i++)); do
        if nsenter --net="/run/netns/$(ns_name "$i")" ip route | grep -q '^default'; then
            die "$(ns_name "$i") has a default route"
        fi
    done
    out=$(SLURM_CONF=$CONF timeout 60 srun -N "$n" --ntasks-per-node=1 --time=1 hostname | sort)
    for ((i = 1; i <= n; i++)); do want+="node$i"$'\n'; done
    [[ "$out"$'\n' == "$want" ]] || die "srun hostname gave: $out"
    say "srun -N $n hostname: $(tr '\n' ' ' <<<"$out")"
    py=$ROOT/.venv/bin/python
    if [[ ! -x $py ]] || ((n < 2)); then
        say "selftest passed (no MPI check: needs .venv and 2+ nodes)"
        return 0
    fi
    for ((i = 1; i <= n; i++)); do before[i]=$(veth_bytes "$i"); done
    # Through the tests' step runner: a start-up that Slurm's PMI server rejects starts
    # again with the heap shifted (tests/testbed/slurm_step.py says why).
    SLURM_CONF=$CONF UCX_TLS=self,tcp UCX_NET_DEVICES=eth0 "$py" "$ROOT/tests/testbed/slurm_step.py" \
        120 -N "$n" --ntasks-per-node=1 --time=2 --mpi=pmi2 "$py" -c "
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
x = np.full($nbytes // 8, c.rank + 1.0)
c.Allreduce(MPI.IN_PLACE, x)
assert (x == c.size * (c.size + 1) / 2).all(), x[:4]
if c.rank == 0:
    print('testbed: MPI_Allreduce of $nbytes B on', c.size, 'ranks: ok')
"
    # Every rank must send its whole contribution and receive the others' sum: at least
    # the buffer each way, whatever the algorithm (a ring moves 2(n-1)/n of it).
    need=$nbytes
    for ((i = 1; i <= n; i++)); do
        read -r tx0 rx0 <<<"${before[i]}"
        read -r tx1 rx1 <<<"$(veth_bytes "$i")"
        say "node$i: $((rx1 - rx0)) B out, $((tx1 - tx0)) B in over its veth (at least $need B each)"
        if ((rx1 - rx0 < need || tx1 - tx0 < need)); then
            die "the allreduce did not cross the veths (shared memory? UCX_TLS=self,tcp UCX_NET_DEVICES=eth0)"
        fi
    done
    say "selftest passed"
}

cmd_env() {
    echo "export SLURM_CONF=$CONF"
    echo "export UCX_TLS=self,tcp UCX_NET_DEVICES=eth0"
}

cmd_run() {
    local rate=${1:?run: RATE, then the command}
    shift
    [[ $# -gt 0 ]] || die "run: a command after RATE"
    exec 9>/work/testbed.lock
    flock -x 9
    trap 'cmd_down >/dev/null 2>&1 || true' EXIT
    cmd_up
    eval "$(cmd_env)"
    cmd_shape "$rate"
    "$@"
}

case ${1:-} in
up) cmd_up ;;
run) shift; cmd_run "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
shape) cmd_shape "${2:-}" ;;
selftest) cmd_selftest ;;
env) cmd_env ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac

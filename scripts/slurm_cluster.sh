#!/usr/bin/env bash
# A real Slurm cluster of several nodes on this one host, for trying env servers "one per Slurm node" without
# a cluster: its own munged and key, its own slurmctld, one slurmd per node (n1..nN, multiple-slurmd), and for
# each node its own Docker engine (scripts/second_docker_engine.sh), all under DIR; two DIRs never share a
# daemon, a key or a port. A task prolog points each job step at its node's engine (DOCKER_HOST, AIR_NODE_NAME).
#   bash scripts/slurm_cluster.sh start DIR [--nodes N] [--image IMAGE]...   # N nodes (default 2), each IMAGE
#                                      copied into every node's engine; waits until every node is idle
#   bash scripts/slurm_cluster.sh stop DIR      # cancels every job, stops every daemon and engine of DIR
#   bash scripts/slurm_cluster.sh status DIR    # what runs (exit 0 running, 3 stopped, 1 partly running)
#   eval "$(bash scripts/slurm_cluster.sh env DIR)"   # then srun, sbatch, squeue, scancel use this cluster
# Needs root (munged, slurmd and dockerd run as root) and Debian's slurmctld slurmd slurm-client munge docker.io.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE_SCRIPT="$HERE/second_docker_engine.sh"
START_TIMEOUT=${AIR_SLURM_START_TIMEOUT:-90}  # seconds for every node to be idle
PORT_LOCK=/tmp/air-slurm-cluster-ports.lock  # held while one start picks its ports and its daemons bind them

usage() {
    echo "usage: $0 start DIR [--nodes N] [--image IMAGE]... | stop DIR | status DIR | env DIR" >&2
    exit 2
}
die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }
need_root() {  # the way to root named for this host: sudo where there is one, else root's own shell
    [[ $EUID -eq 0 ]] && return 0
    local how="run it as root"
    command -v sudo >/dev/null 2>&1 && how="sudo bash $0 $1 ..."
    die "$1 needs root (munged, slurmctld, slurmd and dockerd run as root): $how"
}

[[ $# -ge 2 ]] || usage
action=$1
dir=$(realpath -m -- "$2")
shift 2

conf="$dir/slurm.conf"
state_file="$dir/cluster.env"  # NODES, CLUSTER_NAME, CTLD_PORT, NODE_PORTS of the last start
munge_dir="$dir/munge"
socket="$munge_dir/munge.socket"
munged_pid="$munge_dir/munged.pid"
ctld_pid="$dir/run/slurmctld.pid"

node_names() {  # the nodes of the last start (none before the first)
    [[ -f "$state_file" ]] || return 0
    local nodes
    nodes=$(sed -n 's/^NODES=//p' "$state_file")
    [[ "$nodes" =~ ^[0-9]+$ ]] || die "$state_file: no NODES=<number> line"
    for ((k = 1; k <= nodes; k++)); do echo "n$k"; done
}

# A pid file's process, if it is alive and one of DIR's (its command line names DIR: a pid file left
# behind by a stopped daemon may name a pid since reused by another program, which must never be signalled).
our_pid() {
    local file=$1 pid
    [[ -f "$file" ]] || return 1
    pid=$(tr -d ' \n' < "$file")
    [[ "$pid" =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/" || return 1
    echo "$pid"
}

# Every daemon of DIR, as "name pidfile" lines.
daemons() {
    echo "munged $munged_pid"
    echo "slurmctld $ctld_pid"
    local node
    for node in $(node_names); do
        echo "slurmd-$node $dir/run/slurmd-$node.pid"
        echo "dockerd-$node $dir/engines/$node/docker.pid"
    done
}

# SIGTERM, up to $3 seconds, then SIGKILL; returns when the process is gone.
stop_pid() {
    local name=$1 file=$2 wait_s=$3 pid i
    pid=$(our_pid "$file") || return 0
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < wait_s * 10; i++)); do [[ -d /proc/$pid ]] || return 0; sleep 0.1; done
    echo "$name (pid $pid) still runs after ${wait_s} s: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do [[ -d /proc/$pid ]] || return 0; sleep 0.1; done
    die "$name (pid $pid, $file) did not go even after SIGKILL"
}

# slurmstepd processes of DIR's slurmds (one holds its node's log file under DIR open), and their tasks: what
# a step leaves when its slurmd went before it ended. Found by what they hold open, never by name.
stray_steps() {
    local proc pid fd
    for proc in /proc/[0-9]*; do
        [[ "$(readlink "$proc/exe" 2>/dev/null)" == */slurmstepd* ]] || continue  # Debian: slurmstepd-wlm
        for fd in "$proc"/fd/*; do
            if [[ "$(readlink "$fd" 2>/dev/null)" == "$dir"/* ]]; then
                pid=${proc#/proc/}
                echo "$pid"
                descendants "$pid"
                break
            fi
        done
    done
}
descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

slurm() { SLURM_CONF="$conf" "$@"; }

listening_ports() {  # every TCP port something listens on (IPv4 and IPv6), from /proc/net
    local file _ address _ state _
    for file in /proc/net/tcp /proc/net/tcp6; do
        [[ -r "$file" ]] || continue
        while read -r _ address _ state _; do
            if [[ "$state" == 0A ]]; then echo $((16#${address##*:})); fi
        done < <(tail -n +2 "$file")
    done | sort -u
}

# N ports nobody listens on, from below the kernel's ephemeral range (which outgoing connections use).
free_ports() {
    local wanted=$1 taken port
    local -a chosen=()
    taken=" $(listening_ports | tr '\n' ' ') "
    while ((${#chosen[@]} < wanted)); do
        port=$((20000 + RANDOM % 12000))
        [[ "$taken" == *" $port "* ]] && continue
        taken+="$port "
        chosen+=("$port")
    done
    echo "${chosen[@]}"
}

# "running", "stopped" or "partly running" (echoed), from the pid files.
cluster_state() {
    local name file up=0 down=0
    while read -r name file; do
        if our_pid "$file" >/dev/null; then up=$((up + 1)); else down=$((down + 1)); fi
    done < <(daemons)
    if ((up == 0)); then echo stopped; elif ((down == 0)); then echo running; else echo "partly running"; fi
}

do_status() {
    local name file pid state
    if [[ ! -f "$state_file" ]]; then
        echo "no cluster was started in $dir: stopped"
        return 3
    fi
    while read -r name file; do
        if pid=$(our_pid "$file"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; fi
    done < <(daemons)
    state=$(cluster_state)
    if our_pid "$ctld_pid" >/dev/null; then
        slurm sinfo -N -o '%N %P %t' 2>&1 || true
        slurm squeue -h -o '%i %j %T %N' 2>&1 | sed 's/^/job /' || true
    fi
    echo "cluster in $dir: $state"
    case "$state" in running) return 0 ;; stopped) return 3 ;; *) return 1 ;; esac
}

stop_slurm_then_munged() {
    local node pids
    for node in $(node_names); do stop_pid "slurmd-$node" "$dir/run/slurmd-$node.pid" 20 & done
    stop_pid slurmctld "$ctld_pid" 20 &
    wait
    pids=$(stray_steps)
    if [[ -n "$pids" ]]; then
        echo "killing steps left by the slurmds: $(echo "$pids" | tr '\n' ' ')" >&2
        # shellcheck disable=SC2086  # one argument per pid
        kill -9 $pids 2>/dev/null || true
        local pid
        for pid in $pids; do
            for _ in $(seq 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
        done
    fi
    stop_pid munged "$munged_pid" 10
}

do_stop() {
    local started=$SECONDS name file node jobs was
    was=$(cluster_state)  # stopped too goes on: an engine or a step of a crashed cluster may be left
    if our_pid "$ctld_pid" >/dev/null; then
        jobs=$(slurm squeue -h -o '%i' 2>/dev/null | tr '\n' ' ' || true)
        if [[ -n "${jobs// /}" ]]; then
            echo "cancelling jobs: $jobs"
            # shellcheck disable=SC2086  # one argument per job id
            slurm scancel $jobs 2>/dev/null || true
            for _ in $(seq 60); do
                [[ -z "$(slurm squeue -h -o '%i' 2>/dev/null || true)" ]] && break
                sleep 0.5
            done
        fi
    fi
    # With no job left, the engines stop beside the Slurm daemons; munged after the daemons (they talk through it).
    for node in $(node_names); do
        if [[ -d "$dir/engines/$node" ]]; then
            bash "$ENGINE_SCRIPT" stop "$dir/engines/$node" > "$dir/log/engine-$node-stop.log" 2>&1 &
        fi
    done
    stop_slurm_then_munged &
    wait
    while read -r name file; do
        if our_pid "$file" >/dev/null; then die "$name still runs after stop ($file)"; fi
    done < <(daemons)
    if [[ "$was" == stopped ]]; then
        echo "no Slurm cluster runs in $dir"
    else
        echo "stopped the Slurm cluster in $dir ($((SECONDS - started)) s)"
    fi
}

write_conf() {
    local nodes=$1 cluster=$2 ctld_port=$3 node_ports=$4 hw host k
    local -a ports
    read -r -a ports <<< "$node_ports"
    host=$(hostname -s)
    # What the host has (CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory), as slurmd sees it.
    hw=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
    [[ -n "$hw" ]] || die "slurmd -C printed nothing: cannot size the nodes"
    cat > "$conf" <<EOF
# Written by scripts/slurm_cluster.sh start: a cluster of $nodes node(s) on this one host, everything under $dir.
ClusterName=$cluster
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmctldPidFile=$ctld_pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TaskProlog=$dir/task_prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=300
MessageTimeout=30
KillWait=5
MinJobAge=60
InactiveLimit=0
MailProg=/bin/true
EOF
    for ((k = 1; k <= nodes; k++)); do
        echo "NodeName=n$k NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[k - 1]} $hw State=UNKNOWN" >> "$conf"
    done
    echo "PartitionName=env Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP" >> "$conf"
}

do_start() {
    local nodes=2 started=$SECONDS state cluster ctld_port node_ports k waited
    local -a images=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --nodes) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage; nodes=$2; shift 2 ;;
        --image) [[ $# -ge 2 ]] || usage; images+=("$2"); shift 2 ;;
        *) usage ;;
        esac
    done
    state=$(cluster_state)
    if [[ "$state" == running ]]; then
        echo "a Slurm cluster already runs in $dir:"
        if [[ $(node_names | wc -l) -ne $nodes ]]; then
            echo "(it has $(node_names | wc -l) node(s), not the $nodes asked for: stop it first to change that)"
        fi
        do_status || true
        return 0
    fi
    [[ "$state" == stopped ]] || die "a cluster in $dir is partly running (see: bash $0 status $dir): stop it first"
    local cmd
    for cmd in munged mungekey slurmctld slurmd sinfo srun scancel; do
        command -v "$cmd" >/dev/null || die "$cmd not found: apt-get install -y slurmctld slurmd slurm-client munge"
    done
    command -v dockerd >/dev/null || die "dockerd not found: apt-get install -y docker.io"
    # Unix sockets live under DIR (munged's, each engine's, each step's in the spool): 108 bytes at most.
    ((${#dir} <= 64)) || die "$dir is too long for the Unix sockets under it (64 characters at most)"

    mkdir -p "$dir"/{state,run,log,spool,engines} "$munge_dir"
    chmod 755 "$munge_dir"  # munged wants its socket's folder searchable by all (the key stays 0600)
    rm -f "$dir"/run/*.pid "$munged_pid"
    for ((k = 1; k <= nodes; k++)); do mkdir -p "$dir/spool/n$k"; done
    cluster="air$(printf %s "$dir" | sha1sum | cut -c1-10)"  # unique per DIR: state of another DIR never matches
    # A start that fails stops what it started (its logs stay).
    trap 'echo "start failed: stopping what it started (logs in $dir/log)" >&2; do_stop >/dev/null 2>&1 || true' EXIT
    # Recorded before the first daemon starts, so that stop finds every one of them.
    printf 'NODES=%s\nCLUSTER_NAME=%s\n' "$nodes" "$cluster" > "$state_file"

    # munged of our own, on a key of our own. --force: a DIR under a world-writable folder (no sticky bit) is
    # then a warning in its log, not a refusal (munged 0.5.15 itself runs as root without it).
    [[ -s "$munge_dir/munge.key" ]] || mungekey --create --keyfile="$munge_dir/munge.key" 2>"$dir/log/mungekey.log" \
        || die "mungekey failed: $dir/log/mungekey.log"
    chmod 600 "$munge_dir/munge.key"
    munged --force --socket="$socket" --key-file="$munge_dir/munge.key" --pid-file="$munged_pid" \
        --log-file="$munge_dir/munged.log" --seed-file="$munge_dir/munged.seed" 2>>"$munge_dir/munged.log" \
        || die "munged did not start: $munge_dir/munged.log"
    munge -n -S "$socket" | unmunge -S "$socket" >/dev/null || die "munged does not answer: $munge_dir/munged.log"

    # One Docker engine per node, started side by side (each in its own network namespace).
    local -a engine_jobs=()
    for ((k = 1; k <= nodes; k++)); do
        bash "$ENGINE_SCRIPT" start "$dir/engines/n$k" "${images[@]}" > "$dir/log/engine-n$k.log" 2>&1 &
        engine_jobs+=($!)
    done
    local failed=""
    for ((k = 1; k <= nodes; k++)); do
        wait "${engine_jobs[k - 1]}" || failed+=" $dir/log/engine-n$k.log ($dir/engines/n$k/dockerd.log)"
    done
    [[ -z "$failed" ]] || die "a node's Docker engine did not start: read$failed"

    cat > "$dir/task_prolog.sh" <<EOF
#!/bin/sh
# Written by scripts/slurm_cluster.sh (TaskProlog): a task on node nK gets nK's own Docker engine.
echo "export DOCKER_HOST=unix://$dir/engines/\$SLURMD_NODENAME/docker.sock"
echo "export AIR_NODE_NAME=\$SLURMD_NODENAME"
EOF
    chmod 755 "$dir/task_prolog.sh"

    # Ports: picked and bound under one lock, so two clusters starting at once never pick the same.
    exec 9> "$PORT_LOCK"
    flock -w 120 9 || die "waited 120 s for $PORT_LOCK (another start holds it)"
    read -r ctld_port node_ports <<< "$(free_ports $((nodes + 1)))"
    printf 'CTLD_PORT=%s\nNODE_PORTS="%s"\n' "$ctld_port" "$node_ports" >> "$state_file"
    write_conf "$nodes" "$cluster" "$ctld_port" "$node_ports"
    slurmctld -f "$conf" -c 2>>"$dir/log/slurmctld.log" || die "slurmctld did not start: $dir/log/slurmctld.log"
    for ((k = 1; k <= nodes; k++)); do
        slurmd -f "$conf" -N "n$k" 2>>"$dir/log/slurmd-n$k.log" \
            || die "slurmd -N n$k did not start: $dir/log/slurmd-n$k.log"
    done
    local -a ports logs=("$dir/log/slurmctld.log")
    read -r -a ports <<< "$ctld_port $node_ports"
    for ((k = 1; k <= nodes; k++)); do logs+=("$dir/log/slurmd-n$k.log"); done
    local listening
    for ((k = 0; k <= nodes; k++)); do
        for ((waited = 0; waited < 300; waited++)); do
            listening=" $(listening_ports | tr '\n' ' ') "
            [[ "$listening" == *" ${ports[k]} "* ]] && break
            sleep 0.1
        done
        [[ "$listening" == *" ${ports[k]} "* ]] || die "nothing listens on port ${ports[k]} after 30 s: read ${logs[k]}"
    done
    exec 9>&-

    local deadline=$((SECONDS + START_TIMEOUT)) idle
    while true; do
        our_pid "$ctld_pid" >/dev/null || die "slurmctld exited: read $dir/log/slurmctld.log"
        idle=$(slurm sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l || true)  # not "idle*"
        ((idle == nodes)) && break
        if ((SECONDS >= deadline)); then
            local seen late
            seen=$(slurm sinfo -h -N -o '%N %t' 2>&1 || true)
            late=$(awk -v d="$dir/log" '$2 != "idle" { printf "%s/slurmd-%s.log ", d, $1 }' <<< "$seen")
            die "not every node is idle after $START_TIMEOUT s (sinfo: $(tr '\n' ' ' <<< "$seen")): read" \
                "${late:-$dir/log/slurmd-<node>.log }and $dir/log/slurmctld.log"
        fi
        sleep 0.5
    done
    trap - EXIT
    echo "a Slurm cluster of $nodes node(s) runs in $dir ($((SECONDS - started)) s): nodes $(node_names | tr '\n' ' ')"
    echo "use it: eval \"\$(bash $0 env $dir)\""
}

case "$action" in
start) need_root start; do_start "$@" ;;
stop) need_root stop; [[ $# -eq 0 ]] || usage; do_stop ;;
status) [[ $# -eq 0 ]] || usage; do_status ;;
env)
    [[ $# -eq 0 ]] || usage
    [[ -f "$conf" ]] || die "no cluster in $dir ($conf is missing): bash $0 start $dir"
    echo "export SLURM_CONF=$conf"
    ;;
*) usage ;;
esac

"""What root runs in a container on behalf of the agent's shell: finding the shell, and stopping a timed-out command.

Both are root's own ``docker exec`` with its own pipes, in ``/``: no process of the agent can read or write what
they say, and no folder the agent owns (renamed, removed, locked) can keep them from starting. The shell itself is
the agent's (any of its processes may write to its stdin or read its stdout), so nothing it says about itself is
believed; its identity comes from here. Pure bash over /proc (world-readable fields only: root in a container has
no ``CAP_SYS_PTRACE``), so it works in any image.
"""

from __future__ import annotations

import re

# Root's exec becoming ``user`` (a name or uid of /etc/passwd) only once it runs: an exec made as the agent is the
# agent's before the engine has finished starting it (its ``runc init`` runs as the agent), and a process of the agent
# that stops it there wedges the engine's lock on the container (every call on it hangs). Builtins until setpriv
# (util-linux, in Debian's and Ubuntu's base), so no fork is needed. Given ``uid`` (``agent_uid``), the user takes
# it first where it has another: only the first start of a container, before any process of the agent exists, so
# its one fork (chown) cannot meet a bomb. Not under a user namespace (an engine's userns-remap, a rootless
# engine): its map has no room for the uid, and the image's is kept.
_AS_USER = r"""
user=$1; want=$2; shift 2
while IFS=: read -r name _ uid gid _ home _; do
  [[ $name == "$user" || $uid == "$user" ]] && break; name=
done < /etc/passwd
[[ -n $name ]] || { echo "air: no user $user in the image's /etc/passwd"; exit 127; }
inside=; outside=; count=; read -r inside outside count < /proc/self/uid_map
if [[ -n $want && $uid != "$want" && $uid != 0 && "$inside $outside $count" == "0 0 4294967295" ]]; then
  shopt -s nullglob dotglob
  if [[ -d $home ]]; then
    chown -h --from="$uid" "$want" "$home" "$home"/* || { echo "air: cannot give $home to uid $want"; exit 126; }
  fi
  lines=()
  while IFS= read -r line || [[ -n $line ]]; do
    if [[ ${line%%:*} == "$name" ]]; then
      rest=${line#*:}; password=${rest%%:*}; rest=${rest#*:}; line="$name:$password:$want:${rest#*:}"
    fi
    lines+=("$line")
  done < /etc/passwd
  printf '%s\n' "${lines[@]}" > /etc/passwd || { echo "air: cannot give $name uid $want in /etc/passwd"; exit 126; }
  shopt -u nullglob dotglob
  uid=$want
fi
exec setpriv --reuid="$uid" --regid="$gid" --init-groups -- "$@"
"""


def as_user_argv(user: str, argv: list[str], uid: int | None = None) -> list[str]:
    """Root's exec that runs ``argv`` as ``user`` (run it with ``user="root"``), who first takes ``uid`` if given."""
    return ["bash", "-c", _AS_USER, "as-user", user, "" if uid is None else str(uid), *argv]


# The shell's own name (argv[0], set by ``exec -a`` as it starts): one per start, so an older shell is never taken
# for the new one. Only the engine makes processes whose parent is outside the container (ppid 0), and the newest
# of them with the name is the exec just started: an agent's process may copy the name but not be that exec.
_FIND_SHELL = r"""
want=$1; best=; best_start=-1
for stat in /proc/[0-9]*/stat; do
  line=; read -r -d '' line 2>/dev/null < "$stat"
  [[ -n $line ]] || continue
  pid=${line%% *}; rest=${line##*) }
  set -- $rest
  [[ $2 == 0 && $1 != [ZX] ]] || continue
  arg0=; IFS= read -r -d '' arg0 2>/dev/null < "/proc/$pid/cmdline"
  [[ $arg0 == "$want" ]] || continue
  (( ${20} > best_start )) && { best=$pid; best_start=${20}; }
done
line=; read -r -d '' line < /proc/$$/stat; set -- ${line##*) }
echo "shell ${best:-none} ${best_start} now ${20}"
"""

_FOUND = re.compile(r"shell (\d+|none) (-?\d+) now (\d+)")


def find_shell_argv(name: str) -> list[str]:
    """Root's exec that prints the pid and start (ticks since boot) of the live exec named ``name``, and its own
    start (now, in the same clock)."""
    return ["bash", "-c", _FIND_SHELL, "find-shell", name]


def parse_found(output: str) -> tuple[int | None, int] | None:
    """(the shell's pid or None when no such shell lives, root's own start in ticks) from ``find_shell_argv``'s
    output; None when it said something else."""
    found = _FOUND.search(output)
    if not found:
        return None
    return (None if found[1] == "none" else int(found[1])), int(found[3])


# Every process of one user killed, by root: a process of the agent can stop (SIGSTOP) anything its uid runs, a kill
# of its own included (which then never returned), but never root's. A kill by pid races a fork bomb (a pid freed is
# taken again), and in a container of one CPU sixty forking processes leave root's passes over /proc a sixtieth of it
# (seconds a pass). So everything is stopped first with one ``kill -STOP -1`` (every process of the container but
# its init and this one: the kernel's walk, and a fork that a pending stop reaches is undone, so none escapes it);
# then each pass kills what it finds stopped and stops what runs (a fork made before the stop reached its maker),
# until none of the user's is alive but zombies, for up to 10 s; then ``kill -CONT -1`` lets root's own go on.
# Builtins only, no ``sleep`` between passes either: it runs with every pid taken (the stopped processes keep theirs
# until they are killed). A pid freed and taken by one of root's between the read and the signal would need pid
# numbers to wrap in that instant. Shared by root's exec (``kill_user_argv``) and the keep-alive (``keep_alive``).
KILL_PASSES = r"""
kill_passes() {
  local uid=$1 spare=$2 until=$((SECONDS + 10)) name number status real state key value pid running stopped
  if [[ $uid != +([0-9]) ]]; then
    while IFS=: read -r name _ number _; do [[ $name == "$uid" ]] && uid=$number; done < /etc/passwd
  fi
  [[ $uid == +([0-9]) && $uid != 0 ]] || return 2
  kill -STOP -1 2>/dev/null
  while (( SECONDS < until )); do
    running=(); stopped=()
    for status in /proc/[0-9]*/status; do
      real=; state=
      while read -r key value _; do
        case $key in State:) state=$value ;; Uid:) real=$value; break ;; esac
      done 2>/dev/null < "$status"
      [[ $real == "$uid" && $state != [ZX] ]] || continue
      pid=${status#/proc/}; pid=${pid%/status}
      [[ $pid == "$spare" ]] && continue
      if [[ $state == [Tt] ]]; then stopped+=("$pid"); else running+=("$pid"); fi
    done
    (( ${#running[@]} + ${#stopped[@]} )) || { kill -CONT -1 2>/dev/null; return 0; }
    (( ${#running[@]} )) && kill -STOP "${running[@]}" 2>/dev/null
    (( ${#stopped[@]} )) && kill -KILL "${stopped[@]}" 2>/dev/null
  done
  kill -CONT -1 2>/dev/null
  return 1
}
"""

_KILL_USER = "exec </dev/null >/dev/null 2>&1\n" + KILL_PASSES + 'kill_passes "$1" "$2"\n'


def kill_user_argv(user: str, spare_pid: int | None = None) -> list[str]:
    """Root's exec that kills every process of ``user`` (a name from /etc/passwd, or a uid; never root) but
    ``spare_pid`` (the agent's shell, for the disk watch)."""
    return ["bash", "-c", _KILL_USER, "kill-user", user, "" if spare_pid is None else str(spare_pid)]


# Run as root on a timeout. The victims are the shell's descendants started at or after the
# cutoff (just before the timed-out command's start, in clock ticks since boot), so earlier background
# jobs are left alone. They are stopped first (no forking away), then interrupted and killed as the
# comment below explains. Builtins only, as in _KILL_USER: with every pid taken each fork (a command
# substitution, a ``sleep``) waited 15 s in bash's retries and failed; the pause reads a new pty's master,
# which nothing writes (``sleep`` where the image has no /dev/ptmx).
_KILL_TREE = r"""
exec </dev/null >/dev/null 2>&1
root=$1; cutoff=$2
victims() {
  local -A parent=() start=()
  local f line pid rest p c frontier=("$root") found=() next
  for f in /proc/[0-9]*/stat; do
    line=; read -r -d '' line < "$f"
    [[ -n $line ]] || continue
    pid=${f#/proc/}; pid=${pid%/stat}; rest=${line##*) }
    set -- $rest; parent[$pid]=$2; start[$pid]=${20}
  done
  while ((${#frontier[@]})); do
    next=()
    for p in "${frontier[@]}"; do
      for c in "${!parent[@]}"; do
        if [[ ${parent[$c]} == "$p" ]]; then next+=("$c"); found+=("$c"); fi
      done
    done
    frontier=("${next[@]}")
  done
  pids=()
  for c in "${found[@]}"; do (( ${start[$c]} >= cutoff )) && pids+=("$c"); done
}
for round in 1 2; do victims; ((${#pids[@]})) && kill -STOP "${pids[@]}"; done
victims
# bash abandons the rest of the line (so `train; validate` does not go on to validate) only
# when its foreground child dies *of SIGINT*; so SIGINT the shell and the stopped victims, let
# them run to die of it, then SIGKILL whatever ignored it. A builtin loop breaks on the SIGINT.
kill -INT "$root"
if ((${#pids[@]})); then
  kill -INT "${pids[@]}"; kill -CONT "${pids[@]}"
  read -r -t 0.2 < /dev/ptmx; (( $? > 128 )) || sleep 0.2
  kill -KILL "${pids[@]}"
fi
exit 0
"""


def kill_tree_argv(shell_pid: int, cutoff_ticks: int) -> list[str]:
    """Root's exec that interrupts the shell ``shell_pid`` and kills its descendants started since ``cutoff_ticks``."""
    return ["bash", "-c", _KILL_TREE, "killtree", str(shell_pid), str(cutoff_ticks)]

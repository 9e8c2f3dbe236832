#!/bin/bash
# Runs as root for every evaluation, so the agent cannot change what is evaluated:
#  1. freeze every process of the agent at once: kill(-1, SIGSTOP) sent *as the agent* reaches all of
#     its processes in one system call (a fork during it is stopped too), repeated until none runs;
#     if one still runs, no evaluation (fail closed);
#  2. check the submission is a regular file (a symlink could point at an answer file);
#  3. put every protected path (evaluation scripts, data/, read-only and secret files) back into the
#     workspace from the pristine copy, replacing whatever the agent left there, symlinked parents
#     included; secrets arrive readable only by the evaluator's user (root:air-eval 0640);
#  4. hand over to eval_runner.py: the evaluator runs as the unprivileged air-eval user from its own
#     private copy of the task, the agent's code (Python tasks) in a separate process as the agent;
#  5. remove the secret files again and let the agent's processes go on (also on failure).
# Prints the runner's framed output: the evaluation's stdout, a separator line, its exit code (or
# "no-submission"), then the tail of its stderr.
set -u
agent=$1 timeout_s=$2 separator=$3 submission_kind=$4 mode=$5
shift 5
WS=/home/agent/workspace
AIR=/opt/air

agent_uid=$(id -u "$agent") agent_gid=$(id -g "$agent")
as_agent() { setpriv --reuid="$agent_uid" --regid="$agent_gid" --clear-groups "$@"; }
field() {  # field NAME FILE: the first word after "NAME:" in a /proc status file
  local key value _
  { while read -r key value _; do [ "$key" = "$1:" ] && { echo "$value"; return; }; done < "$2"; } 2>/dev/null
}
running_agent_pids() {  # the agent's processes with a thread not stopped, traced, zombie or dead
  local dir task
  for dir in /proc/[0-9]*; do
    [ "$(field Uid "$dir/status")" = "$agent_uid" ] || continue
    for task in "$dir"/task/[0-9]*; do
      case $(field State "$task/status") in T | t | Z | X | "") ;; *) echo "${dir#/proc/}"; break ;; esac
    done
  done
}
freeze() {  # a signal takes effect when its process next runs: look again, send again, for up to ~10 s
  local _
  for _ in $(seq 200); do
    as_agent kill -STOP -1 2>/dev/null
    [ -z "$(running_agent_pids)" ] && return 0
    sleep 0.05
  done
  return 1
}
finish() {
  while IFS= read -r rel; do rm -rf "${WS:?}/$rel"; done < "$AIR/secret.txt"
  as_agent kill -CONT -1 2>/dev/null
}
trap finish EXIT
if ! freeze; then
  running=$(running_agent_pids | head -n 20 | tr '\n' ' ')
  echo "The agent's processes could not all be stopped for the evaluation (still running: ${running% }): no score."
  exit 0
fi

# A missing submission is reported with a word where the exit code goes: no script's code can collide.
fail() { printf '\n%s\nno-submission\n%s\n' "$separator" "$1"; exit 0; }

submission=""
case "$submission_kind" in
  csv)
    submission="$WS/submission.csv"
    [ -L "$submission" ] && fail "submission.csv is a symbolic link; write your predictions to a regular file at $submission"
    [ -f "$submission" ] || fail "No submission file found at $submission. Write your predictions there (see the task description), then validate."
    ;;
  yaml)
    submission=$(find "$WS" -type f -name '*.yaml' -not -path "$WS/data/*" 2>/dev/null | sort | head -n 1)
    [ -n "$submission" ] || fail "No submission artefact found: the task expects a config file (*.yaml) in $WS next to your trained model."
    ;;
esac

secret() { grep -qxF -- "$1" "$AIR/secret.txt"; }
restore() {  # $1: workspace-relative path
  local rel=$1 dir=$WS part staged
  local IFS=/
  for part in $(dirname "$rel"); do
    [ "$part" = . ] && continue
    dir=$dir/$part
    if [ -L "$dir" ]; then rm -f "$dir"
    elif [ -e "$dir" ] && [ ! -d "$dir" ]; then mv -f "$dir" "$dir.moved-by-evaluation"
    fi
    [ -d "$dir" ] || install -d -o root -g root -m 755 "$dir"
  done
  rm -rf "${WS:?}/$rel"
  if secret "$rel"; then  # made private in root's folder, then moved in: never readable by the agent
    staged=$(mktemp -p "$AIR")
    cp "$AIR/pristine/$rel" "$staged" && chown root:air-eval "$staged" && chmod 640 "$staged"
    mv -f "$staged" "$WS/$rel"
  else
    cp -a "$AIR/pristine/$rel" "$WS/$rel"
  fi
}
while IFS= read -r rel; do restore "$rel"; done < "$AIR/protected.txt"

args=()
for arg in "$@"; do args+=("${arg//\{submission\}/$submission}"); done
runner_python=$(command -v python3 || echo "${args[0]}")
"$runner_python" -I -B /opt/air-lib/eval_runner.py --mode "$mode" --timeout "$timeout_s" --agent "$agent" \
  --separator "$separator" -- "${args[@]}"
exit 0

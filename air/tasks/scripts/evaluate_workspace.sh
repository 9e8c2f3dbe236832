#!/bin/bash
# Runs as root for every evaluation, so the agent cannot change what is evaluated:
#  1. freeze every process of the agent at once: kill(-1, SIGSTOP) sent *as the agent* reaches all of
#     its processes in one system call (a fork during it is stopped too), repeated until none runs;
#     if one still runs, no evaluation (fail closed);
#  2. hand over to eval_runner.py: it copies the submission into the evaluator's private copy of the task
#     without following links (root never follows a path in the agent's folders), puts the protected
#     files back where a model task's evaluator reads the workspace, and runs the evaluator as the
#     unprivileged air-eval user, the agent's code (Python tasks) in a separate process as the agent;
#  3. let the agent's processes go on (also on failure).
# Prints the runner's framed output: the evaluation's stdout, a separator line, its exit code (or
# "no-submission"), then the tail of its stderr.
set -u
agent=$1 timeout_s=$2 separator=$3 submission_kind=$4 mode=$5
shift 5
WS=/home/agent/workspace

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
# The shell's fork-bomb clean-up (sandbox/shell.py, _KILL_ALL_OF_AGENT) loops the same way with SIGKILL.
freeze() {  # a signal takes effect when its process next runs: look again, send again, for up to ~10 s
  local _
  for _ in $(seq 200); do
    as_agent kill -STOP -1 2>/dev/null
    [ -z "$(running_agent_pids)" ] && return 0
    sleep 0.05
  done
  return 1
}
finish() { as_agent kill -CONT -1 2>/dev/null; }
trap finish EXIT
if ! command -v setpriv >/dev/null; then
  echo "This image lacks setpriv (util-linux), which evaluation needs to stop the agent's processes: no score."
  exit 0
fi
if ! freeze; then
  running=$(running_agent_pids | head -n 20 | tr '\n' ' ')
  echo "The agent's processes could not all be stopped for the evaluation (still running: ${running% }): no score."
  exit 0
fi

# A missing submission is reported with a word where the exit code goes: no script's code can collide.
fail() { printf '\n%s\nno-submission\n%s\n' "$separator" "$1"; exit 0; }

# The evaluator scores a CSV submission from its private copy, where eval_runner.py copies it without
# following links; a config file (model tasks) is found here (find follows no link) and read in place.
submission="" copy=()
case "$submission_kind" in
  csv)
    submission=/opt/air-eval/task/submission.csv copy=(--submission submission.csv)
    ;;
  yaml)
    submission=$(find "$WS" -type f -name '*.yaml' -not -path "$WS/data/*" 2>/dev/null | sort | head -n 1)
    [ -n "$submission" ] || fail "No submission artefact found: the task expects a config file (*.yaml) in $WS next to your trained model."
    ;;
esac

args=()
for arg in "$@"; do args+=("${arg//\{submission\}/$submission}"); done
runner_python=$(command -v python3 || echo "${args[0]}")
"$runner_python" -I -B /opt/air-lib/eval_runner.py --mode "$mode" --timeout "$timeout_s" --agent "$agent" \
  --separator "$separator" "${copy[@]}" -- "${args[@]}"
exit 0

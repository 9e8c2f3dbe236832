#!/bin/bash
# Runs as root for every evaluation, so the agent cannot change what is evaluated:
#  1. freeze the agent's processes (no race with a background job during evaluation);
#  2. check the submission is a regular file (a symlink could point at an answer file);
#  3. put every protected path (evaluation scripts, data/, read-only and secret files) back
#     from the pristine copy, replacing whatever the agent left there, symlinked parents included;
#  4. run the evaluation command in the workspace with a clean environment and a time limit;
#  5. remove the secret files again and let the agent's processes go on (also on failure).
# Prints the evaluation's stdout, a separator line, its exit code (or "no-submission"), then the
# tail of its stderr.
set -u
agent=$1 timeout_s=$2 separator=$3 submission_kind=$4
shift 4
WS=/home/agent/workspace
AIR=/opt/air

finish() {
  while IFS= read -r rel; do rm -rf "${WS:?}/$rel"; done < "$AIR/secret.txt"
  pkill -CONT -u "$agent" 2>/dev/null
}
pkill -STOP -u "$agent" 2>/dev/null
trap finish EXIT

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

restore() {  # $1: workspace-relative path
  local rel=$1 dir=$WS part
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
  cp -a "$AIR/pristine/$rel" "$WS/$rel"
}
while IFS= read -r rel; do restore "$rel"; done < "$AIR/protected.txt"

args=()
for arg in "$@"; do args+=("${arg//\{submission\}/$submission}"); done
cd "$WS" || fail "workspace missing"
env -i PATH="$(cat "$AIR/path.txt")" HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
  ${NVIDIA_VISIBLE_DEVICES:+NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES} \
  timeout -s KILL "$timeout_s" "${args[@]}" > "$AIR/eval.stdout" 2> "$AIR/eval.stderr"
rc=$?
head -c 1000000 "$AIR/eval.stdout"
printf '\n%s\n%d\n' "$separator" "$rc"
tail -c 20000 "$AIR/eval.stderr"
exit 0

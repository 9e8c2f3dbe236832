#!/bin/bash
# Runs as root once per rollout: moves the staged task files into the workspace.
# Layout (MLGym's paths): /home/agent/workspace holds the starter code at its root and local
# datasets in data/. The agent owns what it may change; data/ and the protected files (evaluation
# scripts, read-only files) are root's and read-only. Pristine copies of everything evaluation
# relies on, secrets included, stay in /opt/air/pristine, which only root can read. The evaluation's
# own code goes to /opt/air-lib (root's, readable by all: it holds no secret), and evaluation runs as
# the unprivileged user air-eval, made here when the image lacks it (an MLGym image, say).
set -euo pipefail
agent=$1
WS=/home/agent/workspace
AIR=/opt/air
if ! getent passwd air-eval >/dev/null; then
  getent group air-eval >/dev/null || groupadd --system air-eval
  useradd --system --gid air-eval --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin air-eval
fi
mkdir -p "$WS"
cp -a "$AIR/stage/ws/." "$WS/"
chown -R "$agent:" "$WS"
if [ -d "$WS/data" ]; then
  chown -R root:root "$WS/data"
  chmod -R u+rwX,go+rX,go-w "$WS/data"
fi
while IFS= read -r rel; do
  if [ -e "$WS/$rel" ]; then chown root:root "$WS/$rel"; chmod 644 "$WS/$rel"; fi
done < "$AIR/readonly.txt"
rm -rf "$AIR/stage" /opt/air-lib
install -d -o root -g root -m 755 /opt/air-lib
install -o root -g root -m 644 "$AIR"/bin/*.py /opt/air-lib/
chown -R root:root "$AIR"
chmod -R go-rwx "$AIR"  # private all the way down: a folder above opened by mistake would reveal nothing

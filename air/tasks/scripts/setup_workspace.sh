#!/bin/bash
# Runs as root once per rollout: moves the staged task files into the workspace.
# Layout (MLGym's paths): /home/agent/workspace holds the starter code at its root and local
# datasets in data/. The agent owns what it may change; data/ and the protected files (evaluation
# scripts, read-only files) are root's and read-only. Pristine copies of everything evaluation
# relies on, secrets included, stay in /opt/air/pristine, which only root can read.
set -euo pipefail
agent=$1
WS=/home/agent/workspace
AIR=/opt/air
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
rm -rf "$AIR/stage"
chown -R root:root "$AIR"
chmod 700 "$AIR"

#!/usr/bin/env bash
# The generator benchmark of two commits side by side: OLD_REV and the working tree, alternating rounds, so that
# machine noise falls on both alike. Usage: bench/generator_ab.sh OLD_REV [ROUNDS] [RATE] [NEW_PATHS]
# OLD_REV runs with its own default send path; the working tree with NEW_PATHS (default: greenlet,inline).
# AB_BENCH=stream: bench/stream_worker.py instead (streams through the whole worker; RATE in requests/s; AB_SESSIONS=1
# adds its --sessions).
set -euo pipefail
old_rev=${1:?usage: bench/generator_ab.sh OLD_REV [ROUNDS] [RATE]}
rounds=${2:-2}
rate=${3:-2000}
new_paths=${4:-greenlet,inline}
bench=${AB_BENCH:-open}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/tailrace-ab-XXXXXX)
git -C "$root" worktree add -q -f "$work/old" "$old_rev"
# one harness measures both trees: the working tree's benchmark scripts (their target and pinning) in each — but a
# tree from before the one import name (no tailrace/command_lines.py) keeps its own, which differs only in imports
# and has no --send-paths
old_args=()
if [ -f "$work/old/tailrace/command_lines.py" ]; then
  cp "$root"/bench/{generator_open_loop,stream_worker,stream_sink,common}.py "$work/old/bench/"
  old_args=(--send-paths default --no-write)
elif [ "$bench" = stream ]; then
  echo "AB_BENCH=stream needs an OLD_REV with tailrace/command_lines.py" >&2
  exit 2
fi
mkdir "$work/new" && cp -r "$root"/{bench,contract,harness,endpoints,analysis,tailrace} "$work/new/" 2>/dev/null || true
trap 'git -C "$root" worktree remove --force "$work/old"; rm -rf "$work"' EXIT
# The rooms install as tailrace.<room> (setup.py's package_dir); on PYTHONPATH each tree maps them the same way, so
# that neither tree imports the editable install's (this checkout's) rooms.
for tree in old new; do
  for room in contract harness endpoints analysis; do
    if [ -d "$work/$tree/$room" ] && [ ! -e "$work/$tree/tailrace/$room" ]; then ln -s "../$room" "$work/$tree/tailrace/$room"; fi
  done
done
for round in $(seq "$rounds"); do
  for tree in old new; do
    echo "== $tree ($([ $tree = old ] && echo "$old_rev" || echo "working tree")) round $round"
    if [ "$bench" = stream ]; then
      (cd "$work/$tree" && PYTHONPATH="$work/$tree" "$root/.venv/bin/python" bench/stream_worker.py --seconds 10 \
        --rates "$rate" --repeats 3 --no-write ${AB_SESSIONS:+--sessions} | grep -E '^\{|^\| (independent|sessions)')
      continue
    fi
    if [ $tree = old ]; then args=("${old_args[@]}"); else args=(--send-paths "$new_paths" --no-write); fi
    (cd "$work/$tree" && PYTHONPATH="$work/$tree" "$root/.venv/bin/python" bench/generator_open_loop.py --seconds 10 \
      --rates "$rate" --users 64 --repeats 3 "${args[@]}" | grep -E "closed-loop|open loop|/s: achieved")
  done
done

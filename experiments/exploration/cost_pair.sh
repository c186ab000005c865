#!/usr/bin/env bash
# One `cirbench run` back to back on two checkouts (issue 43's cost target), each from an
# empty cache and results folder; each checkout needs its own .venv (pip install -e ".[all]").
#   cost_pair.sh OLD_CHECKOUT NEW_CHECKOUT [run options]    e.g. a worktree of 4e79e0a, then main
# The run options default to the mission's command (--methods conesep,hug --noise 0.2,0.5,0.8);
# the calibration grid's sprc cells: cost_pair.sh OLD NEW --methods sprc --noise 0,0.5,0.8.
# Prints each wall time; the cells' own times are in /tmp/cost-out-{old,new}/runs.
set -u
old=$1 new=$2; shift 2
[ $# -gt 0 ] || set -- --methods conesep,hug --noise 0.2,0.5,0.8
t() { label=$1; dir=$2; shift 2; rm -rf "/tmp/cost-cache-$label" "/tmp/cost-out-$label"
  s=$(date +%s.%N)
  (cd "$dir" && .venv/bin/cirbench run "$@" --cache-dir "/tmp/cost-cache-$label" --output "/tmp/cost-out-$label" > "/tmp/cost-$label.log" 2>&1)
  rc=$?; e=$(date +%s.%N)
  echo "$label rc=$rc $(python3 -c "print(round($e - $s, 1))") s"; }
t old "$old" "$@"
t new "$new" "$@"

#!/usr/bin/env bash
# One row of the exploration table (issue 43): calibrate a setting on the given seeds.
#   calibrate_setting.sh NAME START_FILE DATASET EPOCHS [SEEDS] [extra calibrate args...]
# BACKBONE=tiny-file-lr-half (plugin.py) fine-tunes at another rate.
# Results under results/explore/NAME; the calibration table in results/explore/NAME/calibration.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
name=$1 start=$2 dataset=$3 epochs=$4 seeds=${5:-0}
shift 4; [ $# -gt 0 ] && shift
export CIRBENCH_PLUGINS=experiments/exploration/plugin.py
weights=(--backbone "${BACKBONE:-tiny-file}" --weights "$start")
[ "$start" = default ] && weights=()
cirbench calibrate "${weights[@]}" --dataset "$dataset" --epochs "$epochs" --seeds "$seeds" \
    --output "results/explore/$name" --jobs 2 "$@"
python experiments/exploration/row.py "results/explore/$name"

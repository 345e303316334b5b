#!/usr/bin/env bash
# Retrain the shipped H100 predictor and regenerate every report PREDICTOR.md quotes, in the
# order they depend on each other (~6 min on the dev machine). Run from the repo root after a
# change to the predictor's terms, ties or training file:
#   bash benchmarks/h100_reports.sh
set -euo pipefail
S=codl_tvm/data/samples-x86-cuda-h100.csv
P=codl_tvm/data/predictor-x86-cuda.json
R=benchmarks/results
STRATA=(deep=$R/deep-h100/deep-samples.csv deep2=$R/deep2-h100/deep2-samples.csv
        body=$R/body-h100/body-samples.csv pointwise=$R/pointwise-h100/pointwise-samples.csv
        pools=$R/pools-h100/pools-samples.csv padpools=$R/padpool-h100/padpool-samples.csv
        refetch=$R/refetch-h100/refetch-samples.csv)
EXTRA=()
for s in "${STRATA[@]}"; do EXTRA+=(--extra "$s"); done

python -m codl_tvm.predictor train $S -o $P
wc -c $P
python tests/test_predictor_speed_invariance.py --record
python benchmarks/predictor_seeds.py $S "${EXTRA[@]}" --json $R/predictor-h100-seeds.json
python benchmarks/predictor_seeds.py $S --seeds 10 --by algorithm | tail -n 20
python benchmarks/strata_report.py $P "${STRATA[@]}" \
    --planes probe=$R/probe-h100/probe.csv \
    --planes pointwise=$R/pointwise-h100/pointwise-direct-k1.csv \
    --planes file=$S --json $R/strata-h100.json > /dev/null
for m in YOLO-V2 VGG-16 POSENET; do
    python benchmarks/predictor_report.py $S --test-models $m --json $R/predictor-h100-$m.json \
        > /dev/null
done
python benchmarks/predictor_report.py $R/samples-devcpu.csv --json $R/predictor-devcpu.json \
    > /dev/null
python benchmarks/lease_report.py $S $R/cpu40-h100/cpu40-new.csv \
    --json $R/cpu40-h100/lease-report.json > /dev/null
python benchmarks/remeasure_bundle.py pool $S $R/cpu40-h100/cpu40-new.csv --rescale \
    -o $R/cpu40-h100/cpu40-pooled.csv
python benchmarks/remeasure_bundle.py merge $S $R/cpu40-h100/cpu40-pooled.csv -o /tmp/merged.csv
python benchmarks/predictor_seeds.py /tmp/merged.csv --json $R/cpu40-h100/seeds-if-pooled.json \
    | head -n 8
python benchmarks/term_trials.py $S --blind $R/deep-h100/deep-samples.csv \
    --blind $R/deep2-h100/deep2-samples.csv --blind $R/body-h100/body-samples.csv \
    --json $R/term-trials.json
python benchmarks/heldout_cnn_report.py $P $R/resnet-h100/joined/rnjoin.csv $S \
    --json $R/resnet-h100/resnet-report.json
python benchmarks/pad_gather_report.py $S $R/deep-h100/deep-samples.csv \
    $R/deep2-h100/deep2-samples.csv $R/body-h100/body-samples.csv \
    $R/pointwise-h100/pointwise-samples.csv --json $R/pad-gather.json | tail -n 12
